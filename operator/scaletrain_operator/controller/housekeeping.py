"""Housekeeping, every progressIntervalSeconds: rank 0's progress of Running jobs into their status, the
TTL of finished ones, and why a gang's pods are missing (PodCreationFailed). A plain thread rather than
a kopf timer, which would put a finalizer on every job. A standby replica stays passive here too (peering.py).

A status written here changes what the job's reconcile decides from (a new progress promise to hold the
gang to), but its watch event is no news to the cache, which kept the answer to the patch, and the work
queue drops such an echo for a settled job. So each such write queues the job itself (`reconcile_soon`).

The jobs come from the operator's cache (cache.py), not from a list per pass. A TTL deletion is
conditional on the version it was decided from, so a stale copy (say, before the user raised the TTL)
deletes nothing; the next pass decides again from the newer one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

from scaletrain_trainer.validation import ProblemsError

from ..api import naming
from ..api.models import parse_job
from ..api.progress import read_progress, status_patch
from ..api.timestamps import parse_timestamp
from . import metrics, peering
from .cache import Key
from .cluster import Cluster, Conflict, ObjectRef
from .decision import Event
from .settings import OperatorConfig
from .status import bounded, condition
from .ttl import decide_ttl

log = logging.getLogger(__name__)

PROGRESS_READERS = 8  # reads at once; each is bounded by progress_timeout_seconds
POD_CREATION_FAILED = "PodCreationFailed"
POD_CREATION_GRACE = timedelta(seconds=3)  # a new Job's pods take a moment; after that, a missing one has a reason


class Housekeeping:
    def __init__(self, config: OperatorConfig, cluster: Cluster, reconcile_soon: Callable[[Key], None]):
        self.config, self.cluster, self.reconcile_soon = config, cluster, reconcile_soon
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="housekeeping", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.config.progress_interval_seconds):
            try:
                if self.active_replica():
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
        for raw in jobs:
            if phase_of(raw) != "Running":
                isolated("ttl", raw, self.expire)
            if phase_of(raw) in ("Pending", "Running"):
                isolated("pods", raw, self.report_pod_creation)
        if running:
            with ThreadPoolExecutor(min(len(running), PROGRESS_READERS), thread_name_prefix="progress") as readers:
                for raw in running:
                    readers.submit(isolated, "progress", raw, self.copy_progress)

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

    def report_pod_creation(self, raw: dict[str, Any]) -> None:
        """While the gang's Job lacks pods, why: the Job controller's newest FailedCreate Event (Pod
        Security admission, a quota) becomes the condition PodCreationFailed and a Warning Event, which
        nothing else would show on the job; once the pods are there the condition turns False."""
        metadata, status = raw["metadata"], raw.get("status") or {}
        namespace, current_job = metadata["namespace"], status.get("currentJob")
        child = self.cluster.cache.jobs.get(namespace, current_job) if current_job else None
        if child is None or (child.get("spec") or {}).get("suspend"):
            return
        held = next((c for c in status.get("conditions") or [] if c["type"] == POD_CREATION_FAILED), None)
        pods = self.cluster.cache.observed(namespace, metadata["name"]).pods
        if len(pods) >= (raw.get("spec") or {}).get("nodes", 1):
            message = None
        elif datetime.now(timezone.utc) - parse_timestamp(child["metadata"]["creationTimestamp"]) < POD_CREATION_GRACE:
            return  # the Job controller is still at it
        else:
            message = self.cluster.pod_creation_failure(namespace, current_job)
        said = held["message"] if held is not None and held["status"] == "True" else None  # what the job shows
        if said == (bounded(message) if message is not None else None):
            return
        now, generation = datetime.now(timezone.utc), metadata.get("generation")
        if message is None:
            update = condition(
                POD_CREATION_FAILED, False, "PodsCreated", "the gang's pods were created", now, generation
            )
        else:
            update = condition(POD_CREATION_FAILED, True, "FailedCreate", message, now, generation)
        others = [c for c in status.get("conditions") or [] if c["type"] != POD_CREATION_FAILED]
        where = ObjectRef.of(raw)
        try:
            self.cluster.patch_status(where, {"conditions": [*others, update]})
        except Conflict as stale:  # the next pass decides again from the newer copy
            log.info("pod creation not reported: %s", stale)
            return
        self.reconcile_soon((where.namespace, where.name))
        if message is not None:
            self.cluster.post_event(where, Event("Warning", "PodCreationFailed", f"the Job {current_job}: {message}"))

    def copy_progress(self, raw: dict[str, Any]) -> None:
        """Rank 0's /progress into status.progress (as api/progress.status_patch writes it); nothing when
        it cannot be read, or when the job changed meanwhile. A loss that turned non-finite is removed
        from the status, and a Warning Event says so once; so does one for damaged checkpoints the trainer
        set aside while resuming."""
        try:
            job = parse_job(raw)
        except ProblemsError:  # an edited spec that reconciling is about to mark invalid
            return
        current_job = job.status.current_job if job.status else None
        if not current_job:
            return
        template = self.config.progress_url
        pod_ip = ""
        if "{pod_ip}" in template:  # an operator outside the pods' DNS (settings.py)
            pod_ip = self.cluster.cache.rank_0_pod_ip(job.metadata.namespace, job.name, current_job)
            if not pod_ip:
                return
        url = template.format(
            pod=f"{current_job}-0",
            pod_ip=pod_ip,
            service=naming.service_name(job.name),
            namespace=job.metadata.namespace,
            port=job.spec.metrics_port,
        )
        progress = read_progress(url, self.config.progress_timeout_seconds)
        if progress is None:
            return
        # Only onto the version read: a read that lands after the job succeeded would overwrite the final
        # progress (from rank 0's termination message) with an older step and an ETA.
        where = ObjectRef.of(raw)
        try:
            reported = status_patch(progress) | {"generation": naming.generation_of(current_job)}
            self.cluster.patch_status(where, {"progress": reported})
        except Conflict as stale:  # the next pass reads again, from the newer copy
            log.info("progress not copied: %s", stale)
            return
        self.reconcile_soon((where.namespace, where.name))
        before = job.status.progress
        was_diverged = before is not None and before.loss_finite is False
        if progress.get("lossFinite") is False and not was_diverged:
            message = f"rank 0 reports a non-finite loss at step {progress.get('step', '?')}: the run diverged"
            self.cluster.post_event(where, Event("Warning", "LossNotFinite", message))
        set_aside = progress.get("checkpointsSetAside") or []
        if set_aside and set_aside != (before.checkpoints_set_aside if before else None):
            in_dir = f" in {job.spec.training.checkpoint.dir}" if job.spec.training is not None else ""
            message = (
                f"damaged checkpoints moved aside{in_dir}: {', '.join(set_aside)}; "
                "training resumed from the newest sound one (rank 0's log says what was wrong)"
            )
            self.cluster.post_event(where, Event("Warning", "CheckpointSetAside", message))


def phase_of(raw: dict[str, Any]) -> str | None:
    return (raw.get("status") or {}).get("phase")


def isolated(step: str, raw: dict[str, Any], housekeep: Callable[[dict[str, Any]], None]) -> None:
    """One job's housekeeping step: whatever goes wrong is logged and counted, and stops no other job."""
    try:
        housekeep(raw)
    except Exception:
        metrics.HOUSEKEEPING_FAILURES.labels(step).inc()
        metadata = raw.get("metadata") or {}
        log.exception("housekeeping (%s) of %s/%s failed", step, metadata.get("namespace"), metadata.get("name"))
