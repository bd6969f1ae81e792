"""Housekeeping, every progressIntervalSeconds: rank 0's progress of Running jobs into their status, and
the TTL of finished ones. A plain thread rather than a kopf timer, which would put a finalizer on
every job. A standby replica stays passive here too (peering.py).

The jobs come from the operator's cache (cache.py), not from a list per pass. A TTL deletion is
conditional on the version it was decided from, so a stale copy (say, before the user raised the TTL)
deletes nothing; the next pass decides again from the newer one."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any

from scaletrain_trainer.validation import ProblemsError

from ..api import naming
from ..api.models import ScaleTrainJob, parse_job
from ..api.progress import read_progress
from ..api.timestamps import parse_timestamp
from . import peering
from .cluster import Cluster, Conflict, ObjectRef
from .settings import OperatorConfig
from .ttl import decide_ttl

log = logging.getLogger(__name__)


class Housekeeping:
    def __init__(self, config: OperatorConfig, cluster: Cluster):
        self.config, self.cluster = config, cluster
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
                    for raw in self.cluster.cache.scaletrainjobs.all():
                        self.housekeep(raw)
            except Exception:  # best effort: never let this break the operator
                log.exception("housekeeping pass failed")

    def active_replica(self) -> bool:
        """Standalone, or the active one of the peered replicas (kopf pauses the others' watches)."""
        config = self.config
        if not config.peering:
            return True
        status = self.cluster.peering_status(config.peering, config.namespaces)
        now = datetime.now(timezone.utc)
        return status is not None and peering.is_active(status, config.peering_identity, config.peering_priority, now)

    def housekeep(self, raw: dict[str, Any]) -> None:
        metadata, status, spec = raw["metadata"], raw.get("status") or {}, raw.get("spec") or {}
        if status.get("phase") == "Running":
            try:
                self.copy_progress(parse_job(raw))
            except ProblemsError:  # an edited spec that reconciling is about to mark invalid
                pass
            return
        # The TTL applies to every finished job, also to one whose spec failed validation.
        finished_at = parse_timestamp(status.get("completionTime") or metadata["creationTimestamp"])
        decision = decide_ttl(
            status.get("phase"), finished_at, spec.get("ttlSecondsAfterFinished"), datetime.now(timezone.utc)
        )
        try:
            self.cluster.apply(ObjectRef.of(raw), decision)
        except Conflict as stale:
            log.info("TTL not applied: %s", stale)

    def copy_progress(self, job: ScaleTrainJob) -> None:
        """Rank 0's /progress into status.progress; nothing when it cannot be read."""
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
            port=job.spec.training.metrics_port,
        )
        progress = read_progress(url, self.config.progress_timeout_seconds)
        if progress is not None:
            self.cluster.patch_status(ObjectRef(job.metadata.namespace, job.name), {"progress": progress})
