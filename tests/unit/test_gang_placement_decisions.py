"""Gang placement (render/workload.py, policy/placement.py): the Workload, the Jobs that delegate to
it, and the operator's decisions with and without the Workload API; topology placement for Kueue."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from kubernetes.client.rest import ApiException

from scaletrain_operator.api.naming import KUEUE_PREFERRED_TOPOLOGY, KUEUE_QUEUE_LABEL, KUEUE_REQUIRED_TOPOLOGY
from scaletrain_operator.controller.cache import Cache
from scaletrain_operator.controller.cluster import Cluster, ObjectRef
from scaletrain_operator.controller.decision import Observed
from scaletrain_operator.controller.handlers import FOREIGN_WORKLOAD_RECHECK_SECONDS, carry_out, decide_from
from scaletrain_operator.controller.reconcile import decide
from scaletrain_operator.controller.settings import OperatorConfig
from scaletrain_operator.controller.workqueue import Outcome
from scaletrain_operator.policy import placement as gang_placement
from scaletrain_operator.policy.pods import unplaced
from scaletrain_operator.render import workload as gang_workload
from scaletrain_operator.render.child_annotations import (
    SPEC_HASH_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    with_spec_hash,
)
from scaletrain_operator.render.children import render_children, render_job
from scaletrain_testing.gang_objects import (
    WorkloadServer,
    created,
    decoy_workload,
    gang_job,
    gang_pod,
    observed,
    scaletrain_job,
)
from scaletrain_testing.jobs import NAMESPACE, base_job, patched, running_status
from scaletrain_trainer.contract.validation import ProblemsError

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
WITH_API, WITHOUT_API = OperatorConfig(workload_api=True), OperatorConfig(workload_api=False)
TEMPLATE = gang_workload.GROUP_TEMPLATE_ANNOTATION
HOUR_AGO = NOW - timedelta(hours=1)
NO_CPU = "0/2 nodes are available: 2 Insufficient cpu."  # the scheduler's words for a pod it cannot place


def _kinds(children):
    return [(child["kind"], child["metadata"]["name"]) for child in children]


def _template(workload):
    """The gang the Workload asks for, the same in each of its templates (but for their names)."""
    even, odd = workload["spec"]["podGroupTemplates"]
    assert (even["name"], odd["name"]) == ("gang-even", "gang-odd")
    assert {k: v for k, v in even.items() if k != "name"} == {k: v for k, v in odd.items() if k != "name"}
    return even


def test_the_workload_asks_for_a_gang_of_every_node_with_the_jobs_priority_and_topology():
    job = scaletrain_job(nodes=4, priorityClassName="high", placement={"topology": {"required": "example.com/block"}})
    workload, *_, child_job = render_children(job)
    assert workload["kind"] == "Workload" and workload["metadata"]["name"] == "demo"
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "ScaleTrainJob"
    assert workload["spec"]["controllerRef"] == {"apiGroup": "scaletrain.io", "kind": "ScaleTrainJob", "name": "demo"}
    assert _template(workload) == {
        "name": "gang-even",
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": "example.com/block"}]},
        "priorityClassName": "high",
    }
    assert child_job["metadata"]["annotations"][TEMPLATE] == "gang-even"
    assert child_job["spec"]["template"]["spec"]["priorityClassName"] == "high"


@pytest.mark.parametrize(("gang", "served", "placed"), [
    ("auto", True, True), ("auto", False, False), ("workload", True, True), ("none", True, False),
])  # fmt: skip
def test_gang_auto_follows_the_cluster_and_none_renders_no_workload(gang, served, placed):
    children = render_children(scaletrain_job(scheduling={"gang": gang}), workload_api=served)
    assert ("Workload", "demo") in _kinds(children) if placed else "Workload" not in [c["kind"] for c in children]
    assert (TEMPLATE in children[-1]["metadata"].get("annotations", {})) == placed


def test_whether_the_cluster_serves_the_api_is_no_spec_change():
    job = scaletrain_job()
    hashes = {with_spec_hash(render_job(job, 0, uses_workload=uses))["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
              for uses in (True, False)}  # fmt: skip
    assert len(hashes) == 1


def test_a_new_jobs_workload_is_created_before_its_services_and_first_gang():
    decision = decide(scaletrain_job(), Observed(services={}, jobs={}, pods=[]), NOW, WITH_API)
    assert created(decision) == [
        ("Workload", "demo"), ("Service", "demo"), ("Service", "demo-master"), ("Job", "demo-g0")
    ]  # fmt: skip
    assert decision.create[-1]["metadata"]["annotations"][TEMPLATE] == "gang-even"


RUNNING = running_status(disruptions=0)
STORED = {"namespace": NAMESPACE, "uid": "stj-uid", "resourceVersion": "5"}  # as the API server holds the job
# A gang's Job as the operator suspends it for a spec change (its pods save and exit 80).
STOPPED = {"suspend": True, "annotations": {SUSPENDED_BY_OPERATOR_ANNOTATION: "1"}}


def test_a_gang_restart_reuses_the_workload_by_its_other_template():
    """The Job controller names a delegated PodGroup after the Workload and template alone, and the last
    gang's stays while its pods stop: the next gang takes the other template, for a PodGroup of its own."""
    job = scaletrain_job(status=RUNNING)
    crashed = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)]
    decision = decide(job, observed(job, {0: gang_job(job, uses_workload=True)}, crashed), NOW, WITH_API)
    assert created(decision) == [("Workload", "demo"), ("Job", "demo-g1")]  # made again if it went missing
    assert decision.delete_child_jobs == ("demo-g0",)
    assert decision.create[0]["metadata"]["annotations"][TEMPLATE] == "gang-odd"
    assert [render_job(job, g, uses_workload=True)["metadata"]["annotations"][TEMPLATE] for g in (2, 3)] == [
        "gang-even", "gang-odd"
    ]  # fmt: skip


