"""Housekeeping's choice of the endpoint it reads progress from (controller/housekeeping.py): rank 0 of
the newest gang, found only among the pods that gang's own Job owns."""

from __future__ import annotations

from types import SimpleNamespace

from scaletrain_operator.api import naming
from scaletrain_operator.controller.cache import Cache
from scaletrain_operator.controller.housekeeping import Housekeeping
from scaletrain_operator.controller.settings import OperatorConfig
from scaletrain_testing.jobs import base_job

NAMESPACE = "team-a"


def _stj(current_job: str) -> dict:
    stj = base_job(training={"metricsPort": 9555}) | {
        "metadata": {"name": "demo", "namespace": NAMESPACE, "uid": "stj-uid", "resourceVersion": "1"}
    }
    return stj | {"status": {"phase": "Running", "currentJob": current_job}}


def _job(generation: int) -> dict:
    metadata = {
        "name": f"demo-g{generation}",
        "namespace": NAMESPACE,
        "uid": f"job-uid-{generation}",
        "resourceVersion": str(10 + generation),
        "labels": {naming.LABEL_JOB_NAME: "demo", naming.LABEL_GENERATION: str(generation)},
        "ownerReferences": [{"uid": "stj-uid", "controller": True}],
    }
    return {"metadata": metadata, "spec": {}}


def _pod(name: str, generation: int, index: int, ip: str | None, owner_uid: str | None, version: int) -> dict:
    metadata = {
        "name": name,
        "namespace": NAMESPACE,
        "resourceVersion": str(version),
        "labels": {naming.LABEL_JOB_NAME: "demo", naming.LABEL_GENERATION: str(generation)},
        "annotations": {naming.COMPLETION_INDEX_ANNOTATION: str(index)},
        "ownerReferences": [{"uid": owner_uid, "controller": True}] if owner_uid else [],
    }
    return {"metadata": metadata, "status": {"phase": "Running"} | ({"podIP": ip} if ip else {})}


def _housekeeping(cache: Cache) -> Housekeeping:
    return Housekeeping(OperatorConfig(), SimpleNamespace(cache=cache), reconcile_soon=lambda job: None)


def test_rank_0_is_the_index_0_pod_of_the_newest_gangs_own_job_and_never_a_forged_one():
    cache = Cache()
    stj = _stj(current_job="demo-g0")  # the status write that named g1 was lost
    cache.scaletrainjobs.put(stj)
    for generation in (0, 1):
        cache.jobs.put(_job(generation))
    housekeeping = _housekeeping(cache)
    # A bare pod with rank 0's labels and annotation, not owned by the Job: never read.
    cache.pods.put(_pod("impostor", 1, 0, "10.6.6.6", owner_uid=None, version=20))
    cache.pods.put(_pod("demo-g1-1-b", 1, 1, "10.0.1.2", owner_uid="job-uid-1", version=21))
    assert housekeeping.rank_0_of(stj) is None  # rank 0 of g1 not there yet
    cache.pods.put(_pod("demo-g1-0-a", 1, 0, None, owner_uid="job-uid-1", version=22))
    assert housekeeping.rank_0_of(stj) is None  # nor has it an IP yet
    cache.pods.put(_pod("demo-g1-0-a", 1, 0, "10.0.1.1", owner_uid="job-uid-1", version=23))
    rank_0 = housekeeping.rank_0_of(stj)
    assert rank_0 is not None and rank_0.generation == 1
    assert rank_0.url == "http://10.0.1.1:9555/progress"


def test_an_ipv6_pod_ip_is_bracketed_in_the_progress_url_and_a_non_ascii_index_is_no_rank():
    cache = Cache()
    stj = _stj(current_job="demo-g0")
    cache.scaletrainjobs.put(stj)
    cache.jobs.put(_job(0))
    housekeeping = _housekeeping(cache)
    forged = _pod("demo-g0-0-x", 0, 0, "fd00::6", owner_uid="job-uid-0", version=20)
    forged["metadata"]["annotations"][naming.COMPLETION_INDEX_ANNOTATION] = "⁰"
    cache.pods.put(forged)
    assert housekeeping.rank_0_of(stj) is None
    cache.pods.put(_pod("demo-g0-0-a", 0, 0, "fd00::1", owner_uid="job-uid-0", version=21))
    assert housekeeping.rank_0_of(stj).url == "http://[fd00::1]:9555/progress"
