"""Housekeeping, every progressIntervalSeconds: rank 0's progress of Running jobs into their status (all
read at once, each with its own deadline; or ProgressUnreachable when it cannot be read; or, for a script
that pushes its reports, the newest of them: report_server.py), the TTL of
finished ones, and why a gang's pods are missing (PodCreationFailed). A plain thread rather than
a kopf timer, which would put a finalizer on every job. A standby replica stays passive here too (peering.py).

A status written here changes what the job's reconcile decides from (a new progress promise to hold the
gang to), but its watch event is no news to the cache, which kept the answer to the patch, and the work
queue drops such an echo for a settled job. So each such write queues the job itself (`reconcile_soon`).

The jobs come from the operator's cache (cache.py), not from a list per pass. A TTL deletion is
conditional on the version it was decided from, so a stale copy (say, before the user raised the TTL)
deletes nothing; the next pass decides again from the newer one."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.validation import ProblemsError

from ..api import naming
from ..api.job import ScaleTrainJob, parse_job
from ..api.timestamps import parse_timestamp
from ..policy.pods import POD_CREATION_FAILED, pod_index, pod_phase
from ..progress import read_all_progress
from ..render.child_annotations import suspended_by_operator
from ..report_server import Reports
from ..validation.progress_answer import Unreadable, status_patch
from . import metrics, peering
from .cache import Key
from .cluster import Cluster, Conflict, ObjectRef, StatusRefused
from .decision import Event, Observed, current_gang
from .reporters import pushed_progress
from .settings import OperatorConfig
from .status import bounded, condition, phase_of, with_condition
from .ttl import decide_ttl

log = logging.getLogger(__name__)
Answer = dict[str, Any] | Unreadable  # rank 0's progress, or why it could not be read

STATUS_WRITERS = 8  # status patches at once, after the pass's reads
HOUSEKEEPING_CONNECTIONS = STATUS_WRITERS + 1  # API calls at once: the status writers, or the pass itself
UNREACHABLE_AFTER_READS = 2  # failed reads in a row before ProgressUnreachable: one may meet a restarting server
PROGRESS_UNREACHABLE = "ProgressUnreachable"
QUEUED = "Queued"  # Kueue holds the gang's Job back, and why
POD_CREATION_GRACE = timedelta(seconds=3)  # a new Job's pods take a moment; after that, a missing one has a reason
# What of an answer hang detection reads (policy/hang.py), with the step its message names: written alone when the
# API server refuses the whole answer, so that a job whose progress cannot be written is still found hung.
PROMISE = ("step", "reportedAt", "staleAfter")


class Housekeeping:
    def __init__(
        self, config: OperatorConfig, cluster: Cluster, reconcile_soon: Callable[[Key], None], reports: Reports
    ):
        self.config, self.cluster, self.reconcile_soon, self.reports = config, cluster, reconcile_soon, reports
        # Whether this replica was the active one at the last look (report_server.py asks); standalone, at once.
        self.active = not config.peering
        self._labelled: bool | None = None  # what this replica's pod says of it (ACTIVE_REPLICA_LABEL); None: unknown
        self._stop = threading.Event()
        self._unread: dict[Key, int] = {}  # failed progress reads in a row, by job
        self._said_left_out: set[Key] = set()  # jobs whose MetricsLeftOut Event was posted
        self._thread = threading.Thread(target=self._loop, name="housekeeping", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.config.progress_interval_seconds):
            try:
                active = self.active_replica()
                if active and not self.active:  # a takeover: the standby took no report, so silence counts from now
                    self.reports.since = datetime.now(timezone.utc)
                    log.info("this replica is the active one now: it takes status reports and keeps house")
                self.active = active
                self.label_own_pod()
                if self.active:
                    self.run_pass()
            except Exception:  # best effort: never let this break the operator
                log.exception("housekeeping pass failed")

    def run_pass(self) -> None:
        """The TTLs and the reasons for missing pods first, then the progress reads, all at once: a job's
        endpoint is its tenant's code, and however it answers (slowly, at length, or garbled), it costs
        at most one read's deadline and delays no other job, nor any TTL."""
        jobs = self.cluster.cache.scaletrainjobs.all()
        metrics.report_jobs(jobs)
        running = [raw for raw in jobs if phase_of(raw) == "Running"]
        failures = functools.cache(self.cluster.pod_creation_failures)  # one list per namespace and pass, if any
        waits = functools.cache(lambda namespace: self.cluster.queue_waits(namespace))  # the same, for queued jobs
        for raw in jobs:
            if phase_of(raw) != "Running":
                isolated("ttl", raw, self.expire)
            if phase_of(raw) in ("Pending", "Running"):
                isolated("pods", raw, functools.partial(self.report_pod_creation, failures=failures))
                isolated("queue", raw, functools.partial(self.report_queue_wait, waits=waits))
        running_keys = {(raw["metadata"]["namespace"], raw["metadata"]["name"]) for raw in running}
        self._unread = {key: failures for key, failures in self._unread.items() if key in running_keys}
        self._said_left_out &= running_keys
        self.reports.keep_only(running_keys)
        found = self.rank_0s(running)
        pushed = [self.pushed(rank_0) for _, rank_0 in found]
        to_read = [rank_0.url for (_, rank_0), report in zip(found, pushed, strict=True) if report is None]
        answers = iter(read_all_progress(to_read, self.config.progress_timeout_seconds))
        read = [(raw, rank_0, report or next(answers)) for (raw, rank_0), report in zip(found, pushed, strict=True)]
        if read:
            with ThreadPoolExecutor(min(len(read), STATUS_WRITERS), thread_name_prefix="progress") as writers:
                for raw, rank_0, answer in read:
                    writers.submit(
                        isolated, "progress", raw, functools.partial(self.record_progress, rank_0=rank_0, answer=answer)
                    )

    def pushed(self, rank_0: Rank0) -> dict[str, Any] | None:
        """The progress the job's script pushed (report_server.py), or None: rank 0's /progress is read."""
        key = (rank_0.job.metadata.namespace, rank_0.job.name)
        return pushed_progress(rank_0.job, rank_0.gang_generation, self.reports.newest(key), self.reports.since)

    def label_own_pod(self) -> None:
        """Say on this replica's pod whether it is the active one (naming.ACTIVE_REPLICA_LABEL), so that the
        chart's status-report Service sends reports only to it: a standby could not tell whose they are. Only
        where the operator knows its pod (the chart gives it), and only when that changes."""
        config = self.config
        if not config.pod_name or self._labelled == self.active:
            return
        self.cluster.label_pod(config.pod_namespace, config.pod_name, naming.ACTIVE_REPLICA_LABEL, self.active)
        self._labelled = self.active

    def active_replica(self) -> bool:
        """Standalone, or the active one of the peered replicas (kopf pauses the others' watches)."""
        config = self.config
        if not config.peering:
            return True
        status = self.cluster.peering_status(config.peering, config.namespaces)
        now = datetime.now(timezone.utc)
        return status is not None and peering.is_active(status, config.peering_identity, config.peering_priority, now)

    def expire(self, raw: dict[str, Any]) -> None:
        """Delete a finished job (also one whose spec failed validation) once its TTL has passed."""
        metadata, status, spec = raw["metadata"], raw.get("status") or {}, raw.get("spec") or {}
        finished_at = parse_timestamp(status.get("completionTime") or metadata["creationTimestamp"])
        decision = decide_ttl(
            status.get("phase"), finished_at, spec.get("ttlSecondsAfterFinished"), datetime.now(timezone.utc)
        )
        try:
            self.cluster.apply(ObjectRef.of(raw), decision)
        except Conflict as stale:
            log.info("TTL not applied: %s", stale)

    def report_pod_creation(self, raw: dict[str, Any], failures: Callable[[str], dict[str, str]]) -> None:
        """While the gang's Job lacks pods, why: the Job controller's newest FailedCreate Event (Pod
        Security admission, a quota) becomes the condition PodCreationFailed and a Warning Event, which
        nothing else would show on the job; once the pods are there the condition turns False. The Events
        come from `failures(namespace)`: the messages by Job name (Cluster.pod_creation_failures)."""
        metadata, status = raw["metadata"], raw.get("status") or {}
        gang_generation, observed = self.current_gang_of(raw)
        child = observed.jobs.get(gang_generation)
        if child is None or (child.get("spec") or {}).get("suspend"):
            return
        namespace, current_job, pods = metadata["namespace"], child["metadata"]["name"], observed.pods
        held = next((c for c in status.get("conditions") or [] if c["type"] == POD_CREATION_FAILED), None)
        if len(pods) >= (child.get("spec") or {}).get("completions", 1):  # the gang's size (elastic: not nodes)
            message = None
        elif datetime.now(timezone.utc) - parse_timestamp(child["metadata"]["creationTimestamp"]) < POD_CREATION_GRACE:
            return  # the Job controller is still at it
        else:
            message = failures(namespace).get(current_job)
        said = held["message"] if held is not None and held["status"] == "True" else None  # what the job shows
        if said == (bounded(message) if message is not None else None):
            return
        if message is None:
            self.set_condition(raw, POD_CREATION_FAILED, False, "PodsCreated", "the gang's pods were created")
        elif self.set_condition(raw, POD_CREATION_FAILED, True, "FailedCreate", message, rewrite=True):
            event = Event("Warning", "PodCreationFailed", f"the Job {current_job}: {message}")
            self.cluster.post_event(ObjectRef.of(raw), event)

    def report_queue_wait(self, raw: dict[str, Any], waits: Callable[[str], dict[str, str]]) -> None:
        """While Kueue holds a gang's Job back (queued, or suspended at its creation where Kueue manages every
        Job: any suspension but the operator's own), why, in Kueue's words (its Workload's QuotaReserved
        message: a quota, or a topology no domain of which holds the gang), as the condition Queued, which
        the job's status message repeats (reconcile.waiting_for_admission). Queued turns False once Kueue
        admitted the Job."""
        status, spec = raw.get("status") or {}, raw.get("spec") or {}
        gang_generation, observed = self.current_gang_of(raw)
        child = observed.jobs.get(gang_generation)
        if child is None or spec.get("suspend") or suspended_by_operator(child):
            return
        current_job = child["metadata"]["name"]
        held = next((c for c in status.get("conditions") or [] if c["type"] == QUEUED), None)
        if not (child.get("spec") or {}).get("suspend"):
            if held is not None and held["status"] == "True":
                self.set_condition(raw, QUEUED, False, "Admitted", f"Kueue admitted Job {current_job}")
            return
        reason = waits(raw["metadata"]["namespace"]).get(child["metadata"]["uid"])
        if reason is not None and (held is None or held["message"] != bounded(reason)):
            self.set_condition(raw, QUEUED, True, "WaitingForAdmission", reason, rewrite=True)

    def rank_0s(self, running: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Rank0]]:
        """Where each Running job's rank 0 serves its progress, found job by job (isolated), so that no job
        stops the others' reads; run_pass then reads them all at once: a pass costs about one read's deadline,
        however many jobs there are and however slowly their endpoints answer."""
        found: list[tuple[dict[str, Any], Rank0]] = []

        def find(raw: dict[str, Any]) -> None:
            if (rank_0 := self.rank_0_of(raw)) is not None:
                found.append((raw, rank_0))

        for raw in running:
            isolated("progress", raw, find)
        return found

    def rank_0_of(self, raw: dict[str, Any]) -> Rank0 | None:
        """Where rank 0 of the job's newest gang serves its progress: only a Running pod of index 0 that the
        gang's own Job owns (cache.children_view); anyone can give a pod its labels, and a forged rank 0 must
        never be read. None while there is no such pod. The gang is reconcile.current_gang: the newest Job
        found, not the status's currentJob, which a lost status write leaves behind."""
        try:
            job = parse_job(raw)
        except ProblemsError:  # an edited spec that reconciling is about to mark invalid
            return None
        gang_generation, observed = self.current_gang_of(raw)
        rank_0 = next((pod for pod in observed.pods if pod_index(pod) == 0 and pod_phase(pod) == "Running"), None)
        pod_ip = ((rank_0 or {}).get("status") or {}).get("podIP")
        if gang_generation not in observed.jobs or not pod_ip:
            return None
        url = self.config.progress_url.format(
            pod=f"{naming.child_job_name(job.name, gang_generation)}-0",
            pod_ip=f"[{pod_ip}]" if ":" in pod_ip else pod_ip,  # an IPv6 address is bracketed in a URL
            service=naming.service_name(job.name),
            namespace=job.metadata.namespace,
            port=job.spec.metrics_port,
        )
        return Rank0(job, gang_generation, url)

    def current_gang_of(self, raw: dict[str, Any]) -> tuple[int | None, Observed]:
        """The stored job `raw`'s current gang generation (reconcile.current_gang), and its children."""
        metadata, current_job = raw["metadata"], (raw.get("status") or {}).get("currentJob")
        hint = naming.generation_of(metadata["name"], current_job)
        observed = self.cluster.cache.observed(metadata["namespace"], metadata["name"], hint)
        return current_gang(metadata["name"], current_job, observed), observed

    def record_progress(self, raw: dict[str, Any], rank_0: Rank0, answer: Answer) -> None:
        """Rank 0's answer into status.progress, replacing what an earlier answer said (progress.py
        status_patch), with when it was read; or, when it could not be read twice in a row after this gang
        had answered, the condition ProgressUnreachable with why. An unreadable endpoint is not a silent
        trainer: it is never taken for a hang. A loss that turned non-finite and damaged checkpoints the
        trainer set aside while resuming each get a Warning Event once."""
        where = ObjectRef.of(raw)
        key = (where.namespace, where.name)
        before = (raw.get("status") or {}).get("progress") or {}
        if isinstance(answer, Unreadable):
            failures = self._unread[key] = self._unread.get(key, 0) + 1
            if before.get("generation") == rank_0.gang_generation and failures >= UNREACHABLE_AFTER_READS:
                message = (
                    f"rank 0's progress endpoint {rank_0.url} cannot be read ({answer}); a hang is found only from "
                    "rank 0's own answers, so the gang is not restarted for this"
                )
                self.set_condition(raw, PROGRESS_UNREACHABLE, True, "ReadFailed", message)
            return
        self._unread.pop(key, None)
        read_at = datetime.now(timezone.utc)
        conditions = (raw.get("status") or {}).get("conditions") or []
        unreachable = next((c for c in conditions if c["type"] == PROGRESS_UNREACHABLE), None)
        patch: dict[str, Any] = {"progress": status_patch(answer, rank_0.gang_generation, before, read_at)}
        if unreachable is not None and unreachable["status"] == "True":
            readable = condition(
                PROGRESS_UNREACHABLE, False, "Read", "rank 0's progress endpoint answers again",
                read_at, raw["metadata"].get("generation"),
            )  # fmt: skip
            patch["conditions"] = with_condition(conditions, readable)
        try:  # only onto the version decided from: a read landing after the job succeeded must not undo that
            self.cluster.patch_status(where, patch)
        except Conflict as stale:  # the next pass reads again, from the newer copy
            log.info("progress not copied: %s", stale)
            return
        except StatusRefused:  # logged, counted and said (Cluster.patch_status); hang detection still needs the promise
            promise = {name: answer[name] for name in PROMISE if name in answer}
            try:
                self.cluster.patch_status(
                    where, {"progress": status_patch(promise, rank_0.gang_generation, before, read_at)}
                )
            except (Conflict, StatusRefused) as unwritten:
                log.info("progress promise not copied: %s", unwritten)
                return
        self.reconcile_soon(key)
        self.announce(where, rank_0.job, before, answer)
        self.say_metrics_left_out(where)

    def set_condition(
        self, raw: dict[str, Any], kind: str, status: bool, reason: str, message: str, rewrite: bool = False
    ) -> bool:
        """The condition `kind` turned to `status`, written (and the job queued) only when it turns: a
        message that differs from pass to pass (the read failed otherwise) is no news worth a write. With
        `rewrite`, the caller found news in the message: it is written, with the time the condition last
        turned kept. Whether it was written (a Conflict leaves it to the next pass, from the newer copy)."""
        conditions = (raw.get("status") or {}).get("conditions") or []
        held = next((c for c in conditions if c["type"] == kind), None)
        unturned = held is not None and held["status"] == ("True" if status else "False")
        if unturned and not rewrite:
            return False
        update = condition(kind, status, reason, message, datetime.now(timezone.utc), raw["metadata"].get("generation"))
        if unturned and held.get("lastTransitionTime"):
            update["lastTransitionTime"] = held["lastTransitionTime"]
        where = ObjectRef.of(raw)
        try:
            self.cluster.patch_status(where, {"conditions": with_condition(conditions, update)})
        except Conflict as stale:
            log.info("%s not reported: %s", kind, stale)
            return False
        self.reconcile_soon((where.namespace, where.name))
        return True

    def announce(self, where: ObjectRef, job: ScaleTrainJob, before: dict[str, Any], answer: dict[str, Any]) -> None:
        """A Warning Event for what the answer newly says went wrong: a non-finite loss, checkpoints set aside."""
        if answer.get("lossFinite") is False and before.get("lossFinite") is not False:
            message = f"rank 0 reports a non-finite loss at step {answer.get('step', '?')}: the run diverged"
            self.cluster.post_event(where, Event("Warning", "LossNotFinite", message))
        set_aside = answer.get("checkpointsSetAside") or []
        if set_aside and set_aside != before.get("checkpointsSetAside"):
            in_dir = f" in {job.spec.training.checkpoint.dir}" if job.spec.training is not None else ""
            message = (
                f"damaged checkpoints moved aside{in_dir}: {', '.join(set_aside)}; "
                "training resumed from the newest sound one (rank 0's log says what was wrong)"
            )
            self.cluster.post_event(where, Event("Warning", "CheckpointSetAside", message))

    def say_metrics_left_out(self, where: ObjectRef) -> None:
        """The first time the job's script reports more metrics than the status holds, a Warning Event says which
        were left out: once per job (and per job's life, since the Event's name is made from it)."""
        key = (where.namespace, where.name)
        report = self.reports.newest(key)
        if report is None or not report.metrics_left_out or key in self._said_left_out:
            return
        self._said_left_out.add(key)
        left_out = report.metrics_left_out
        message = (
            f"the script reports {wire.MAX_METRICS + len(left_out)} metrics, and status.progress.metrics holds the "
            f"first {wire.MAX_METRICS} by name; left out: {', '.join(left_out)}"
        )
        log.warning("%s/%s: %s", where.namespace, where.name, message)
        self.cluster.post_event(where, Event("Warning", "MetricsLeftOut", message, "reports"))


class Rank0(NamedTuple):
    """Where the newest gang's rank 0 of a Running job serves its progress."""

    job: ScaleTrainJob
    gang_generation: int
    url: str


def isolated(step: str, raw: dict[str, Any], housekeep: Callable[[dict[str, Any]], None]) -> None:
    """One job's housekeeping step: whatever goes wrong is logged and counted, and stops no other job."""
    try:
        housekeep(raw)
    except Exception:
        metrics.HOUSEKEEPING_FAILURES.labels(step).inc()
        metadata = raw.get("metadata") or {}
        log.exception("housekeeping (%s) of %s/%s failed", step, metadata.get("namespace"), metadata.get("name"))