def test_a_spec_change_remakes_the_workload_for_the_new_gang():
    running = scaletrain_job(status=RUNNING)
    resized = scaletrain_job(status=RUNNING, nodes=4, training={"globalBatchSize": 32})
    saved = [gang_pod(0, "Failed", exit_code=80), gang_pod(1, "Failed", exit_code=80)]
    decision = decide(
        resized, observed(running, {0: gang_job(running, uses_workload=True, **STOPPED)}, saved), NOW, WITH_API
    )
    assert created(decision) == [("Workload", "demo"), ("Job", "demo-g1")]
    assert _template(decision.workload)["schedulingPolicy"]["gang"]["minCount"] == 4


@pytest.mark.parametrize("before", ["first gang, its Workload's create failed", "last gang placed without it"])
def test_a_gang_whose_workload_may_be_missing_has_it_made_first(before):
    """A job's Workload is not read back: before a first gang (its create may have failed while the
    Services' went through), and before the first gang placed by it after one that was not (the cluster
    began to serve the API), it is made again; creating it again is a no-op (cluster.py)."""
    if before.startswith("first"):
        job = scaletrain_job()
        seen = observed(job, {})
        started = ("Job", "demo-g0")
    else:
        job = scaletrain_job(status=RUNNING)
        seen = observed(job, {0: gang_job(job)}, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)])
        started = ("Job", "demo-g1")
    decision = decide(job, seen, NOW, WITH_API)
    assert created(decision) == [("Workload", "demo"), started]
    assert TEMPLATE in decision.create[-1]["metadata"]["annotations"]


def test_a_topology_only_the_workload_keeps_is_part_of_the_spec_and_its_change_remakes_the_workload():
    running = scaletrain_job(status=RUNNING)
    moved = scaletrain_job(status=RUNNING, placement={"topology": {"required": "example.com/rack"}})
    stopped = observed(
        running, {0: gang_job(running, uses_workload=True, **STOPPED)}, [gang_pod(0, "Failed", exit_code=80)]
    )
    decision = decide(moved, stopped, NOW, WITH_API)
    assert created(decision) == [("Workload", "demo"), ("Job", "demo-g1")]
    assert decision.delete_child_jobs == ("demo-g0",) and decision.status["phase"] == "Restarting"
    assert _template(decision.workload)["schedulingConstraints"] == {"topology": [{"key": "example.com/rack"}]}


