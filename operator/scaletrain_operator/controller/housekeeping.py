"""Housekeeping, every progressIntervalSeconds: rank 0's progress of Running jobs into their status (all
read at once, each with its own deadline; or ProgressUnreachable when it cannot be read; or, for a script
that pushes its reports, the newest of them: report_server.py), the TTL of
finished ones, why a gang's pods are missing (PodCreationFailed) and why Kueue holds it back (Queued). What
each writes is decided purely (housekeeping_decisions.py); here are the thread, the reads and the writes. A
plain thread rather than a kopf timer, which would put a finalizer on every job. A standby replica stays
passive here too (peering.py).

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
from datetime import datetime, timezone
from typing import Any

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.validation import ProblemsError

from ..api import naming
from ..api.conditions import ConditionType, EventReason, JobPhase, PodPhase
from ..api.job import parse_job
from ..api.timestamps import parse_timestamp
from ..policy.pods import pod_index, pod_phase
from ..progress import read_all_progress
from ..report_server import Reports
from ..validation.progress_answer import Unreadable
from . import metrics, peering
from .cache import Key
from .cluster import Cluster, Conflict, ObjectRef, StatusRefused
from .decision import Decision, Event, Observed, current_gang
from .housekeeping_decisions import (
    Rank0,
    decide_pod_creation,
    decide_progress,
    decide_promise_only,
    decide_queue_wait,
    decide_unreachable,
)
from .reporters import pushed_progress
from .settings import OperatorConfig
from .status import phase_of
from .ttl import decide_ttl

log = logging.getLogger(__name__)
Answer = dict[str, Any] | Unreadable  # rank 0's progress, or why it could not be read

STATUS_WRITERS = 8  # status patches at once, after the pass's reads
HOUSEKEEPING_CONNECTIONS = STATUS_WRITERS + 1  # API calls at once: the status writers, or the pass itself


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
        running = [stj for stj in jobs if phase_of(stj) == JobPhase.RUNNING]
        failures = functools.cache(self.cluster.pod_creation_failures)  # one list per namespace and pass, if any
        waits = functools.cache(lambda namespace: self.cluster.queue_waits(namespace))  # the same, for queued jobs
        for stj in jobs:
            if phase_of(stj) != JobPhase.RUNNING:
                isolated("ttl", stj, self.expire)
            if phase_of(stj) in (JobPhase.PENDING, JobPhase.RUNNING):
                isolated("pods", stj, functools.partial(self.report_pod_creation, failures=failures))
                isolated("queue", stj, functools.partial(self.report_queue_wait, waits=waits))
        running_keys = {(stj["metadata"]["namespace"], stj["metadata"]["name"]) for stj in running}
        self._unread = {key: failures for key, failures in self._unread.items() if key in running_keys}
        self._said_left_out &= running_keys
        self.reports.keep_only(running_keys)
        found = self.rank_0s(running)
        pushed = [self.pushed(rank_0) for _, rank_0 in found]
        to_read = [rank_0.url for (_, rank_0), report in zip(found, pushed, strict=True) if report is None]
        answers = iter(read_all_progress(to_read, self.config.progress_timeout_seconds))
        read = [(stj, rank_0, report or next(answers)) for (stj, rank_0), report in zip(found, pushed, strict=True)]
        if read:
            with ThreadPoolExecutor(min(len(read), STATUS_WRITERS), thread_name_prefix="progress") as writers:
                for stj, rank_0, answer in read:
                    writers.submit(
                        isolated, "progress", stj, functools.partial(self.record_progress, rank_0=rank_0, answer=answer)
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

    def expire(self, stj: dict[str, Any]) -> None:
        """Delete a finished job (also one whose spec failed validation) once its TTL has passed."""
        metadata, status, spec = stj["metadata"], stj.get("status") or {}, stj.get("spec") or {}
        finished_at = parse_timestamp(status.get("completionTime") or metadata["creationTimestamp"])
        decision = decide_ttl(
            status.get("phase"), finished_at, spec.get("ttlSecondsAfterFinished"), datetime.now(timezone.utc)
        )
        try:
            self.cluster.apply(ObjectRef.of(stj), decision)
        except Conflict as stale:
            log.info("TTL not applied: %s", stale)

    def report_pod_creation(self, stj: dict[str, Any], failures: Callable[[str], dict[str, str]]) -> None:
        """While the gang's Job lacks pods, why (decide_pod_creation), from `failures(namespace)`: the Job
        controller's FailedCreate messages by Job name (Cluster.pod_creation_failures)."""
        gang_generation, observed = self.current_gang_of(stj)
        gang, now = observed.jobs.get(gang_generation), datetime.now(timezone.utc)
        decision = decide_pod_creation(stj, gang, len(observed.pods), failures, now)
        self.write(stj, decision, f"{ConditionType.POD_CREATION_FAILED} not reported")

    def report_queue_wait(self, stj: dict[str, Any], waits: Callable[[str], dict[str, str]]) -> None:
        """While Kueue holds a gang's Job back, why (decide_queue_wait), from `waits(namespace)`: Kueue's words
        by Job uid (Cluster.queue_waits)."""
        gang_generation, observed = self.current_gang_of(stj)
        decision = decide_queue_wait(stj, observed.jobs.get(gang_generation), waits, datetime.now(timezone.utc))
        self.write(stj, decision, f"{ConditionType.QUEUED} not reported")

    def rank_0s(self, running: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Rank0]]:
        """Where each Running job's rank 0 serves its progress, found job by job (isolated), so that no job
        stops the others' reads; run_pass then reads them all at once: a pass costs about one read's deadline,
        however many jobs there are and however slowly their endpoints answer."""
        found: list[tuple[dict[str, Any], Rank0]] = []

        def find(stj: dict[str, Any]) -> None:
            if (rank_0 := self.rank_0_of(stj)) is not None:
                found.append((stj, rank_0))

        for stj in running:
            isolated("progress", stj, find)
        return found

    def rank_0_of(self, stj: dict[str, Any]) -> Rank0 | None:
        """Where rank 0 of the job's newest gang serves its progress: only a Running pod of index 0 that the
        gang's own Job owns (cache.children_view); anyone can give a pod its labels, and a forged rank 0 must
        never be read. None while there is no such pod. The gang is reconcile.current_gang: the newest Job
        found, not the status's currentJob, which a lost status write leaves behind."""
        try:
            job = parse_job(stj)
        except ProblemsError:  # an edited spec that reconciling is about to mark invalid
            return None
        gang_generation, observed = self.current_gang_of(stj)
        rank_0 = next(
            (pod for pod in observed.pods if pod_index(pod) == 0 and pod_phase(pod) == PodPhase.RUNNING), None
        )
        pod_ip = ((rank_0 or {}).get("status") or {}).get("podIP")
        if gang_generation not in observed.jobs or not pod_ip:
            return None
        url = self.config.progress_url.format(
            pod=f"{observed.jobs[gang_generation]['metadata']['name']}-0",
            pod_ip=f"[{pod_ip}]" if ":" in pod_ip else pod_ip,  # an IPv6 address is bracketed in a URL
            service=naming.service_name(job.name),
            namespace=job.metadata.namespace,
            port=job.spec.metrics_port,
        )
        return Rank0(job, gang_generation, url)

    def current_gang_of(self, stj: dict[str, Any]) -> tuple[int | None, Observed]:
        """The stored job `stj`'s current gang generation (reconcile.current_gang), and its children."""
        metadata = stj["metadata"]
        hint = naming.named_gang(metadata["name"], stj.get("status") or {})
        observed = self.cluster.cache.observed(metadata["namespace"], metadata["name"], hint)
        return current_gang(hint, observed), observed

    def record_progress(self, stj: dict[str, Any], rank_0: Rank0, answer: Answer) -> None:
        """Rank 0's answer into the status (decide_progress); or, when it could not be read, the failed read
        counted (decide_unreachable). Only onto the version decided from: a read landing after the job
        succeeded must not undo that."""
        where = ObjectRef.of(stj)
        key, now = (where.namespace, where.name), datetime.now(timezone.utc)
        if isinstance(answer, Unreadable):
            failed_reads = self._unread[key] = self._unread.get(key, 0) + 1
            decision = decide_unreachable(stj, rank_0, failed_reads, answer, now)
            self.write(stj, decision, f"{ConditionType.PROGRESS_UNREACHABLE} not reported")
            return
        self._unread.pop(key, None)
        try:
            config = self.config
            deciding = decide_progress(
                stj, rank_0, answer, now, config.progress_write_interval_seconds, config.progress_timeout_seconds
            )
            written = self.write(stj, deciding, "progress not copied")
        except StatusRefused:  # logged, counted and said (Cluster.patch_status); hang detection still needs the promise
            promise_unwritten = "progress promise not copied"
            try:
                written = self.write(stj, decide_promise_only(stj, rank_0, answer, now), promise_unwritten)
            except StatusRefused as refused:
                log.info("%s: %s", promise_unwritten, refused)
                return
        if written:
            self.say_metrics_left_out(where)

    def write(self, stj: dict[str, Any], decision: Decision, unwritten: str) -> bool:
        """`decision`'s status patch, onto the version of `stj` it was decided from; once written, the job
        queued (reconcile_soon) and the decision's Events posted. Nothing when it patches nothing. Whether it
        was written: a Conflict, logged as `unwritten`, leaves it to the next pass, from the newer copy."""
        if decision.status is None:
            return False
        where = ObjectRef.of(stj)
        try:
            self.cluster.patch_status(where, decision.status)
        except Conflict as stale:
            log.info("%s: %s", unwritten, stale)
            return False
        self.reconcile_soon((where.namespace, where.name))
        for event in decision.events:
            self.cluster.post_event(where, event)
        return True

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
        self.cluster.post_event(where, Event("Warning", EventReason.METRICS_LEFT_OUT, message, "reports"))


def isolated(step: str, stj: dict[str, Any], housekeep: Callable[[dict[str, Any]], None]) -> None:
    """One job's housekeeping step: whatever goes wrong is logged and counted, and stops no other job."""
    try:
        housekeep(stj)
    except Exception:
        metrics.HOUSEKEEPING_FAILURES.labels(step).inc()
        metadata = stj.get("metadata") or {}
        log.exception("housekeeping (%s) of %s/%s failed", step, metadata.get("namespace"), metadata.get("name"))
