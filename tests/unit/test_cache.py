"""The operator's cache (controller/cache.py) and when a reconcile may trust it (controller/handlers.py):
newer versions win, deletions stay deleted, a fresh list replaces a job's children, and a decision that
cannot be undone is made again from fresh reads."""

from __future__ import annotations

import pytest

from scaletrain_operator.api import naming
from scaletrain_operator.api.job import parse_job
from scaletrain_operator.controller import cache as cache_module
from scaletrain_operator.controller.cache import Cache, Store, children_view
from scaletrain_operator.controller.decision import Decision, Event
from scaletrain_operator.controller.handlers import _reconcile, needs_fresh_look
from scaletrain_operator.controller.workqueue import Outcome
from scaletrain_operator.render.child_annotations import (
    GANG_GENERATION_ANNOTATION,
    REPLACED_PODS_ANNOTATION,
    with_spec_hash,
)
from scaletrain_operator.render.children import render_job, render_master_alias, render_service
from scaletrain_testing.jobs import base_job

NAMESPACE = "team-a"


def _obj(name, version, job="demo", generation=None, **fields):
    labels = {naming.LABEL_JOB_NAME: job}
    if generation is not None:
        labels[naming.LABEL_GENERATION] = str(generation)
    metadata = {"name": name, "namespace": NAMESPACE, "resourceVersion": str(version), "labels": labels}
    return {"metadata": metadata | fields.pop("metadata", {}), **fields}


# ---- newer versions win ----


def test_a_newer_version_replaces_the_copy_held_and_an_older_or_equal_one_is_no_news():
    store = Store()
    assert store.put(_obj("demo-g0", 5, spec={"suspend": False}))
    assert not store.put(_obj("demo-g0", 5, spec={"suspend": True}))  # the echo of what is held
    assert not store.put(_obj("demo-g0", 4, spec={"suspend": True}))  # an event overtaken by a write's answer
    assert store.get(NAMESPACE, "demo-g0")["spec"] == {"suspend": False}
    assert store.put(_obj("demo-g0", 6, spec={"suspend": True}))
    assert store.get(NAMESPACE, "demo-g0")["spec"] == {"suspend": True}


def test_a_version_that_is_not_a_number_always_wins():
    store = Store()
    store.put(_obj("demo-g0", 7))
    assert store.put(_obj("demo-g0", "opaque"))


def test_objects_are_indexed_by_the_job_they_belong_to():
    store = Store()
    store.put(_obj("demo-g0", 1))
    store.put(_obj("other-g0", 2, job="other"))
    store.put(_obj("unlabelled", 3, metadata={"labels": {}}))
    assert [o["metadata"]["name"] for o in store.owned_by(NAMESPACE, "demo")] == ["demo-g0"]
    store.put(_obj("demo-g0", 4, job="other"))  # relabelled: it moves
    assert store.owned_by(NAMESPACE, "demo") == []
    assert {o["metadata"]["name"] for o in store.owned_by(NAMESPACE, "other")} == {"demo-g0", "other-g0"}


def test_managed_fields_are_dropped_and_pods_keep_only_metadata_status_and_their_node():
    cache = Cache()
    managed = {"managedFields": [{"manager": "kube-controller-manager"}]}
    cache.jobs.put(_obj("demo-g0", 1, metadata=managed, spec={"completions": 2}))
    pod_spec = {"containers": [], "nodeName": "n1"}
    cache.pods.put(_obj("demo-g0-0", 2, metadata=managed, spec=pod_spec, status={"phase": "Running"}))
    assert "managedFields" not in cache.jobs.get(NAMESPACE, "demo-g0")["metadata"]
    assert cache.jobs.get(NAMESPACE, "demo-g0")["spec"] == {"completions": 2}
    pod = cache.pods.get(NAMESPACE, "demo-g0-0")
    assert set(pod) == {"metadata", "spec", "status"} and "managedFields" not in pod["metadata"]
    assert pod["spec"] == {"nodeName": "n1"}


# ---- deletions stay deleted ----