def test_a_required_topology_without_a_queue_on_a_cluster_without_the_api_fails_saying_what_to_change():
    """Nothing would keep the gang in one domain: it is not started as if no topology were asked for."""
    job = scaletrain_job(placement={"topology": {"required": "example.com/block"}})
    decision = decide(job, Observed({}, {}, []), NOW, WITHOUT_API)
    assert decision.create == () and decision.status["phase"] == "Failed"
    (condition,) = decision.status["conditions"]
    assert condition["reason"] == "GangSchedulingUnavailable"
    assert "spec.placement.topology.required" in condition["message"] and "set queueName" in condition["message"]
    queued = scaletrain_job(queueName="team", placement={"topology": {"required": "example.com/block"}})
    assert _kinds(decide(queued, Observed({}, {}, []), NOW, WITHOUT_API).create)[-1] == ("Job", "demo-g0")


def test_gang_workload_on_a_cluster_without_the_api_fails_the_job_saying_what_to_change():
    decision = decide(scaletrain_job(scheduling={"gang": "workload"}), Observed({}, {}, []), NOW, WITHOUT_API)
    assert decision.create == () and decision.status["phase"] == "Failed"
    (condition,) = decision.status["conditions"]
    assert condition["reason"] == "GangSchedulingUnavailable" and "set it to auto" in condition["message"]


def test_same_gang_ignores_what_the_api_server_adds_and_sees_what_changed():
    rendered = render_children(scaletrain_job(nodes=2))[0]
    served = patched(rendered, {})
    served["spec"]["podGroupTemplates"][0]["disruptionMode"] = {"all": {}}  # a default of the server's
    assert gang_placement.same_gang(served, rendered)
    assert not gang_placement.same_gang(served, render_children(scaletrain_job(nodes=4))[0])
    constrained = render_children(scaletrain_job(placement={"topology": {"required": "example.com/rack"}}))[0]
    assert not gang_placement.same_gang(constrained, rendered)


def test_a_topology_becomes_kueues_pod_template_annotation_for_a_queued_job():
    required = render_job(scaletrain_job(queueName="team", placement={"topology": {"required": "example.com/block"}}))
    assert required["spec"]["template"]["metadata"]["annotations"][KUEUE_REQUIRED_TOPOLOGY] == "example.com/block"
    preferred = render_job(scaletrain_job(queueName="team", placement={"topology": {"preferred": "example.com/rack"}}))
    assert preferred["spec"]["template"]["metadata"]["annotations"][KUEUE_PREFERRED_TOPOLOGY] == "example.com/rack"
    unqueued = render_job(scaletrain_job(placement={"topology": {"required": "example.com/block"}}))
    assert KUEUE_REQUIRED_TOPOLOGY not in unqueued["spec"]["template"]["metadata"]["annotations"]


