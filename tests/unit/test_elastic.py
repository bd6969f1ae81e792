"""Elastic gangs without a cluster: the sizes a job may use, and the operator's decisions to shrink a gang
the scheduler cannot place and to grow it back when a capacity probe finds room."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from scaletrain_operator.api.conditions import STOPPING
from scaletrain_operator.api.job import parse_job
from scaletrain_operator.api.naming import LABEL_GENERATION, LABEL_JOB_NAME
from scaletrain_operator.controller.cache import children_view
from scaletrain_operator.controller.cluster import ChildRejected, Cluster, ObjectRef
from scaletrain_operator.controller.reconcile import decide
from scaletrain_operator.controller.resizing import at_gang_size
from scaletrain_operator.controller.settings import OperatorConfig
from scaletrain_operator.policy import elastic
from scaletrain_operator.render.capacity_probe import PROBE_TIMEOUT_S
from scaletrain_operator.render.child_annotations import (
    RESIZE_REASON_ANNOTATION,
    RESIZE_TO_ANNOTATION,
    RESIZE_WHY,
    with_spec_hash,
)
from scaletrain_operator.render.children import render_job
from scaletrain_operator.validation import elastic_sizes
from scaletrain_testing.gang_objects import (
    PROBE_CLASS,
    elastic_job,
    gang_job,
    gang_pod,
    observed,
    operator_suspends,
    probe_of,
    probe_pod,
    rfc3339,
)
from scaletrain_testing.jobs import base_job
from scaletrain_trainer.contract.validation import ProblemsError

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
HOUR_AGO = NOW - timedelta(hours=1)
PROBING = OperatorConfig(probe_priority_class=PROBE_CLASS)
RUNNING = {"phase": "Running", "currentJob": "demo-g0", "startTime": rfc3339(HOUR_AGO)}


def _env(child, name):
    container = child["spec"]["template"]["spec"]["containers"][0]
    return next(var["value"] for var in container["env"] if var["name"] == name)


def _spec(**spec):
    return parse_job(base_job(**spec)).spec


def test_the_sizes_are_those_of_the_range_that_keep_the_global_batch_exact():
    spec = _spec(nodes=6, elastic={"minNodes": 2}, training={"globalBatchSize": 48, "microBatchSize": 4})
    assert elastic_sizes.sizes(spec) == [2, 3, 4, 6]  # 5 ranks would need 9.6 samples each
    assert elastic_sizes.sizes(_spec(nodes=4)) == [4]  # not elastic: the one size
    script = parse_job(base_job(nodes=5, elastic={"minNodes": 3}, training=None, command=["python", "x.py"])).spec
    assert elastic_sizes.sizes(script) == [3, 4, 5]  # a script of one's own keeps its maths itself


def test_a_range_whose_smallest_gang_changes_the_batch_is_refused_naming_the_sizes_that_keep_it():
    training = {"globalBatchSize": 48, "microBatchSize": 4}
    with pytest.raises(ProblemsError) as refused:
        _spec(nodes=6, elastic={"minNodes": 5}, training=training)
    (problem,) = refused.value.problems
    assert problem.path == ("spec", "elastic", "minNodes")
    assert "The sizes up to 6 that keep it: 1, 2, 3, 4, 6" in problem.message
    assert "make globalBatchSize a multiple of 120" in problem.message  # 4 samples × lcm(5, 6)
    assert elastic_sizes.problems(_spec(nodes=6, elastic={"minNodes": 2}, training=training)) == []


@pytest.mark.parametrize(
    ("size", "placed", "smaller"),
    [(6, 5, 4), (6, 3, 3), (6, 0, 4), (4, 4, 3), (2, 1, None)],
)
def test_a_gang_shrinks_to_the_largest_size_the_scheduler_placed_else_one_size_down(size, placed, smaller):
    """With gang placement the scheduler places no pod of a gang that does not fit: one size down then."""
    spec = _spec(nodes=6, elastic={"minNodes": 2}, training={"globalBatchSize": 48, "microBatchSize": 4})
    assert elastic.smaller(spec, size, placed) == smaller


def test_a_gang_grows_to_the_largest_allowed_size_the_room_found_fits():
    spec = _spec(nodes=6, elastic={"minNodes": 2}, training={"globalBatchSize": 48, "microBatchSize": 4})
    assert elastic.larger(spec, 2, 3) == 4 and elastic.larger(spec, 4, 1) is None and elastic.larger(spec, 4, 2) == 6


def _unplaced_gang(since, generation=0):
    return [
        gang_pod(0, "Running", generation),
        gang_pod(1, "Running", generation),
        gang_pod(2, "Pending", generation, scheduled=False, since=since),
    ]


def test_a_gang_the_scheduler_cannot_place_within_scale_down_after_seconds_stops_to_shrink():
    job = elastic_job(status=RUNNING | {"phase": "Pending"})
    gang = gang_job(job, 0, 3, created=HOUR_AGO)
    waiting = decide(job, observed(job, {0: gang}, _unplaced_gang(since=NOW - timedelta(seconds=100))), NOW)
    assert waiting.patch_child_job is None and waiting.recheck_after == 20
    decision = decide(job, observed(job, {0: gang}, _unplaced_gang(since=NOW - timedelta(seconds=120))), NOW)
    annotations = {RESIZE_TO_ANNOTATION: "2", RESIZE_REASON_ANNOTATION: "Unschedulable"}
    assert decision.patch_child_job == operator_suspends("demo-g0", **annotations)
    assert decision.create == () and decision.delete_child_jobs == ()
    assert decision.status["phase"] == "Restarting"
    assert decision.status["conditions"][-1]["reason"] == STOPPING
    assert decision.status["message"].startswith("the gang resizes from 3 to 2 nodes (the scheduler could not place")
    assert decision.status["elasticSizes"] == [2, 3]


def test_a_planned_resize_starts_the_next_gang_at_its_size_once_the_pods_saved_and_counts_nothing():
    job = elastic_job(status=RUNNING | {"phase": "Restarting", "restarts": 1})
    planned = {RESIZE_TO_ANNOTATION: "2", RESIZE_REASON_ANNOTATION: "Unschedulable"}
    gang = gang_job(job, 0, 3, created=HOUR_AGO, suspend=True, annotations=planned)
    saving = [gang_pod(0, "Running")]
    assert decide(job, observed(job, {0: gang}, saving), NOW).create == ()
    decision = decide(job, observed(job, {0: gang}, []), NOW)
    (next_gang,) = decision.create
    assert next_gang["metadata"]["name"] == "demo-g1" and next_gang["spec"]["completions"] == 2
    assert (_env(next_gang, "WORLD_SIZE"), _env(next_gang, "PET_NNODES")) == ("2", "2")
    assert decision.delete_child_jobs == ("demo-g0",)
    assert (decision.status["restarts"], decision.status["disruptions"]) == (1, 0)
    assert decision.status["nodes"]["current"] == 2
    (resize,) = decision.status["resizes"]
    assert (resize["fromNodes"], resize["toNodes"], resize["reason"]) == (3, 2, "Unschedulable")
    (resized,) = [event.message for event in decision.events if event.reason == "Resized"]
    assert resized.startswith("the gang resizes from 3 to 2 nodes (the scheduler could not place the whole gang")


def test_at_the_smallest_size_a_gang_waits_and_schedule_timeout_applies():
    job = elastic_job(status=RUNNING | {"phase": "Pending"}, scheduleTimeoutSeconds=600)
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    pods = [gang_pod(0, "Running"), gang_pod(1, "Pending", scheduled=False, since=NOW - timedelta(seconds=300))]
    decision = decide(job, observed(job, {0: gang}, pods), NOW)
    assert decision.patch_child_job is None and decision.recheck_after == 300
    late = [gang_pod(0, "Running"), gang_pod(1, "Pending", scheduled=False, since=NOW - timedelta(seconds=600))]
    assert decide(job, observed(job, {0: gang}, late), NOW).status["phase"] == "Failed"


def test_a_failed_gang_restarts_at_its_own_size_not_the_desired_one():
    job = elastic_job(status=RUNNING)
    gang = gang_job(job, 0, 2, created=NOW)  # no capacity probe due yet
    seen = observed(job, {0: gang}, [gang_pod(0, "Running"), gang_pod(1, "Running")])
    assert at_gang_size(job, seen).spec.nodes == 2 and decide(job, seen, NOW).create == ()
    crashed = observed(
        job, {0: gang}, [gang_pod(0, "Running"), {**gang_pod(1, "Failed"), "status": {"phase": "Failed"}}]
    )
    (restarted,) = decide(job, crashed, NOW).create
    assert restarted["spec"]["completions"] == 2


def test_a_gang_below_its_size_probes_for_room_every_check_interval():
    job = elastic_job(status=RUNNING, nodeSelector={"pool": "a100"})
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    young = gang_job(job, 0, 2, created=NOW - timedelta(seconds=200))
    decision = decide(job, observed(job, {0: young}, running), NOW, PROBING)
    assert decision.create == () and decision.recheck_after == 100
    assert decision.status["message"] == "2 of 2 nodes active (spec.nodes is 3; growing back when there is room)"
    gang = gang_job(job, 0, 2, created=NOW - timedelta(seconds=300))
    probing = decide(job, observed(job, {0: gang}, running), NOW, PROBING)
    probe = probing.create_probe
    assert probing.create == ()
    assert probing.status["capacityProbedAt"] == rfc3339(NOW) and probing.recheck_after == PROBE_TIMEOUT_S
    assert probe["metadata"]["name"] == "demo-probe" and probe["spec"]["completions"] == 1
    pod = probe["spec"]["template"]["spec"]
    gang_pod_spec = gang["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "a100"} and pod.get("tolerations") == gang_pod_spec.get("tolerations")
    assert [c["resources"] for c in pod["containers"]] == [c["resources"] for c in gang_pod_spec["containers"]]
    assert pod["containers"][0]["command"] == ["sleep", "3600"] and pod["priorityClassName"] == PROBE_CLASS
    # Not a pod of the gang (whose pods are found by their generation), nor of the gang's Job.
    labels = probe["spec"]["template"]["metadata"]["labels"]
    assert LABEL_GENERATION not in labels and "job-name" not in labels and "controller-uid" not in labels
    # The last probe ended 100 s ago: the next one is due in 200 s.
    probed_at = {"capacityProbedAt": rfc3339(NOW - timedelta(seconds=100))}
    probed = elastic_job(status=RUNNING | probed_at, nodeSelector={"pool": "a100"})
    assert decide(probed, observed(probed, {0: gang}, running), NOW, PROBING).recheck_after == 200


def test_without_a_class_that_preempts_nothing_no_probe_is_made_and_the_gang_does_not_grow():
    """A probe of the gang's own class (say 1000) could preempt another tenant's pod and grow into its room."""
    job = elastic_job(status=RUNNING, priorityClassName="team-high")
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    decision = decide(job, observed(job, {0: gang}, [gang_pod(0, "Running"), gang_pod(1, "Running")]), NOW)
    assert decision.create == () and decision.status["phase"] == "Running"
    (said,) = decision.events
    assert said.reason == "CapacityProbeFailed" and "the gang does not grow back" in said.message


def test_a_probe_the_scheduler_placed_stops_the_gang_to_grow_it_and_goes():
    job = elastic_job(status=RUNNING | {"resizes": [_resized(3, 2, "Unschedulable")]})
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    probe = probe_of(job, gang, 1, created=NOW - timedelta(seconds=5))
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    decision = decide(job, observed(job, {0: gang}, running, probe, [probe_pod(0, scheduled=True)]), NOW)
    annotations = {RESIZE_TO_ANNOTATION: "3", RESIZE_REASON_ANNOTATION: "CapacityReturned"}
    assert decision.patch_child_job == operator_suspends("demo-g0", **annotations)
    assert decision.delete_child_jobs == ("demo-probe",) and decision.create == ()
    assert "a capacity probe found room for a larger gang" in decision.status["message"]


def test_a_probe_waits_for_the_schedulers_verdict_then_goes_and_the_gang_trains_on():
    job = elastic_job(status=RUNNING | {"capacityProbedAt": rfc3339(NOW - timedelta(seconds=5))})
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    probe = probe_of(job, gang, 1, created=NOW - timedelta(seconds=5))
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    pending = decide(job, observed(job, {0: gang}, running, probe, [probe_pod(0, scheduled=None)]), NOW)
    assert pending.delete_child_jobs == () and pending.recheck_after == PROBE_TIMEOUT_S - 5
    no_room = [probe_pod(0, scheduled=False, since=NOW)]
    decision = decide(job, observed(job, {0: gang}, running, probe, no_room), NOW)
    assert decision.delete_child_jobs == ("demo-probe",) and decision.patch_child_job is None
    assert "capacityProbedAt" not in decision.status and decision.recheck_after == 300 - 5
    assert decision.status["phase"] == "Running"
    silent = probe_of(job, gang, 1, created=NOW - timedelta(seconds=PROBE_TIMEOUT_S))
    timed_out = decide(job, observed(job, {0: gang}, running, silent, [probe_pod(0, scheduled=None)]), NOW)
    assert timed_out.delete_child_jobs == ("demo-probe",)


def test_a_probe_is_deleted_when_the_gang_restarts_or_the_job_finishes():
    job = elastic_job(status=RUNNING)
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    probe = probe_of(job, gang, 1, created=NOW)
    crashed = [gang_pod(0, "Running"), {**gang_pod(1, "Failed"), "status": {"phase": "Failed"}}]
    restart = decide(job, observed(job, {0: gang}, crashed, probe), NOW)
    assert restart.delete_child_jobs == ("demo-g0", "demo-probe")
    done = elastic_job(status=RUNNING | {"phase": "Succeeded"})
    assert decide(done, observed(done, {0: gang}, [], probe), NOW).delete_child_jobs == ("demo-probe",)


def test_with_gang_placement_the_workload_asks_for_the_new_size():
    job = elastic_job(status=RUNNING | {"phase": "Restarting"})
    planned = {RESIZE_TO_ANNOTATION: "2", RESIZE_REASON_ANNOTATION: "Unschedulable"}
    gang = gang_job(job, 0, 3, created=HOUR_AGO, suspend=True, annotations=planned)
    decision = decide(job, observed(job, {0: gang}, []), NOW, OperatorConfig(workload_api=True))
    workload = decision.workload
    counts = {t["schedulingPolicy"]["gang"]["minCount"] for t in workload["spec"]["podGroupTemplates"]}
    assert counts == {2}


def test_kubectl_scale_below_the_running_size_of_an_elastic_gang_resizes_at_once():
    """Scaling down needs no room: the gang stops at a step boundary and the next is the new size."""
    job = elastic_job(status=RUNNING, nodes=2)
    gang = gang_job(job, 0, 3, created=HOUR_AGO)
    running = [gang_pod(0, "Running"), gang_pod(1, "Running"), gang_pod(2, "Running")]
    decision = decide(job, observed(job, {0: gang}, running), NOW)
    assert decision.patch_child_job == operator_suspends("demo-g0")


def test_a_probe_half_placed_waits_for_the_rest_then_grows_the_gang_as_far_as_the_room_goes():
    job = elastic_job(status=RUNNING, nodes=4)
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    probe = probe_of(job, gang, 2, created=NOW - timedelta(seconds=5))
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    one_placed = [probe_pod(0, scheduled=True), probe_pod(1, scheduled=None)]
    waiting = decide(job, observed(job, {0: gang}, running, probe, one_placed), NOW)
    assert waiting.patch_child_job is None and waiting.delete_child_jobs == ()
    judged = [probe_pod(0, scheduled=True), probe_pod(1, scheduled=False, since=NOW)]
    decision = decide(job, observed(job, {0: gang}, running, probe, judged), NOW)
    assert decision.patch_child_job.annotations[RESIZE_TO_ANNOTATION] == "3"
    assert decision.delete_child_jobs == ("demo-probe",)


@pytest.mark.parametrize(
    ("shrank_from", "placed", "grown_to", "reason"),
    [
        (None, 1, 3, "Scaled"),  # it ran at 2, spec.nodes then: only kubectl scale made it smaller than 6
        (3, 1, 3, "CapacityReturned"),  # it shrank from 3: the room came back
        (4, 2, 4, "CapacityReturned"),  # as far as the size it shrank from
        (4, 4, 6, "Scaled"),  # beyond it, which only the scale allows: the user's new spec.nodes decided the size
    ],
)
def test_a_growth_on_a_probes_word_is_recorded_as_the_scale_that_allowed_it_or_the_room_that_came_back(
    shrank_from, placed, grown_to, reason
):
    """A gang of 2 runs below spec.nodes 6 (kubectl scale set it): because it shrank from `shrank_from`, or
    because it ran at 2 when spec.nodes was 2. The probe for 4 pods finds room for `placed`."""
    shrank = [_resized(shrank_from, 2, "Unschedulable")] if shrank_from else []
    job = elastic_job(status=RUNNING | {"resizes": shrank}, nodes=6)
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    probe = probe_of(job, gang, 4, created=NOW - timedelta(seconds=5))
    judged = [probe_pod(n, scheduled=n < placed, since=NOW) for n in range(4)]
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    stopping = decide(job, observed(job, {0: gang}, running, probe, judged), NOW)
    annotations = stopping.patch_child_job.annotations
    assert (annotations[RESIZE_TO_ANNOTATION], annotations[RESIZE_REASON_ANNOTATION]) == (str(grown_to), reason)
    # Its pods saved their checkpoint: the next gang starts at the new size, and the resize is recorded for it.
    restarting = elastic_job(status=RUNNING | {"resizes": shrank, "phase": "Restarting"}, nodes=6)
    stopped = gang_job(job, 0, 2, created=HOUR_AGO, suspend=True, annotations=annotations)
    decision = decide(restarting, observed(restarting, {0: stopped}, []), NOW)
    assert decision.create[0]["spec"]["completions"] == grown_to
    recorded = decision.status["resizes"][-1]
    assert (recorded["fromNodes"], recorded["toNodes"], recorded["reason"]) == (2, grown_to, reason)
    (resized,) = [event.message for event in decision.events if event.reason == "Resized"]
    assert resized == f"the gang resizes from 2 to {grown_to} nodes ({RESIZE_WHY[reason]})"


@pytest.mark.parametrize(("scaled_to", "next_size"), [(3, 3), (2, 2)])
def test_a_resize_under_way_waits_for_the_checkpoint_even_when_the_spec_changed_meanwhile(scaled_to, next_size):
    """The gang stops to grow from 2 to 4, and kubectl scale sets nodes to 3 (or back to 2) meanwhile: the
    next gang still starts only once the pods saved, at the largest size the spec now allows."""
    planned = {RESIZE_TO_ANNOTATION: "4", RESIZE_REASON_ANNOTATION: "CapacityReturned"}
    before = elastic_job(status=RUNNING, nodes=4)
    gang = gang_job(before, 0, 2, created=HOUR_AGO, suspend=True, annotations=planned)
    job = elastic_job(status=RUNNING | {"phase": "Restarting"}, nodes=scaled_to)
    saving = decide(job, observed(job, {0: gang}, [gang_pod(0, "Running")]), NOW)
    assert saving.create == () and saving.delete_child_jobs == ()
    (next_gang,) = decide(job, observed(job, {0: gang}, []), NOW).create
    assert next_gang["spec"]["completions"] == next_size


def test_schedule_timeout_waits_while_a_gang_can_still_shrink():
    job = elastic_job(status=RUNNING | {"phase": "Pending"}, scheduleTimeoutSeconds=60)
    gang = gang_job(job, 0, 3, created=HOUR_AGO)
    decision = decide(job, observed(job, {0: gang}, _unplaced_gang(since=NOW - timedelta(seconds=100))), NOW)
    assert decision.status.get("phase") != "Failed" and decision.recheck_after == 20


def _resized(from_nodes, to_nodes, reason):
    return {"time": rfc3339(HOUR_AGO), "fromNodes": from_nodes, "toNodes": to_nodes, "reason": reason}


@pytest.mark.parametrize("growth", ["CapacityReturned", "Scaled"])
@pytest.mark.parametrize(("ran", "size", "reason"), [(False, "2", "CapacityTaken"), (True, "3", "Unschedulable")])
def test_a_gang_that_grew_and_never_ran_goes_back_to_the_size_it_grew_from(ran, size, reason, growth):
    """Not one size down at a time: the size it grew from fitted. A gang that did run at the larger size and
    then lost a node shrinks as any other. So too where kubectl scale had raised spec.nodes (a Scaled growth)."""
    grew = {"resizes": [_resized(4, 2, "Unschedulable"), _resized(2, 4, growth)]}
    since = NOW - timedelta(minutes=30 if ran else 90)
    running = {"type": "Running", "status": "True", "reason": "Running", "lastTransitionTime": rfc3339(since)}
    job = elastic_job(status=RUNNING | {"phase": "Pending", "conditions": [running]} | grew, nodes=4)
    gang = gang_job(job, 0, 4, created=HOUR_AGO)
    unplaced = [*_unplaced_gang(since=NOW - timedelta(seconds=120)), gang_pod(3, "Running")]
    annotations = decide(job, observed(job, {0: gang}, unplaced), NOW).patch_child_job.annotations
    assert (annotations[RESIZE_TO_ANNOTATION], annotations[RESIZE_REASON_ANNOTATION]) == (size, reason)


def test_each_growth_that_could_not_be_placed_doubles_the_time_to_the_next_probe():
    flapped = [_resized(2, 3, "CapacityReturned"), _resized(3, 2, "CapacityTaken")]
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    for flaps, due in ((1, 600), (2, 1200)):
        job = elastic_job(status=RUNNING | {"resizes": flapped * flaps})
        gang = gang_job(job, 0, 2, created=NOW)
        assert decide(job, observed(job, {0: gang}, running), NOW, PROBING).recheck_after == due


def test_after_four_growths_in_a_row_that_could_not_be_placed_the_probes_stop_and_say_so():
    """A probe that always fits where the gang never does (a host port it lacked, say) made the gang flap for ever."""
    flapped = [_resized(2, 3, "CapacityReturned"), _resized(3, 2, "CapacityTaken")]
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    job = elastic_job(status=RUNNING | {"resizes": flapped * 4})
    decision = decide(job, observed(job, {0: gang_job(job, 0, 2, created=HOUR_AGO)}, running), NOW, PROBING)
    assert decision.create == () and decision.status["phase"] == "Running"
    (said,) = decision.events
    assert (
        said.reason == "CapacityProbeFailed" and "4 times in a row" in said.message and "kubectl scale" in said.message
    )
    # kubectl scale, a resize of another kind, ends the run of failed growths: the probes come again.
    scaled = elastic_job(status=RUNNING | {"resizes": [*flapped * 4, _resized(3, 2, "Scaled")]})
    again = decide(scaled, observed(scaled, {0: gang_job(scaled, 0, 2, created=HOUR_AGO)}, running), NOW, PROBING)
    assert again.create == () and again.create_probe["metadata"]["name"] == "demo-probe"


def test_a_probe_asks_for_the_gangs_host_ports_and_claims_or_there_is_none():
    """A probe that dropped the gang's host port fitted on nodes where the gang could not, for ever."""
    template = {"spec": {"containers": [{"name": "trainer", "ports": [{"containerPort": 7000, "hostPort": 7000}]}]}}
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "shards"}}
    job = elastic_job(status=RUNNING, podTemplate=template, volumes=[claim],
                      volumeMounts=[{"name": "data", "mountPath": "/data"}])  # fmt: skip
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    probe = decide(job, observed(job, {0: gang_job(job, 0, 2, created=HOUR_AGO)}, running), NOW, PROBING).create_probe
    pod = probe["spec"]["template"]["spec"]
    trainer = next(container for container in pod["containers"] if container["name"] == "trainer")
    assert {"containerPort": 7000, "hostPort": 7000} in trainer["ports"] and pod["volumes"] == [claim]
    claims = {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}}
    devices = elastic_job(status=RUNNING, podTemplate=claims)
    decision = decide(devices, observed(devices, {0: gang_job(devices, 0, 2, created=HOUR_AGO)}, running), NOW, PROBING)
    assert decision.create == () and "resourceClaims" in decision.events[0].message