def test_a_deleted_object_is_not_brought_back_by_a_late_answer_but_a_new_one_of_its_name_is_kept():
    store = Store()
    store.put(_obj("demo-g0", 5))
    assert store.delete(_obj("demo-g0", 8))  # the DELETED event
    assert store.get(NAMESPACE, "demo-g0") is None and store.owned_by(NAMESPACE, "demo") == []
    assert not store.put(_obj("demo-g0", 7))  # the late answer to an earlier patch
    assert store.get(NAMESPACE, "demo-g0") is None
    assert store.put(_obj("demo-g0", 9))  # created again
    assert store.get(NAMESPACE, "demo-g0") is not None


def test_deleting_an_older_version_keeps_a_newer_object_of_the_same_name():
    store = Store()
    store.put(_obj("demo", 9))
    assert not store.delete(_obj("demo", 3))
    assert store.get(NAMESPACE, "demo") is not None


def test_a_deletion_of_what_was_never_held_is_no_news():
    assert not Store().delete(_obj("demo-g0", 3))


def test_tombstones_expire(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: clock[0])
    store = Store()
    store.put(_obj("old", 5))
    store.delete(_obj("old", 6))
    clock[0] += cache_module.TOMBSTONE_SECONDS + 1
    store.put(_obj("recent", 7))
    store.delete(_obj("recent", 8))  # each deletion prunes the expired tombstones
    assert store.put(_obj("old", 2))  # no tombstone holds it back any more
    assert not store.put(_obj("recent", 2))


# ---- a fresh list replaces a job's children ----


def test_a_fresh_list_drops_what_it_lacks_unless_written_after_it():
    store = Store()
    store.put(_obj("demo-g0", 5))  # deleted while nobody watched: the list lacks it
    store.put(_obj("demo-g2", 12))  # created (written through) after the list was taken
    store.put(_obj("other-g0", 3, job="other"))  # another job's: untouched
    store.replace_owned((NAMESPACE, "demo"), [_obj("demo-g1", 9)], list_version=10)
    assert {o["metadata"]["name"] for o in store.owned_by(NAMESPACE, "demo")} == {"demo-g1", "demo-g2"}
    assert store.get(NAMESPACE, "other-g0") is not None
    assert not store.put(_obj("demo-g0", 5))  # and it stays deleted


# ---- the children as the decide layer sees them ----


def test_children_view_takes_the_service_the_jobs_not_being_deleted_and_the_newest_generations_pods():
    being_deleted = {"deletionTimestamp": "2026-11-30T12:00:00Z"}
    view = children_view(
        "demo",
        uid=None,
        services=[_obj("demo", 1)],
        jobs=[_obj("demo-g0", 2, generation=0), _obj("demo-g1", 3, generation=1), _obj("demo-g2", 4, generation=2,
              metadata=being_deleted)],
        pods=[_obj("demo-g0-0", 5, generation=0), _obj("demo-g1-0", 6, generation=1)],
        generation_hint=None,
    )  # fmt: skip
    assert list(view.services) == ["demo"]
    assert sorted(view.jobs) == [0, 1]
    assert [p["metadata"]["name"] for p in view.pods] == ["demo-g1-0"]


def _owned(obj, uid):
    obj["metadata"]["ownerReferences"] = [{"kind": "ScaleTrainJob or Job", "uid": uid, "controller": True}]
    return obj


def test_only_children_owned_by_the_job_count_and_pods_only_through_its_jobs():
    """Labels can be copied by anyone; a uid only the API server gives."""
    ours, foreign = (
        _owned(_obj("demo-g0", 2, generation=0, metadata={"uid": "job-0"}), "stj"),
        _obj("demo-g1", 3, generation=1),
    )
    pods = [
        _owned(_obj("demo-g0-0", 5, generation=0), "job-0"),
        _obj("intruder", 6, generation=0, status={"phase": "Failed"}),  # the job's labels, no owner
        _owned(_obj("impostor", 7, generation=0, status={"phase": "Failed"}), "stj"),  # owned, but not by a Job
    ]
    view = children_view("demo", uid="stj", services=[_obj("demo", 1)], jobs=[ours, foreign], pods=pods,
                         generation_hint=None)  # fmt: skip
    assert view.services == {}  # a Service of the right name and labels that is not ours
    assert list(view.jobs) == [0]
    assert [p["metadata"]["name"] for p in view.pods] == ["demo-g0-0"]