def test_the_queue_label_on_the_job_queues_every_gang_like_queue_name():
    job = scaletrain_job(metadata={"labels": {KUEUE_QUEUE_LABEL: "team"}})
    child_job = render_job(job, 2)
    assert child_job["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team" and child_job["spec"]["suspend"] is True


def test_a_job_queued_by_the_label_that_failed_as_invalid_stops_its_gang_by_deleting_its_job():
    """Kueue owns a queued Job's suspend flag (it would start a suspended Job it admitted again), so the gang
    of a job that failed goes with its Job, whether queueName or the label named the queue."""
    sidecar = {"name": "log-shipper", "image": "busybox", "env": "LOG_LEVEL=debug"}  # env must be a list
    queued = {"metadata": {"generation": 1, "labels": {KUEUE_QUEUE_LABEL: "team"}}}
    stored = patched(base_job(podTemplate={"spec": {"containers": [sidecar]}}), queued)
    first = decide_from(stored, lambda generation: pytest.fail("an invalid new spec has no children to read"), NOW)
    assert first.status["phase"] == "Failed"
    failed = patched(stored, {"status": {**first.status, "currentJob": "demo-g0"}})
    admitted = {"metadata": {"name": "demo-g0"}, "spec": {"suspend": False}, "status": {}}
    decision = decide_from(failed, lambda generation: Observed({}, {0: admitted}, [gang_pod(0, "Running")]), NOW)
    assert decision.delete_child_jobs == ("demo-g0",) and decision.patch_child_job is None


@pytest.mark.parametrize(("spec", "path", "words"), [
    ({"placement": {"topology": {}}}, "spec.placement.topology.required", "give required or preferred"),
    ({"placement": {"topology": {"required": "a", "preferred": "b"}}}, "spec.placement.topology.required",
     "give required or preferred"),
    ({"placement": {"topology": {"required": "-bad-"}}}, "spec.placement.topology.required", "qualified name"),
    ({"placement": {"topology": {"preferred": "example.com/rack"}}}, "spec.placement.topology.preferred",
     "set queueName"),
    ({"scheduling": {"gang": "none"}, "placement": {"topology": {"required": "example.com/rack"}}},
     "spec.placement.topology.required", "scheduling.gang to auto"),
])  # fmt: skip
def test_a_topology_nothing_would_honour_is_refused_naming_the_field_and_the_fix(spec, path, words):
    with pytest.raises(ProblemsError) as refused:
        scaletrain_job(**spec)
    assert any(path in str(problem) and words in str(problem) for problem in refused.value.problems), refused.value


def test_a_pending_job_says_which_scheduling_gate_holds_its_pods():
    job = scaletrain_job(status={**RUNNING, "phase": "Pending"})
    gated = gang_pod(1, "Pending", scheduled=None, name="demo-g0-1-x")
    gated["spec"] = {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]}
    gated["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    pods = [gang_pod(0, "Pending", scheduled=None), gated]
    decision = decide(job, observed(job, {0: gang_job(job, uses_workload=True)}, pods), NOW, WITH_API)
    held = "pod demo-g0-1-x (held back from scheduling by the gate kueue.x-k8s.io/topology)"
    assert held in decision.status["message"]


def test_a_gang_that_does_not_fit_is_told_in_the_words_of_the_pod_that_says_why():
    group = "pod group is unschedulable, 0/1 placements are available"
    held = gang_pod(0, "Pending", scheduled=False, since=HOUR_AGO, scheduler_message=group)
    own = gang_pod(1, "Pending", scheduled=False, since=NOW - timedelta(minutes=30), scheduler_message=NO_CPU)
    assert unplaced([held, own], NOW).message == "0/2 nodes are available: 2 Insufficient cpu."
    # kube-scheduler 1.37 reports a gang no node is feasible for as a SchedulerError: unplaced all the same.
    why = 'error in "DynamicResources" PodGroupPostFilter'
    error = gang_pod(
        0,
        "Pending",
        scheduled=False,
        since=HOUR_AGO,
        scheduler_reason="SchedulerError",
        scheduler_message=why,
        name="demo-g0-0-x",
    )
    assert unplaced([error], NOW).pod == "demo-g0-0-x"


def test_schedule_timeout_counts_from_the_first_pod_of_the_gang_that_could_not_be_placed():
    """The pod that says most of why may be the newer one; the gang has waited since the older."""
    held = gang_pod(0, "Pending", scheduled=False, since=HOUR_AGO, scheduler_message="pod group is unschedulable")
    own = gang_pod(1, "Pending", scheduled=False, since=NOW - timedelta(minutes=5), scheduler_message=NO_CPU)
    job = scaletrain_job(status={**RUNNING, "phase": "Pending"}, scheduleTimeoutSeconds=600)
    decision = decide(job, observed(job, {0: gang_job(job, uses_workload=True)}, [held, own]), NOW, WITH_API)
    assert decision.status["phase"] == "Failed" and "Insufficient cpu" in decision.status["message"]


def test_a_queued_job_says_why_kueue_holds_it_back_once_housekeeping_found_out():
    why = "couldn't assign flavors to pod set main: insufficient unused quota for cpu"
    queued = {"type": "Queued", "status": "True", "reason": "WaitingForAdmission", "message": why,
              "lastTransitionTime": "2026-12-02T11:00:00Z"}  # fmt: skip
    job = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0", "conditions": [queued]}, queueName="team")
    decision = decide(job, observed(job, {0: gang_job(job, uses_workload=True)}), NOW, WITH_API)
    assert decision.status["message"] == (
        "waiting for Kueue to admit it from queue team: couldn't assign flavors to pod set main: insufficient "
        "unused quota for cpu"
    )


def test_a_workload_deleted_mid_run_is_made_again_before_the_next_gang_and_that_is_said_once_made():
    """Someone deleted the job's Workload while g0 ran: g1's Job still names a template of it, and without it
    the Job controller would make no PodGroup and the pods would be placed one by one."""
    job = scaletrain_job(status=RUNNING)
    crashed = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)]
    decision = decide(job, observed(job, {0: gang_job(job, uses_workload=True)}, crashed), NOW, WITH_API)
    workload = decision.workload
    assert (workload["kind"], decision.create[0]["metadata"]["name"]) == ("Workload", "demo-g1")
    said = decision.said_if_made(workload)
    assert (said.type, said.reason) == (
        "Warning",
        "WorkloadRecreated",
    ) and "made again before gang demo-g1" in said.message
    assert said not in decision.events  # posted only if the create made it (cluster.apply): it may be there still
    first = decide(scaletrain_job(), Observed({}, {}, []), NOW, WITH_API)
    assert first.said_if_made(first.workload) is None  # the first gang's Workload is no news