def test_a_gang_whose_job_was_deleted_restarts_at_the_size_it_had():
    job = elastic_job(status=RUNNING | {"nodes": {"current": 2}})
    (restarted,) = [child for child in decide(job, observed(job, {}, []), NOW).create if child["kind"] == "Job"]
    assert restarted["metadata"]["name"] == "demo-g1" and restarted["spec"]["completions"] == 2


class RefusingCluster(Cluster):
    """The cluster layer with an API server that refuses every child as a policy webhook would."""

    def __init__(self):
        super().__init__(api=None)
        self.events, self.statuses = [], []

    def create_child(self, namespace, obj):
        raise ChildRejected("ChildRejected", f"the API server refused Job {obj['metadata']['name']}: denied by policy")

    def post_event(self, stj, event):
        self.events.append(event)

    def patch_status(self, stj, status):
        self.statuses.append(status)


def test_a_probe_the_api_server_refuses_fails_nothing_and_says_why():
    job = elastic_job(status=RUNNING)
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    decision = decide(job, observed(job, {0: gang}, [gang_pod(0, "Running"), gang_pod(1, "Running")]), NOW, PROBING)
    assert decision.create == () and decision.create_probe["metadata"]["name"] == "demo-probe"
    cluster = RefusingCluster()
    cluster.apply(ObjectRef("team-a", "demo", "6f1c2a7e-1111-4c3b-9a61-0123456789ab"), decision)
    (said,) = cluster.events
    assert (said.type, said.reason) == ("Warning", "CapacityProbeFailed")
    assert said.message.endswith("the API server refused Job demo-probe: denied by policy")
    assert cluster.statuses == [decision.status]  # the next probe is due a check interval after this one


