"""Housekeeping (controller/housekeeping.py): its choice of the endpoint it reads progress from, rank 0 of
the newest gang, found only among the pods that gang's own Job owns; and why a gang lacks pods, from one
list of the Job controller's FailedCreate Events per namespace and pass, however many jobs lack pods."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from scaletrain_operator.api import naming
from scaletrain_operator.controller.cache import Cache
from scaletrain_operator.controller.cluster import Cluster
from scaletrain_operator.controller.decision import Decision
from scaletrain_operator.controller.housekeeping import Housekeeping
from scaletrain_operator.controller.settings import OperatorConfig
from scaletrain_operator.report_server import Reports
from scaletrain_testing.gang_objects import cached_gang_job, gang_pod
from scaletrain_testing.jobs import NAMESPACE, running_status, stored_job

PROGRESS_PORT = {"metricsPort": 9555}  # where rank 0 serves its progress


def _housekeeping(cache: Cache) -> Housekeeping:
    return Housekeeping(
        OperatorConfig(), SimpleNamespace(cache=cache), reconcile_soon=lambda job: None, reports=Reports()
    )


def test_rank_0_is_the_index_0_pod_of_the_newest_gangs_own_job_and_never_a_forged_one():
    cache = Cache()
    stj = stored_job(status=running_status(), training=PROGRESS_PORT)  # the status write that named g1 was lost
    cache.scaletrainjobs.put(stj)
    for generation in (0, 1):
        cache.jobs.put(cached_gang_job(generation=generation))
    housekeeping = _housekeeping(cache)
    # A bare pod with rank 0's labels and annotation, not owned by the Job: never read.
    cache.pods.put(gang_pod(0, "Running", 1, name="impostor", ip="10.6.6.6", resource_version=20))
    cache.pods.put(gang_pod(1, "Running", 1, ip="10.0.1.2", owner_uid="demo-g1-uid", resource_version=21))
    assert housekeeping.rank_0_of(stj) is None  # rank 0 of g1 not there yet
    cache.pods.put(gang_pod(0, "Running", 1, owner_uid="demo-g1-uid", resource_version=22))
    assert housekeeping.rank_0_of(stj) is None  # nor has it an IP yet
    cache.pods.put(gang_pod(0, "Running", 1, ip="10.0.1.1", owner_uid="demo-g1-uid", resource_version=23))
    rank_0 = housekeeping.rank_0_of(stj)
    assert rank_0 is not None and rank_0.gang_generation == 1
    assert rank_0.url == "http://10.0.1.1:9555/progress"


def test_an_ipv6_pod_ip_is_bracketed_in_the_progress_url_and_a_non_ascii_index_is_no_rank():
    cache = Cache()
    stj = stored_job(status=running_status(), training=PROGRESS_PORT)
    cache.scaletrainjobs.put(stj)
    cache.jobs.put(cached_gang_job())
    housekeeping = _housekeeping(cache)
    forged = gang_pod(0, "Running", name="demo-g0-0-x", ip="fd00::6", owner_uid="demo-g0-uid", resource_version=20)
    forged["metadata"]["annotations"][naming.COMPLETION_INDEX_ANNOTATION] = "⁰"
    cache.pods.put(forged)
    assert housekeeping.rank_0_of(stj) is None
    cache.pods.put(gang_pod(0, "Running", ip="fd00::1", owner_uid="demo-g0-uid", resource_version=21))
    assert housekeeping.rank_0_of(stj).url == "http://[fd00::1]:9555/progress"


class FailedCreates:
    """A cluster for a housekeeping pass: the cache, a namespace's FailedCreate messages by Job (each list
    counted), and the status patches and Events the pass writes."""

    def __init__(self, messages: dict[str, str]):
        self.cache, self.messages = Cache(), messages
        self.lists: list[str] = []
        self.patched: dict[str, dict[str, Any]] = {}
        self.events: list[str] = []

    def pod_creation_failures(self, namespace: str) -> dict[str, str]:
        self.lists.append(namespace)
        return self.messages

    def patch_status(self, where, status: dict[str, Any]) -> None:
        self.patched[where.name] = status

    def post_event(self, where, event) -> None:
        self.events.append(where.name)

    def apply(self, where, decision: Decision) -> None:
        assert decision.changes_nothing  # no TTL passes here


def _pending_without_pods(cluster: FailedCreates, name: str) -> None:
    """The job `name`, Pending, whose first gang's Job has no pod in `cluster`."""
    cluster.cache.scaletrainjobs.put(stored_job(name, status={"phase": "Pending", "currentJob": f"{name}-g0"}))
    cluster.cache.jobs.put(cached_gang_job(name, created=datetime(2026, 12, 1, tzinfo=timezone.utc)))


