"""kopf handlers: thin, level-based. Any change to a ScaleTrainJob, its Jobs or its pods triggers one
reconcile of that ScaleTrainJob, which reads everything fresh, decides (reconcile.py, pure) and
applies the decision (cluster.py).

Configuration comes through kopf's memo: `kopf.run(memo=kopf.Memo(config=OperatorConfig(...)))`
(main.py), optionally with a `cluster` (tests pass one); the startup handler adds the rest. Nothing
is read at import time.

No finalizers: children are garbage-collected through their ownerReferences, so deleting a
ScaleTrainJob never waits for the operator. kopf's own bookkeeping goes to annotations, because
the CRD's structural schema would prune a `status.kopf` field.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

import kopf

from scaletrain_trainer.validation import ProblemsError

from ..api import naming
from ..api.models import parse_job
from . import metrics
from .cluster import Cluster, ObjectRef, connect
from .housekeeping import Housekeeping
from .reconcile import decide, decide_invalid
from .settings import OperatorConfig


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config: OperatorConfig = memo.config
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=naming.GROUP)
    settings.posting.enabled = False  # the operator posts its own, meaningful Events
    # The namespaces are exact names and the chart installs the CRD before the operator starts, so
    # kopf need not list namespaces or watch CRDs: a namespaced install needs no ClusterRole (rbac.py).
    settings.scanning.disabled = True
    settings.watching.server_timeout = config.watch_timeout_seconds
    settings.networking.request_timeout = config.request_timeout_seconds
    if "cluster" not in memo:
        memo.cluster = Cluster(connect(), timeout_seconds=config.request_timeout_seconds)
    memo.locks = defaultdict(threading.Lock)  # one reconcile at a time per ScaleTrainJob
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    memo.housekeeping = Housekeeping(config, memo.cluster)
    memo.housekeeping.start()


@kopf.on.cleanup()
def stop_housekeeping(memo: kopf.Memo, **_: Any) -> None:
    memo.housekeeping.stop()


@kopf.on.event(naming.GROUP, naming.VERSION, naming.PLURAL)
def on_scaletrainjob(namespace: str, name: str, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    if type != "DELETED":
        reconcile(memo, namespace, name)


@kopf.on.event("batch", "v1", "jobs", labels={naming.LABEL_MANAGED_BY: naming.MANAGER})
def on_child_job(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    reconcile(memo, namespace, labels[naming.LABEL_JOB_NAME])


@kopf.on.event("", "v1", "pods", labels={naming.LABEL_MANAGED_BY: naming.MANAGER})
def on_pod(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    reconcile(memo, namespace, labels[naming.LABEL_JOB_NAME])


def reconcile(memo: kopf.Memo, namespace: str, name: str) -> None:
    """Bring one ScaleTrainJob's children and status in line with its spec (serialized per job)."""
    started = time.perf_counter()
    with memo.locks[(namespace, name)]:
        try:
            _reconcile(memo.cluster, namespace, name)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)


def _reconcile(cluster: Cluster, namespace: str, name: str) -> None:
    raw = cluster.get_stj(namespace, name)
    if raw is None or raw["metadata"].get("deletionTimestamp"):
        return
    now = datetime.now(timezone.utc)
    try:
        job = parse_job(raw)
    except ProblemsError as error:
        decision = decide_invalid(error.problems, raw.get("status") or {}, raw["metadata"].get("generation"), now)
    else:
        hint = naming.generation_of(job.status.current_job) if job.status and job.status.current_job else None
        decision = decide(job, cluster.observe(namespace, name, hint), now)
    cluster.apply(ObjectRef.of(raw), decision)
    metrics.count(decision)