def test_the_probe_and_its_pods_are_seen_apart_from_the_gangs():
    job = elastic_job()
    gang = with_spec_hash(render_job(job.at_size(2), 0))
    probe = probe_of(job, gang, 1, created=NOW)
    for child in (gang, probe):
        child["metadata"] |= {"uid": f"uid-{child['metadata']['name']}", "namespace": "team-a"}
    probe_pod_there = probe_pod(0, scheduled=True)
    probe_pod_there["metadata"]["ownerReferences"] = [{"uid": "uid-demo-probe"}]
    probe_pod_there["metadata"]["labels"][LABEL_JOB_NAME] = "demo"
    seen = children_view("demo", job.metadata.uid, [], [gang, probe], [probe_pod_there], None)
    assert list(seen.jobs) == [0] and seen.probe is probe and seen.probe_pods == [probe_pod_there]
    assert seen.pods == []


def test_a_probe_that_made_no_pod_in_time_is_said_to_have_failed_and_the_gang_trains_on():
    """Admission refused its pods (a quota, a policy): its Job exists, but no pod of it ever does."""
    job = elastic_job(status=RUNNING | {"capacityProbedAt": rfc3339(NOW - timedelta(seconds=PROBE_TIMEOUT_S))})
    gang = gang_job(job, 0, 2, created=HOUR_AGO)
    probe = probe_of(job, gang, 1, created=NOW - timedelta(seconds=PROBE_TIMEOUT_S))
    running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    decision = decide(job, observed(job, {0: gang}, running, probe, []), NOW)
    assert decision.delete_child_jobs == ("demo-probe",) and decision.patch_child_job is None
    (failed,) = [event for event in decision.events if event.reason == "CapacityProbeFailed"]
    assert failed.type == "Warning" and "made no pod in 60 s (the Events of Job demo-probe say why" in failed.message