def test_one_list_of_failed_creates_per_namespace_and_pass_tells_each_job_why_it_lacks_pods():
    cluster = FailedCreates({"refused-g0": "pods are forbidden: violates PodSecurity", "other-g0": "quota exceeded"})
    for name in ("refused", "waiting", "also-waiting"):
        _pending_without_pods(cluster, name)
    Housekeeping(OperatorConfig(), cluster, reconcile_soon=lambda job: None, reports=Reports()).run_pass()
    assert cluster.lists == [NAMESPACE]
    assert set(cluster.patched) == {"refused"} and cluster.events == ["refused"]
    (failed,) = cluster.patched["refused"]["conditions"]
    assert failed["type"] == "PodCreationFailed" and failed["message"] == "pods are forbidden: violates PodSecurity"


def test_the_newest_failed_create_of_each_job_is_its_reason():
    def event(job: str, at: str, message: str | None) -> dict[str, Any]:
        return {"involvedObject": {"kind": "Job", "name": job}, "lastTimestamp": at, "message": message}

    listed = [
        event("a-g0", "2026-12-01T00:00:02Z", "newer"),
        event("a-g0", "2026-12-01T00:00:01Z", "older"),
        event("b-g0", "2026-12-01T00:00:01Z", None),
    ]
    cluster = Cluster(api=None)
    queries = []
    cluster._request = lambda method, path, query: queries.append(query) or {"items": listed}
    assert cluster.pod_creation_failures(NAMESPACE) == {"a-g0": "newer"}
    # From the API server's watch cache (any version): a consistent list may read every Event from etcd.
    assert queries == [[("fieldSelector", "involvedObject.kind=Job,reason=FailedCreate"), ("resourceVersion", "0")]]


def test_a_new_reason_to_wait_for_admission_keeps_when_the_job_began_to_wait():
    """metav1 conditions: lastTransitionTime changes with the status, not with the message."""
    waiting = {"type": "Queued", "status": "True", "reason": "WaitingForAdmission", "message": "insufficient quota",
               "lastTransitionTime": "2026-12-02T11:00:00Z"}  # fmt: skip
    pending = {"phase": "Pending", "currentJob": "demo-g0", "conditions": [waiting]}
    stj = stored_job(status=pending, queueName="team", training=PROGRESS_PORT)
    queued = _queue_wait_reported(stj, "no domain of the topology holds the gang")
    assert queued["message"] == "no domain of the topology holds the gang"
    assert queued["lastTransitionTime"] == "2026-12-02T11:00:00Z"


def test_a_gang_smaller_than_nodes_with_all_its_pods_lacks_none():
    """An elastic gang runs below spec.nodes: its Job's completions, not nodes, is how many pods it has."""
    cluster = FailedCreates({"elastic-g0": "an hour-old FailedCreate"})
    _pending_without_pods(cluster, "elastic")
    gang = cluster.cache.jobs.get(NAMESPACE, "elastic-g0")
    owned = {"resourceVersion": "3", "ownerReferences": [{"uid": "elastic-uid", "controller": True}]}
    cluster.cache.jobs.put(gang | {"spec": {"completions": 1}, "metadata": gang["metadata"] | owned})
    cluster.cache.pods.put(
        gang_pod(0, "Running", job="elastic", ip="10.0.0.1", owner_uid="elastic-g0-uid", resource_version=4)
    )
    Housekeeping(OperatorConfig(), cluster, reconcile_soon=lambda job: None, reports=Reports()).run_pass()
    assert cluster.lists == [] and cluster.patched == {}


