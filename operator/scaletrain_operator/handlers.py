"""kopf handlers: thin, level-based. Any change to a ScaleTrainJob, its Jobs or its pods triggers one
reconcile of that ScaleTrainJob, which reads everything fresh and applies `reconcile.decide`.

No finalizers: children are garbage-collected through their ownerReferences, so deleting a
ScaleTrainJob never waits for the operator. kopf's own bookkeeping goes to annotations, because
the CRD's structural schema would prune a `status.kopf` field.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf

from scaletrain_trainer.validation import ProblemsError

from . import metrics, naming, peering
from .api import parse_job
from .cluster import Cluster
from .progress import read_progress
from .reconcile import condition, decide
from .settings import OperatorConfig

log = logging.getLogger(__name__)

CONFIG = OperatorConfig.from_env()
_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
_cluster: Cluster | None = None
_housekeeping_stop = threading.Event()


def cluster() -> Cluster:
    global _cluster
    if _cluster is None:
        _cluster = Cluster(timeout_seconds=CONFIG.request_timeout_seconds)
    return _cluster


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=naming.GROUP)
    settings.posting.enabled = False  # the operator posts its own, meaningful Events
    # The namespaces are exact names and the chart installs the CRD before the operator starts, so
    # kopf need not list namespaces or watch CRDs: a namespaced install needs no ClusterRole (rbac.py).
    settings.scanning.disabled = True
    settings.watching.server_timeout = CONFIG.watch_timeout_seconds
    settings.networking.request_timeout = CONFIG.request_timeout_seconds
    if CONFIG.metrics_port:
        metrics.serve(CONFIG.metrics_port)
    global _housekeeping_stop
    _housekeeping_stop = threading.Event()  # a fresh one: a stopped operator may be started again in-process
    threading.Thread(target=housekeeping_loop, args=(_housekeeping_stop,), name="housekeeping", daemon=True).start()


@kopf.on.cleanup()
def stop_housekeeping(**_: Any) -> None:
    _housekeeping_stop.set()


@kopf.on.event(naming.GROUP, naming.VERSION, naming.PLURAL)
def on_scaletrainjob(namespace: str, name: str, type: str | None, **_: Any) -> None:
    if type != "DELETED":
        reconcile(namespace, name)


@kopf.on.event("batch", "v1", "jobs", labels={naming.LABEL_MANAGED_BY: naming.MANAGER})
def on_child_job(namespace: str, labels: dict[str, str], type: str | None, **_: Any) -> None:
    reconcile(namespace, labels[naming.LABEL_JOB_NAME])


@kopf.on.event("", "v1", "pods", labels={naming.LABEL_MANAGED_BY: naming.MANAGER})
def on_pod(namespace: str, labels: dict[str, str], **_: Any) -> None:
    reconcile(namespace, labels[naming.LABEL_JOB_NAME])


def housekeeping_loop(stop: threading.Event) -> None:
    """Every progressIntervalSeconds: progress of Running jobs, and deletion of finished jobs past
    their TTL. A plain thread rather than a kopf timer, which would put a finalizer on every job."""
    while not stop.wait(CONFIG.progress_interval_seconds):
        try:
            if not active_replica():
                continue
            for raw in cluster().list_jobs(CONFIG.namespaces):
                housekeep(raw)
        except Exception:  # best effort: never let this break the operator
            log.exception("housekeeping pass failed")


def active_replica() -> bool:
    """Standalone, or the active one of the peered replicas (kopf pauses the others' watches)."""
    if not CONFIG.peering:
        return True
    status = cluster().peering_status(CONFIG.peering, CONFIG.namespaces)
    now = datetime.now(timezone.utc)
    return status is not None and peering.is_active(status, CONFIG.peering_identity, CONFIG.peering_priority, now)


def housekeep(raw: dict[str, Any]) -> None:
    metadata, status, spec = raw["metadata"], raw.get("status") or {}, raw.get("spec") or {}
    namespace, name, phase = metadata["namespace"], metadata["name"], status.get("phase")
    if phase == "Running":
        progress = fetch_progress(namespace, name, status, spec)
        if progress is not None:
            cluster().patch_status(namespace, name, {"progress": progress})
    elif phase in ("Succeeded", "Failed") and spec.get("ttlSecondsAfterFinished") is not None:
        finished = datetime.fromisoformat(
            (status.get("completionTime") or metadata["creationTimestamp"]).replace("Z", "+00:00")
        )
        if datetime.now(timezone.utc) >= finished + timedelta(seconds=spec["ttlSecondsAfterFinished"]):
            log.info("deleting %s/%s: ttlSecondsAfterFinished passed", namespace, name)
            cluster().delete_job(namespace, name)


def fetch_progress(namespace: str, name: str, status: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0's /progress, mapped onto status.progress; None when it cannot be read."""
    current_job = status.get("currentJob")
    if not current_job:
        return None
    port = (spec.get("training") or {}).get("metricsPort", 9400)
    url = CONFIG.progress_url.format(
        pod=f"{current_job}-0", service=naming.service_name(name), namespace=namespace, port=port
    )
    return read_progress(url, CONFIG.progress_timeout_seconds)


def reconcile(namespace: str, name: str) -> None:
    """Bring one ScaleTrainJob's children and status in line with its spec (serialized per job)."""
    started = time.perf_counter()
    with _locks[(namespace, name)]:
        try:
            _reconcile(namespace, name)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)


def _reconcile(namespace: str, name: str) -> None:
    api = cluster()
    raw = api.get_job(namespace, name)
    if raw is None or raw["metadata"].get("deletionTimestamp"):
        return
    try:
        job = parse_job(raw)
    except ProblemsError as error:
        _mark_invalid(api, namespace, raw, error)
        return
    hint = naming.generation_of(job.status.current_job) if job.status and job.status.current_job else None
    decision = decide(job, api.observe(namespace, name, hint), datetime.now(timezone.utc))
    if decision.status and _unchanged(raw.get("status") or {}, decision.status):
        decision.status = {}
    api.apply(namespace, raw, decision)
    metrics.count(decision)


def _unchanged(current: dict[str, Any], patch: dict[str, Any]) -> bool:
    return all(current.get(key) == value for key, value in patch.items())


def _mark_invalid(api: Cluster, namespace: str, raw: dict[str, Any], error: ProblemsError) -> None:
    """A spec the CRD schema let through but the operator cannot run: Failed once, no retries."""
    message = "invalid spec: " + "; ".join(str(p) for p in error.problems)
    status = raw.get("status") or {}
    if status.get("phase") == "Failed" and status.get("message") == message:
        return
    now = datetime.now(timezone.utc)
    failed = condition("Failed", True, "InvalidSpec", message, now, raw["metadata"].get("generation"))
    api.post_event(namespace, raw, "Warning", "InvalidSpec", message)
    api.patch_status(
        namespace,
        raw["metadata"]["name"],
        {
            "phase": "Failed",
            "message": message,
            "conditions": [failed],
            "observedGeneration": raw["metadata"].get("generation"),
        },
    )
    metrics.JOBS.labels("failed").inc()