@pytest.mark.parametrize("reason", ["Unschedulable", "CapacityReturned"])
def test_a_save_that_fails_while_an_elastic_gang_stops_to_resize_is_judged_not_dropped(reason):
    """A shrink or a growth under way (the Job suspended with the size to go to): a pod whose checkpoint could
    not be written ends the job; the next gang would otherwise resume from an older checkpoint, silently."""
    job = elastic_job(status=RUNNING | {"phase": "Restarting"})
    planned = {RESIZE_TO_ANNOTATION: "2" if reason == "Unschedulable" else "3", RESIZE_REASON_ANNOTATION: reason}
    size = 3 if reason == "Unschedulable" else 2
    noted = planned | {"scaletrain.io/suspended-at-spec-generation": "1"}
    gang = gang_job(job, 0, size, created=HOUR_AGO, suspend=True, annotations=noted)
    message = '{"result": "WriteError", "error": "OSError: [Errno 30] Read-only file system"}'
    failed = gang_pod(1, "Failed")
    failed["status"]["containerStatuses"] = [
        {"name": "trainer", "state": {"terminated": {"exitCode": 74, "message": message}}}
    ]
    decision = decide(job, observed(job, {0: gang}, [gang_pod(0, "Failed"), failed]), NOW)
    assert decision.status["phase"] == "Failed" and decision.create == ()
    assert "Read-only file system" in decision.status["message"]