def test_a_job_without_a_queue_whose_job_kueue_suspended_says_why_it_waits():
    """Where Kueue manages every Job, a job that names no queue waits for admission all the same."""
    stj = stored_job(status={"phase": "Pending", "currentJob": "demo-g0", "conditions": []}, training=PROGRESS_PORT)
    queued = _queue_wait_reported(stj, "LocalQueue default doesn't exist")
    assert (queued["type"], queued["reason"]) == ("Queued", "WaitingForAdmission")
    assert queued["message"] == "LocalQueue default doesn't exist"


def _queue_wait_reported(stj, reason):
    """The condition Queued that housekeeping writes for `stj`, whose gang's Job demo-g0 is suspended, when
    Kueue's Workload of it says `reason`."""
    cache, patches = Cache(), []
    cache.scaletrainjobs.put(stj)
    cache.jobs.put(cached_gang_job(suspend=True))
    cluster = SimpleNamespace(cache=cache, patch_status=lambda where, status: patches.append(status))
    housekeeping = Housekeeping(OperatorConfig(), cluster, reconcile_soon=lambda job: None, reports=Reports())
    housekeeping.report_queue_wait(stj, lambda namespace: {"demo-g0-uid": reason})
    ((queued,),) = [status["conditions"] for status in patches]
    return queued


def test_a_job_whose_status_names_no_gang_of_ours_stops_no_other_jobs_progress_reads():
    """status.currentJob is anyone's to write who may write the status: a name that is no gang Job's is
    no gang, and costs that job its progress read alone, never the pass of every other job."""
    cache = Cache()
    forged = stored_job("forged", status=running_status(currentJob="not-a-gang"), training=PROGRESS_PORT)
    cache.scaletrainjobs.put(forged)
    cache.scaletrainjobs.put(stored_job(status=running_status(), training=PROGRESS_PORT))
    cache.jobs.put(cached_gang_job())
    cache.pods.put(gang_pod(0, "Running", ip="10.0.0.1", owner_uid="demo-g0-uid", resource_version=20))
    housekeeping = _housekeeping(cache)
    assert housekeeping.rank_0_of(forged) is None
    found = housekeeping.rank_0s([forged, cache.scaletrainjobs.get(NAMESPACE, "demo")])
    assert [(raw["metadata"]["name"], rank_0.url) for raw, rank_0 in found] == [
        ("demo", "http://10.0.0.1:9555/progress")
    ]


def test_the_active_replica_labels_its_own_pod_once_and_takes_the_label_off_when_it_stands_by():
    """The status-report Service selects the label: reports reach the active replica alone."""
    labels = []
    cluster = SimpleNamespace(cache=Cache(), label_pod=lambda *call: labels.append(call))
    config = OperatorConfig(pod_name="operator-abc", pod_namespace="scaletrain-system")
    housekeeping = Housekeeping(config, cluster, reconcile_soon=lambda job: None, reports=Reports())
    for active in (True, True, False, False, True):
        housekeeping.active = active
        housekeeping.label_own_pod()
    call = ("scaletrain-system", "operator-abc", naming.ACTIVE_REPLICA_LABEL)
    assert labels == [(*call, True), (*call, False), (*call, True)]
    outside_a_pod = Housekeeping(OperatorConfig(), cluster, reconcile_soon=lambda job: None, reports=Reports())
    outside_a_pod.active = True
    outside_a_pod.label_own_pod()
    assert len(labels) == 3