@pytest.mark.parametrize("there", [False, True], ids=["missing", "there"])
def test_the_recreated_event_is_posted_only_when_the_workload_was_in_fact_made(there):
    job = scaletrain_job(RUNNING, metadata={"namespace": "ns", "uid": "stj-uid"}, maxRestarts=3)
    crashed = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)]
    decision = decide(job, observed(job, {0: gang_job(job, uses_workload=True)}, crashed), NOW, WITH_API)
    workload, posted = decision.workload, []

    def server(method, path, body=None, query=None, content_type=None):
        if method == "POST" and path.endswith("/workloads") and there:
            raise ApiException(status=409, reason="AlreadyExists")
        if method == "GET":
            return {"items": [workload]}  # ours: its ownerReferences name the job
        if path.endswith("/events"):
            posted.append(body["reason"])
        return body | {
            "metadata": {"name": "demo"} | body.get("metadata", {}) | {"namespace": "ns", "resourceVersion": "7"}
        }

    cluster = Cluster(api=None)
    cluster._request = server
    cluster.apply(ObjectRef("ns", "demo", "stj-uid", "5"), decision)
    assert ("WorkloadRecreated" in posted) is not there and "Restarting" in posted


def test_a_gang_that_the_job_controller_put_in_another_workloads_pod_group_restarts_to_be_placed_by_the_jobs():
    """A co-tenant's Workload "decoy" names the job in its controllerRef, with minCount 1: the Job controller took
    it for the job's and the pods landed in its PodGroup, to be placed one by one."""
    job = scaletrain_job(status=RUNNING)
    theirs = [gang_pod(0, "Running"), gang_pod(1, "Pending", scheduled=None)]
    ours = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    for pod in theirs:
        pod["spec"] = {"schedulingGroup": {"podGroupName": gang_workload.pod_group_name("decoy", "gang-even")}}
    for pod in ours:
        pod["spec"] = {"schedulingGroup": {"podGroupName": gang_workload.pod_group_name("demo", "gang-even")}}
    assert decide(job, observed(job, {0: gang_job(job, uses_workload=True)}, ours), NOW, WITH_API).create == ()
    decision = decide(job, observed(job, {0: gang_job(job, uses_workload=True)}, theirs), NOW, WITH_API)
    assert created(decision) == [("Workload", "demo"), ("Job", "demo-g1")]
    assert decision.status["disruptions"] == 1 and decision.status["restarts"] == 0  # not the job's doing
    (said,) = [event for event in decision.events if event.reason == "ForeignWorkload"]
    assert "PodGroup decoy-gang-even-" in said.message and "delete the other Workload" in said.message


def test_the_cache_keeps_the_pod_group_of_each_pod_so_that_a_gang_placed_by_another_workload_is_seen():
    """What the operator reads of a pod is cut to what it needs (cache.pod_summary): the PodGroup is among it."""
    job = scaletrain_job(status=RUNNING)
    cache = Cache()
    cache.jobs.put(gang_job(job, uses_workload=True))
    for index in (0, 1):
        pod = gang_pod(index, "Running")
        group = {"podGroupName": gang_workload.pod_group_name("decoy", "gang-even")}
        pod["spec"] = {"nodeName": f"node-{index}", "schedulingGroup": group, "containers": [{"name": "trainer"}]}
        cache.pods.put(pod)
    seen = cache.observed(NAMESPACE, "demo")
    assert sorted(pod["spec"]["nodeName"] for pod in seen.pods) == ["node-0", "node-1"]
    assert all(pod["spec"] == {"nodeName": pod["spec"]["nodeName"], "schedulingGroup": group} for pod in seen.pods)
    decision = decide(job, seen, NOW, WITH_API)
    assert decision.delete_child_jobs == ("demo-g0",) and ("Job", "demo-g1") in created(decision)
    assert [event.reason for event in decision.events if event.type == "Warning"][0] == "ForeignWorkload"


