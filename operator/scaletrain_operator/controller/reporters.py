"""Whose a pushed progress report is, and what housekeeping writes of it (report_server.py serves the endpoint).

A report is taken only from a pod of a job's current gang: its bearer token must be a service-account token for
our audience (a TokenReview says whose, and which pod it is bound to), and that pod must be a running one the
gang's own Job owns (cache.children_view), with the uid the token names.

Sized for 1,000 jobs reporting every 5 s (200 reports a second) on the operator's one process:
- one status write per job and pass, whatever the rate of reports (housekeeping coalesces them);
- one TokenReview per token and TOKEN_CACHE_SECONDS (a pod's token lives 10 minutes), not per report: a
  report with a known token costs its TLS handshake and a JSON parse (1.2 ms of the endpoint's CPU,
  bench/status_reports.py);
- no tenant delays another: the TokenReviews of the tokens that one address sends (the connection's peer,
  which a client cannot forge, unlike what a token claims before it is reviewed) take at most
  REVIEWS_PER_ADDRESS of the server's reviewer threads at once, and the rest of that address's unknown tokens
  are answered 429 at once. A refused token is remembered too, so that resending it costs nothing; the
  verdicts are kept in two bounded caches, the refused apart from the accepted, so that a flood of forged
  tokens evicts no pod's verdict, and keeping one costs the same whatever the caches hold."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any

from ..api.conditions import PodPhase
from ..api.job import ScaleTrainJob
from ..api.timestamps import timestamp
from ..policy.pods import pod_index, pod_phase
from ..render.status_reports import AUDIENCE
from ..report_server import Refused, Report, Sender
from .cache import Cache, job_of_child
from .cluster import Cluster, describe

TOKEN_CACHE_SECONDS = 300.0  # a reviewed token's verdict, at most until the token expires
REFUSED_CACHE_SECONDS = 60.0
# A TokenReview that failed (the API server down, RBAC missing) is no verdict on the token, but is not asked again
# for each of the reports that keep coming meanwhile.
UNREVIEWED_CACHE_SECONDS = 5.0
REVIEWS_PER_ADDRESS = 2
MAX_VERDICTS = 100_000  # of each kind: about 2 tokens per pod of a 10-minute window, and refused tokens as many
POD_NAME = "authentication.kubernetes.io/pod-name"  # what a TokenReview says of a token bound to a pod
POD_UID = "authentication.kubernetes.io/pod-uid"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
PodOf = tuple[str, str, str]  # the namespace, name and uid of the pod a token is bound to

log = logging.getLogger(__name__)


# Fields of status.progress that the operator sets when it copies a report in, not the script.
OPERATORS_OWN = ("generation", "readAt", "reportedAt", "staleAfter")


def pushed_progress(job: ScaleTrainJob, gang_generation: int, report: Report | None, since: datetime) -> dict | None:
    """What housekeeping copies into status.progress for a job whose current gang pushes its reports, or None
    for one whose rank 0 is read instead (/progress). The newest report of this gang; or, with none since this
    process began (an operator restart, a failover), what the status holds of this gang's earlier reports.
    With statusReports.hangAfterSeconds, the promise a hang is judged by (policy/hang.py), made for the script:
    its next report within that long of its last one, and of `since` at the earliest, since no report could
    arrive before then."""
    before = job.status.progress if job.status is not None else None
    if report is not None and report.gang_generation == gang_generation:
        progress, last = report.progress, report.received_at
    elif before is not None and before.reported_at is not None and before.generation == gang_generation:
        held = before.model_dump(mode="json", by_alias=True, exclude_none=True)
        progress, last = {k: v for k, v in held.items() if k not in OPERATORS_OWN}, before.reported_at
    else:
        return None
    pushed = progress | {"reportedAt": timestamp(last)}
    if (hang_after := job.spec.status_reports.hang_after_seconds) is not None:
        pushed["staleAfter"] = timestamp(max(last, since) + timedelta(seconds=hang_after))
    return pushed


class Senders:
    """Who sent a report, from its bearer token: a TokenReview (cached) names the pod the token is bound to,
    and the operator's cache says whether that pod is one of a current gang."""

    def __init__(self, cluster: Cluster, cache: Cache):
        self.cluster, self.cache = cluster, cache
        # By token digest: until when each verdict holds, oldest first (least recently kept).
        self._accepted: OrderedDict[str, tuple[float, PodOf]] = OrderedDict()
        self._refused: OrderedDict[str, tuple[float, Refused]] = OrderedDict()
        self._lock = threading.Lock()
        self._reviewing: dict[str, int] = {}  # TokenReviews under way, by the address that sent the token

    def sender(self, token: str, address: str) -> Sender:
        """The gang of the pod `token` (sent from `address`) is bound to (Refused: 401, 403 or 429, and why)."""
        namespace, pod_name, pod_uid = self.pod_of(token, address)
        pod = self.cache.pods.get(namespace, pod_name)
        job = job_of_child(pod) if pod is not None else None
        if pod is None or job is None or pod["metadata"].get("uid") != pod_uid:
            raise Refused(403, f"pod {namespace}/{pod_name} is no pod of a ScaleTrainJob's gang")
        observed = self.cache.observed(*job)
        gang = observed.pods  # those of the current gang that its own Job owns
        if not any(p["metadata"].get("uid") == pod_uid and pod_phase(p) == PodPhase.RUNNING for p in gang):
            raise Refused(403, f"pod {namespace}/{pod_name} is not a running pod of {job[1]}'s current gang")
        if (rank := pod_index(pod)) is None:
            raise Refused(403, f"pod {namespace}/{pod_name} has no completion index")
        # The generation observed.pods are of: the newest Job's (an in-place restart moves it on), else 0 (as
        # cache.children_view chose them, with no hint).
        return Sender(job, max(observed.jobs, default=0), rank)

    def pod_of(self, token: str, address: str) -> PodOf:
        """The namespace, name and uid of the pod `token` is bound to, reviewed once per TOKEN_CACHE_SECONDS."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            for verdicts in (self._accepted, self._refused):
                held = verdicts.get(digest)
                if held is not None and held[0] > now:
                    return _verdict(held[1])
            if self._reviewing.get(address, 0) >= REVIEWS_PER_ADDRESS:
                raise Refused(429, "too many tokens under review from this address; report again later")
            self._reviewing[address] = self._reviewing.get(address, 0) + 1
        try:
            verdict, lifetime = self._review(token)
        finally:
            with self._lock:
                if (left := self._reviewing.pop(address) - 1) > 0:
                    self._reviewing[address] = left
        with self._lock:
            verdicts = self._refused if isinstance(verdict, Refused) else self._accepted
            verdicts[digest] = (now + lifetime, verdict)
            verdicts.move_to_end(digest)
            if len(verdicts) > MAX_VERDICTS:  # the least recently kept goes: expired, or a token long unused
                verdicts.popitem(last=False)
        return _verdict(verdict)

    def _review(self, token: str) -> tuple[PodOf | Refused, float]:
        """The pod `token` is bound to, or why it is refused, and how long that verdict holds."""
        try:
            status = self.cluster.review_token(token, AUDIENCE)
        except Exception as error:  # the API server's trouble, not the token's
            log.warning("a status report's token could not be reviewed: %s", describe(error))
            return Refused(503, f"the token could not be reviewed: {describe(error)}"), UNREVIEWED_CACHE_SECONDS
        user = status.get("user") or {}
        extra, username = user.get("extra") or {}, user.get("username") or ""
        pod_name, pod_uid = (extra.get(POD_NAME) or [None])[0], (extra.get(POD_UID) or [None])[0]
        if not status.get("authenticated") or AUDIENCE not in (status.get("audiences") or []):
            return Refused(
                401, f"not a token for {AUDIENCE}: {status.get('error') or 'refused'}"
            ), REFUSED_CACHE_SECONDS
        if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not pod_name or not pod_uid:
            return Refused(401, "not a service-account token bound to a pod"), REFUSED_CACHE_SECONDS
        namespace = username.removeprefix(SERVICE_ACCOUNT_PREFIX).split(":")[0]
        expires = _claims(token).get("exp")
        left = expires - time.time() if isinstance(expires, int | float) else TOKEN_CACHE_SECONDS
        return (namespace, pod_name, pod_uid), max(0.0, min(TOKEN_CACHE_SECONDS, left))


def _verdict(verdict: PodOf | Refused) -> PodOf:
    if isinstance(verdict, Refused):
        raise verdict
    return verdict


def _claims(token: str) -> dict[str, Any]:
    """A JWT's claims, unverified: only for what a TokenReview then confirms (its expiry)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, RecursionError):
        return {}
    return claims if isinstance(claims, dict) else {}