def test_a_job_restarted_in_place_runs_the_generation_its_annotation_names_with_the_pods_it_owns():
    """Its pods keep the label of the generation the Job was made for; the Job says which one they run now."""
    restarted = {"uid": "job-0", "annotations": {GANG_GENERATION_ANNOTATION: "3"}}
    jobs = [_owned(_obj("demo-g0", 2, generation=0, metadata=restarted), "stj")]
    pods = [_owned(_obj(f"demo-g0-{rank}", 5 + rank, generation=0), "job-0") for rank in range(2)]
    view = children_view("demo", uid="stj", services=[], jobs=jobs, pods=pods, generation_hint=None)
    assert list(view.jobs) == [3]
    assert [p["metadata"]["name"] for p in view.pods] == ["demo-g0-0", "demo-g0-1"]


def test_the_pods_a_disruption_took_that_the_job_replaces_are_no_longer_the_gangs():
    """Those the last restart in place named, and any that ended disrupted and has a newer pod of its index."""
    replaced = {"uid": "job-0", "annotations": {GANG_GENERATION_ANNOTATION: "2", REPLACED_PODS_ANNOTATION: '["p-1"]'}}
    jobs = [_owned(_obj("demo-g0", 2, generation=0, metadata=replaced), "stj")]
    disrupted = {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True"}]}

    def pod(name, index, created, **fields):
        metadata = {"uid": name, "creationTimestamp": created,
                    "annotations": {naming.COMPLETION_INDEX_ANNOTATION: str(index)}}  # fmt: skip
        return _owned(_obj(name, 5, generation=0, metadata=metadata, **fields), "job-0")

    pods = [
        pod("p-0", 0, "2026-12-07T10:00:00Z", status=disrupted),  # its replacement is p-0b
        pod("p-0b", 0, "2026-12-07T10:05:00Z", status={"phase": "Running"}),
        pod("p-1", 1, "2026-12-07T10:00:00Z", status=disrupted),  # named: no replacement yet
        pod("p-2", 2, "2026-12-07T10:00:00Z", status=disrupted),  # still the gang's: it failed, and is judged
    ]
    view = children_view("demo", uid="stj", services=[], jobs=jobs, pods=pods, generation_hint=None)
    assert [p["metadata"]["name"] for p in view.pods] == ["p-0b", "p-2"]


def test_without_jobs_the_pods_are_those_of_the_generation_the_status_names():
    pods = [_obj("demo-g0-0", 5, generation=0), _obj("demo-g3-0", 6, generation=3)]
    view = children_view("demo", uid=None, services=[], jobs=[], pods=pods, generation_hint=3)
    assert view.services == {} and view.jobs == {}
    assert [p["metadata"]["name"] for p in view.pods] == ["demo-g3-0"]


def test_trust_is_lost_by_a_relist_and_won_back_by_a_fresh_read():
    cache = Cache()
    assert cache.trusted((NAMESPACE, "demo"))
    cache.distrust((NAMESPACE, "demo"))
    assert not cache.trusted((NAMESPACE, "demo"))
    cache.trust((NAMESPACE, "demo"))
    assert cache.trusted((NAMESPACE, "demo"))


# ---- which decisions from the cache are made again from fresh reads ----


def _stj(phase=None):
    return {"metadata": {"name": "demo"}, "status": {"phase": phase} if phase else {}}


@pytest.mark.parametrize(
    "phase, decision, fresh",
    [
        (None, Decision(create=({"kind": "Job"},), status={"phase": "Pending"}), False),  # a new job's first steps
        ("Pending", Decision(status={"phase": "Pending", "nodes": {"active": 2}}), False),  # counts only
        ("Running", Decision(status={"phase": "Running", "message": "1 of 2 nodes active"}), False),
        ("Running", Decision(delete_child_jobs=("demo-g0",), create=({"kind": "Job"},)), True),  # a gang restart
        ("Running", Decision(status={"phase": "Succeeded"}), True),  # finishing cannot be undone
        (None, Decision(status={"phase": "Failed"}, events=(Event("Warning", "InvalidSpec", "x"),)), True),
        ("Running", Decision(create=({"kind": "Job"},)), True),  # a started job lacking its Job: stale?
        ("Running", Decision(create=({"kind": "Service"},)), True),
        ("Running", Decision(status={"phase": "Pending"}), True),  # back from Running: pods the cache lacks?
        ("Pending", Decision(status={"phase": "Running"}), True),
    ],
)
def test_what_cannot_be_undone_or_contradicts_the_status_is_decided_again_from_fresh_reads(phase, decision, fresh):
    assert needs_fresh_look(_stj(phase), decision) is fresh


LIST_VERSION = 100  # the server's lists below are newer than anything the tests cached


class RecordingCluster:
    """What _reconcile asks of a Cluster, with the API server's answers given: records the fresh reads and
    the decisions applied."""

    def __init__(self, stj, children):
        self.cache, self.server = Cache(), (stj, children)
        self.reads: list[str] = []
        self.listed_not_older_than: list[str] = []
        self.applied: list[Decision] = []

    def read_scaletrainjob(self, namespace, name):
        self.reads.append("get stj")
        self.cache.scaletrainjobs.put(self.server[0])
        return self.cache.scaletrainjobs.get(namespace, name)

    def read_children(self, namespace, name, generation_hint=None, *, not_older_than):
        self.reads.append("list children")
        self.listed_not_older_than.append(not_older_than)
        for store, listed in zip((self.cache.services, self.cache.jobs, self.cache.pods), self.server[1], strict=True):
            store.replace_owned((namespace, name), listed, list_version=LIST_VERSION)
        return self.cache.observed(namespace, name, generation_hint)

    def apply(self, ref, decision):
        self.applied.append(decision)


def _stored(version, **status):
    document = base_job()
    document["metadata"] |= {"resourceVersion": str(version), "generation": 1}
    return document | ({"status": status} if status else {})


def _child_job(stj, generation, version):
    job = with_spec_hash(render_job(parse_job(stj), generation))
    job["metadata"] |= {"namespace": NAMESPACE, "resourceVersion": str(version), "uid": f"job-{generation}"}
    return job


def _children_of(stj):
    """The Services, the Job of generation 0 and its two pods, Running."""
    services = [render_service(parse_job(stj)), render_master_alias(parse_job(stj))]
    for service in services:
        service["metadata"] |= {"namespace": NAMESPACE, "resourceVersion": "2"}
    pods = [_owned(_obj(f"demo-g0-{i}", 4 + i, generation=0, status={"phase": "Running"}), "job-0") for i in range(2)]
    return services, [_child_job(stj, 0, 3)], pods


def _fill(cluster, stj, children):
    cluster.cache.scaletrainjobs.put(stj)
    for store, listed in zip((cluster.cache.services, cluster.cache.jobs, cluster.cache.pods), children, strict=True):
        for obj in listed:
            store.put(obj)


RUNNING = {"phase": "Running", "currentJob": "demo-g0", "startTime": "2026-11-30T11:00:00Z", "observedGeneration": 1}


def test_a_reconcile_of_a_trusted_job_reads_nothing():
    stj = _stored(10, **RUNNING)
    cluster = RecordingCluster(stj, _children_of(stj))
    _fill(cluster, stj, _children_of(stj))
    assert _reconcile(cluster, NAMESPACE, "demo").outcome in (Outcome.SETTLED, Outcome.ACTED)
    assert cluster.reads == []


def test_a_gang_restart_decided_from_the_cache_is_decided_again_from_fresh_reads():
    """The cache still shows a failed pod of g0, but the server already has g1 and counted the restart (the
    replica that was active until now did it): the fresh decision restarts nothing."""
    cached = _stored(10, **RUNNING)
    services, jobs, pods = _children_of(cached)
    failed = _owned(_obj("demo-g0-1", 9, generation=0, status={"phase": "Failed"}), "job-0")
    on_server = _stored(12, **RUNNING | {"currentJob": "demo-g1", "restarts": 1})
    cluster = RecordingCluster(on_server, (services, [_child_job(cached, 1, 11)], []))
    _fill(cluster, cached, (services, jobs, [pods[0], failed]))
    _reconcile(cluster, NAMESPACE, "demo")
    assert cluster.reads == ["get stj", "list children"]
    assert all(not decision.delete_child_jobs and not decision.create for decision in cluster.applied)
    assert cluster.cache.jobs.get(NAMESPACE, "demo-g0") is None  # the fresh list replaced the stale copy


def test_an_untrusted_job_is_read_fresh_once_then_trusted():
    stj = _stored(10, **RUNNING)
    cluster = RecordingCluster(stj, _children_of(stj))
    cluster.cache.scaletrainjobs.put(stj)  # relisted: its children's events may have been missed
    cluster.cache.distrust((NAMESPACE, "demo"))
    _reconcile(cluster, NAMESPACE, "demo")
    assert cluster.reads == ["get stj", "list children"] and cluster.cache.trusted((NAMESPACE, "demo"))
    assert all(decision.create == () for decision in cluster.applied)  # the children were there all along
    _reconcile(cluster, NAMESPACE, "demo")
    assert cluster.reads == ["get stj", "list children"]


def test_a_fresh_read_lists_the_children_as_of_no_earlier_than_the_job_it_read():
    """Every child the job's status can know of was written before the status: a list at least as new as the
    job has it (and the API server serves such a list from its watch cache, cluster.read_children)."""
    cached = _stored(10, **RUNNING)
    cluster = RecordingCluster(_stored(12, **RUNNING), _children_of(cached))
    cluster.cache.scaletrainjobs.put(cached)
    cluster.cache.distrust((NAMESPACE, "demo"))
    _reconcile(cluster, NAMESPACE, "demo")
    assert cluster.listed_not_older_than == ["12"]


def test_a_finished_job_needs_no_fresh_read_even_untrusted():
    stj = _stored(10, **RUNNING | {"phase": "Succeeded", "completionTime": "2026-11-30T11:30:00Z"})
    cluster = RecordingCluster(stj, ([], [], []))
    cluster.cache.scaletrainjobs.put(stj)
    cluster.cache.distrust((NAMESPACE, "demo"))
    assert _reconcile(cluster, NAMESPACE, "demo").outcome is Outcome.SETTLED
    assert cluster.reads == [] and cluster.applied == []


def test_a_job_being_deleted_or_gone_is_left_alone():
    cluster = RecordingCluster(None, None)
    cluster.cache.distrust((NAMESPACE, "demo"))  # a child's relisted event came first
    assert _reconcile(cluster, NAMESPACE, "demo").outcome is Outcome.GONE
    assert cluster.cache.trusted((NAMESPACE, "demo"))  # nothing kept about a job the cache does not hold
    cluster.cache.scaletrainjobs.put(_stored(10) | {"metadata": _stored(10)["metadata"] | {"deletionTimestamp": "x"}})
    assert _reconcile(cluster, NAMESPACE, "demo").outcome is Outcome.SETTLED
    assert cluster.reads == [] and cluster.applied == []


def test_a_job_the_cache_has_not_seen_yet_is_never_taken_for_one_deleted_by_hand():
    """Another replica created demo-g0 and recorded it in the status; this cache has the status's event but
    not yet the Job's (each kind has its own watch). From the cache the Job looks deleted, which would
    start the next generation; that decision is made again from fresh reads, which find the Job."""
    stj = _stored(10, **RUNNING)
    services, jobs, pods = _children_of(stj)
    cluster = RecordingCluster(stj, (services, jobs, pods))
    _fill(cluster, stj, (services, [], []))
    _reconcile(cluster, NAMESPACE, "demo")
    assert cluster.reads == ["get stj", "list children"]
    assert [decision.create for decision in cluster.applied] in ([], [()])
    assert all(event.reason != "JobDeleted" for decision in cluster.applied for event in decision.events)
    assert all((decision.status or {}).get("restarts", 0) == 0 for decision in cluster.applied)