def _refused_since(moment):
    """The condition housekeeping sets from the Job controller's FailedCreate Events (a quota refused a pod)."""
    message = 'pods "demo-g0-2-x" is forbidden: exceeded quota: gpus, requested: pods=1, used: pods=2, limited: pods=2'
    return {"type": "PodCreationFailed", "status": "True", "reason": "FailedCreate", "message": message,
            "lastTransitionTime": rfc3339(moment)}  # fmt: skip


def test_pods_a_quota_refuses_to_create_count_as_unplaced_and_shrink_the_gang():
    """A ResourceQuota lets 2 of the gang's 3 pods be made: the third was never refused by the scheduler, it was
    never made. Per-namespace GPU quotas are what elastic gangs exist for."""
    made = [gang_pod(0, "Pending", scheduled=None), gang_pod(1, "Pending", scheduled=None)]  # gang placement waits
    for waited_s, resized in ((100, False), (120, True)):
        job = elastic_job(
            status=RUNNING | {"phase": "Pending", "conditions": [_refused_since(NOW - timedelta(seconds=waited_s))]}
        )
        gang = gang_job(job, 0, 3, created=HOUR_AGO)
        decision = decide(job, observed(job, {0: gang}, made), NOW)
        if not resized:
            assert decision.patch_child_job is None and decision.recheck_after == 20
            continue
        annotations = {RESIZE_TO_ANNOTATION: "2", RESIZE_REASON_ANNOTATION: "Unschedulable"}
        assert decision.patch_child_job == operator_suspends("demo-g0", **annotations)
        assert "the API server refused to create 1 pod of Job demo-g0: pods" in decision.status["message"]


def test_a_gang_a_quota_holds_below_its_smallest_size_gets_the_schedule_timeout():
    job = elastic_job(status=RUNNING | {"phase": "Pending", "conditions": [_refused_since(HOUR_AGO)]},
                      elastic={"minNodes": 3}, scheduleTimeoutSeconds=600)  # fmt: skip
    gang = gang_job(job, 0, 3, created=HOUR_AGO)
    decision = decide(job, observed(job, {0: gang}, [gang_pod(0, "Pending", scheduled=None)]), NOW)
    assert decision.status["phase"] == "Failed" and "scheduleTimeoutSeconds (600) passed" in decision.status["message"]
    assert "the API server refused to create 2 pods of Job demo-g0" in decision.status["message"]