def test_only_a_workload_that_names_the_same_job_and_is_not_the_jobs_own_is_foreign():
    own = render_children(scaletrain_job())[0]
    another_jobs = decoy_workload(job="other", name="elsewhere")
    a_batch_job = {"spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job"}}}
    not_a_jobs = patched(decoy_workload(name="batch"), a_batch_job)
    claims = [decoy_workload(name="zz"), own, decoy_workload(), another_jobs, not_a_jobs]
    assert [workload["metadata"]["name"] for workload in gang_placement.foreign_workloads(claims, own)] == [
        "decoy", "zz"
    ]  # fmt: skip
    assert gang_placement.claimed_job(not_a_jobs) is None and gang_placement.claimed_job(own) == "demo"


def _cluster_knowing(held, served):
    """A Cluster whose watch brought the Workloads `held` into its cache, on an API server that holds `served`."""
    server = WorkloadServer(served)
    cluster = Cluster(api=None)
    cluster._request = server
    for workload in held:
        cluster.cache.workloads.put(workload)
    return cluster, server


@pytest.mark.parametrize("gang", ["first", "after a restart"])
def test_no_gangs_job_is_made_while_another_workload_names_the_job_and_an_event_says_which_once(gang):
    """The decoy came first, or after the job's own Workload was deleted mid-run: either way the Job controller
    could take it for the job's. Nothing of the gang is made; the job waits, saying which Workload to delete."""
    if gang == "first":
        job, seen, next_job = scaletrain_job(metadata=STORED), Observed({}, {}, []), "demo-g0"
    else:
        job = scaletrain_job(RUNNING, metadata=STORED)
        crashed = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)]
        seen, next_job = observed(job, {0: gang_job(job, uses_workload=True)}, crashed), "demo-g1"
    decision = decide(job, seen, NOW, WITH_API)
    assert (decision.workload["metadata"]["name"], decision.create[-1]["metadata"]["name"]) == ("demo", next_job)
    cluster, server = _cluster_knowing([decoy_workload()], [decoy_workload()])
    stored = patched(base_job(), {"metadata": STORED} | ({"status": RUNNING} if gang != "first" else {}))
    reconciled = carry_out(cluster, stored, decision)
    assert reconciled == (Outcome.WAITING, FOREIGN_WORKLOAD_RECHECK_SECONDS)
    made = [path.rsplit("/", 1)[-1] for method, path in server.requests if method in ("POST", "DELETE")]
    assert "jobs" not in made and "workloads" not in made and "demo-g0" not in made
    assert carry_out(cluster, stored, decision) == reconciled  # looked at again: the same Event, posted once
    said = {name for reason, name in server.events if reason == "ForeignWorkload"}
    assert len(said) == 1 and None not in said  # named for the job, its reason and the decoy's uid
    status = cluster.cache.scaletrainjobs.get(NAMESPACE, "demo")["status"]
    assert status["phase"] == ("Pending" if gang == "first" else "Running")
    assert "Workload decoy in this namespace names this job" in status["message"]
    assert status["message"].endswith("delete Workload decoy")


def test_a_workload_the_watch_saw_that_is_gone_holds_no_gang_back():
    """A deletion the watch missed: the Workload is read again by name, found gone, and forgotten."""
    decision = decide(scaletrain_job(metadata=STORED), Observed({}, {}, []), NOW, WITH_API)
    cluster, server = _cluster_knowing([decoy_workload()], [])
    cluster.apply(ObjectRef(NAMESPACE, "demo", "stj-uid", "5"), decision)
    assert ("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs") in server.requests
    assert [w["metadata"]["name"] for w in cluster.cache.workloads.owned_by(NAMESPACE, "demo")] == ["demo"]


def test_the_pod_group_name_is_the_job_controllers():
    """computePodGroupName of Kubernetes 1.37 (pkg/controller/job): the names, and an FNV-1a hash of both, in the
    alphabet of rand.SafeEncodeString; the integration tier compares it with what the Job controller made."""
    assert gang_workload.pod_group_name("whole", "gang-even") == "whole-gang-even-6c46c56894"  # Go's hash/fnv
    assert gang_workload.pod_group_name("demo", "gang-odd") == "demo-gang-odd-7578f5bc8f"
