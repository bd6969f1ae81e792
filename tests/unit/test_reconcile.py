"""The operator's decisions, without a cluster: children, status, restarts, suspend, spec changes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.api.naming import KUEUE_QUEUE_LABEL
from scaletrain_operator.controller import peering
from scaletrain_operator.controller.decision import ChildJobPatch, Decision, Event, Observed
from scaletrain_operator.controller.finished import decide_invalid
from scaletrain_operator.controller.reconcile import decide
from scaletrain_operator.controller.settings import OperatorConfig
from scaletrain_operator.controller.ttl import decide_ttl
from scaletrain_operator.render.child_annotations import (
    RESTARTS_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    SUSPENDED_BY_OPERATOR_ANNOTATION,
    with_spec_hash,
)
from scaletrain_operator.render.children import render_job
from scaletrain_operator.validation.progress_answer import parse_progress, status_patch
from scaletrain_testing.gang_objects import gang_job, gang_pod, observed, operator_suspends, scaletrain_job
from scaletrain_testing.jobs import EXAMPLES, load_yaml, merge_patched, running_status
from scaletrain_trainer.contract.validation import Problem

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
G0 = "demo-g0, spec generation 1"  # what the Events of the first gang are about (each reason once)
NO_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."  # the scheduler's words for a pod it cannot place


def test_a_new_job_gets_its_service_and_first_gang():
    job = scaletrain_job()
    decision = decide(job, Observed(services={}, jobs={}, pods=[]), NOW)
    created = [(o["kind"], o["metadata"]["name"]) for o in decision.create]
    assert created == [("Service", "demo"), ("Service", "demo-master"), ("Job", "demo-g0")]
    assert (
        decision.create[-1]["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        == gang_job(job, 0)["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    )
    assert decision.status["phase"] == "Pending" and decision.status["currentJob"] == "demo-g0"
    assert [c["type"] for c in decision.status["conditions"]] == ["Created"]
    assert decision.events == (Event("Normal", "Created", "created Job demo-g0", "demo-g0, spec generation 1"),)


def test_with_network_policies_every_gang_start_makes_sure_of_the_jobs_policy_first():
    job = scaletrain_job()
    first = decide(
        job, Observed(services={}, jobs={}, pods=[]), NOW, settings=OperatorConfig(network_policy_from="ops")
    )
    assert [o["kind"] for o in first.create] == ["NetworkPolicy", "Service", "Service", "Job"]
    policy = first.create[0]
    own_pods = policy["spec"]["podSelector"]["matchLabels"]
    assert own_pods.items() <= render_job(job, 0)["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["ingress"][0] == {"from": [{"podSelector": {"matchLabels": own_pods}}]}
    from_operator = policy["spec"]["ingress"][1]
    assert from_operator["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ops"}
    assert from_operator["ports"] == [{"protocol": "TCP", "port": 9400}]
    running = scaletrain_job(status=running_status())
    seen = observed(
        running, {0: gang_job(scaletrain_job(), 0)}, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)]
    )
    restart = decide(running, seen, NOW, settings=OperatorConfig(network_policy_from="ops"))
    assert [o["kind"] for o in restart.create] == ["NetworkPolicy", "Job"]  # made again if it went missing
    steady = observed(running, {0: gang_job(scaletrain_job(), 0)}, [gang_pod(0, "Running"), gang_pod(1, "Running")])
    assert decide(running, steady, NOW, settings=OperatorConfig(network_policy_from="ops")).create == ()
    assert [o["kind"] for o in decide(job, Observed(services={}, jobs={}, pods=[]), NOW).create] == [
        "Service",
        "Service",
        "Job",
    ]


def test_the_restart_count_travels_with_each_gangs_job_so_a_lost_status_patch_cannot_lose_it():
    job = scaletrain_job(status=running_status(), maxRestarts=1)
    seen = observed(
        job, {0: gang_job(scaletrain_job(), 0)}, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)]
    )
    restart = decide(job, seen, NOW)
    (next_gang,) = restart.create
    assert next_gang["metadata"]["annotations"][RESTARTS_ANNOTATION] == "1" and restart.status["restarts"] == 1
    # The status patch of that restart was lost: the status still says g0 and 0 restarts, but g1 exists.
    lost = scaletrain_job(status=running_status(), maxRestarts=1)
    g1_failing = observed(
        lost, {1: next_gang}, [gang_pod(0, "Running", generation=1), gang_pod(1, "Failed", exit_code=1, generation=1)]
    )
    decision = decide(lost, g1_failing, NOW)
    assert decision.create == () and decision.status["phase"] == "Failed"  # not a third gang
    assert decision.status["restarts"] == 1 and "maxRestarts (1) reached" in decision.status["message"]


def test_a_long_problem_list_is_cut_to_the_apis_limit_so_the_job_still_gets_its_status():
    problems = [Problem(("env", i, "name"), f"VARIABLE_{i:04d} is set twice; keep one") for i in range(2000)]
    decision = decide_invalid(problems, {}, 3, NOW)
    (failed,) = decision.status["conditions"]
    assert len(decision.status["message"]) <= 32768 and failed["message"] == decision.status["message"]
    assert "characters left out" in decision.status["message"] and "VARIABLE_0000" in decision.status["message"]
    assert decision.status["message"].endswith("VARIABLE_1999 is set twice; keep one")  # the end is kept too


def test_existing_children_are_adopted_not_created_again():
    job = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0"})
    not_placed_yet = [gang_pod(0, "Pending", scheduled=None), gang_pod(1, "Pending", scheduled=None)]
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, not_placed_yet), NOW)
    assert decision.create == () and decision.delete_child_jobs == ()
    assert decision.status["phase"] == "Pending" and decision.events == ()


def test_running_pods_make_the_job_running_once():
    job = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0"})
    seen = observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), gang_pod(1, "Running")])
    decision = decide(job, seen, NOW)
    status = decision.status
    counts = {"current": 2, "active": 2, "pending": 0, "succeeded": 0, "failed": 0}
    assert status["phase"] == "Running" and status["nodes"] == counts
    assert status["startTime"] == "2026-11-30T12:00:00Z"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Running": "True"}
    assert decision.events == (Event("Normal", "Running", "2 of 2 nodes active", G0),)
    again = decide(scaletrain_job(status=status), seen, NOW)  # the same state again: nothing new, nothing to write
    assert again == Decision()


def test_a_pod_still_pending_is_not_an_active_node():
    job = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0"})
    pods = [gang_pod(0, "Running"), gang_pod(1, "Pending", scheduled=None)]  # say, unschedulable
    seen = observed(job, {0: gang_job(job, 0)}, pods)
    status = decide(job, seen, NOW).status
    assert status["nodes"] == {"current": 2, "active": 1, "pending": 1, "succeeded": 0, "failed": 0}
    # Half a gang trains nothing: it is not Running, and the job says which pod it waits for, and why.
    assert status["phase"] == "Pending"
    assert status["message"] == "1 of 2 pods running; waiting for pod demo-g0-1-abcde (not placed on a node yet)"


def test_a_pod_the_scheduler_cannot_place_is_said_once_with_its_message_until_it_is_placed():
    job = scaletrain_job(status=running_status())
    waiting = gang_pod(1, "Pending", scheduled=False, since=NOW - timedelta(seconds=10), scheduler_message=NO_GPU)
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), waiting]), NOW)
    said = "the scheduler cannot place pod demo-g0-1-abcde: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    schedulable = next(c for c in decision.status["conditions"] if c["type"] == "Schedulable")
    assert (schedulable["status"], schedulable["reason"], schedulable["message"]) == ("False", "Unschedulable", said)
    assert decision.status["phase"] == "Pending" and decision.status["message"] == (
        "1 of 2 pods running; waiting for pod demo-g0-1-abcde (the scheduler cannot place it: 0/4 nodes are "
        "available: 4 Insufficient nvidia.com/gpu.)"
    )
    assert decision.events == (Event("Warning", "Unschedulable", said, G0),)
    assert decision.recheck_after is None  # no scheduleTimeoutSeconds: it waits
    # The same again (the scheduler retried): nothing to write, no second Event.
    unchanged = scaletrain_job(status=decision.status)
    assert decide(unchanged, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), waiting]), NOW) == Decision()
    # Another message: the condition says it, with no new Event.
    no_cpu = "0/5 nodes are available: 5 Insufficient cpu."
    other = gang_pod(1, "Pending", scheduled=False, since=NOW - timedelta(seconds=10), scheduler_message=no_cpu)
    changed = decide(unchanged, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), other]), NOW)
    schedulable = next(c for c in changed.status["conditions"] if c["type"] == "Schedulable")
    assert "5 Insufficient cpu" in schedulable["message"] and changed.events == ()
    # Placed at last: True again.
    now_placed = gang_pod(1, "Pending", scheduled=True)
    placed = decide(unchanged, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), now_placed]), NOW)
    schedulable = next(c for c in placed.status["conditions"] if c["type"] == "Schedulable")
    assert (schedulable["status"], schedulable["reason"]) == ("True", "Scheduled") and placed.events == ()
    # A job whose pods were never refused a node has no such condition.
    fresh = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0"})
    never_refused = [gang_pod(0, "Pending", scheduled=True), gang_pod(1, "Pending", scheduled=None)]
    quiet = decide(fresh, observed(fresh, {0: gang_job(fresh, 0)}, never_refused), NOW)
    assert "Schedulable" not in {c["type"] for c in quiet.status["conditions"]}


def test_schedule_timeout_fails_a_gang_the_scheduler_cannot_place_and_its_job_goes_after():
    job = scaletrain_job(status=running_status(phase="Pending"), scheduleTimeoutSeconds=60)
    children = {0: gang_job(job, 0)}
    for_10s, for_60s = NOW - timedelta(seconds=10), NOW - timedelta(seconds=60)
    refused_10s = gang_pod(0, "Pending", scheduled=False, since=for_10s, scheduler_message=NO_GPU)
    refused_60s = gang_pod(0, "Pending", scheduled=False, since=for_60s, scheduler_message=NO_GPU)
    placed = gang_pod(1, "Pending", scheduled=True)
    early = decide(job, observed(job, children, [refused_10s, placed]), NOW)
    assert early.status["phase"] == "Pending" and early.recheck_after == 50  # looked at again when it passes
    waited = scaletrain_job(status=early.status, scheduleTimeoutSeconds=60)
    again = decide(waited, observed(job, children, [refused_10s, placed]), NOW)
    assert again == Decision(recheck_after=50) and again.changes_nothing
    late = decide(waited, observed(job, children, [refused_60s, placed]), NOW)
    failed = next(c for c in late.status["conditions"] if c["type"] == "Failed")
    assert late.status["phase"] == "Failed" and failed["reason"] == "Unschedulable"
    assert "cannot place pod demo-g0-0-abcde: 0/4 nodes" in failed["message"]
    assert "scheduleTimeoutSeconds (60) passed" in failed["message"]
    assert late.delete_child_jobs == () and late.recheck_after is None  # the Failed status lands first
    # Then its Job goes, with the pods that still wait for a node.
    finished = scaletrain_job(status=late.status, scheduleTimeoutSeconds=60)
    waiting = [refused_60s, placed]
    suspend = operator_suspends("demo-g0")
    assert decide(finished, observed(job, children, waiting), NOW) == Decision(patch_child_job=suspend)
    assert decide(finished, observed(job, {}), NOW) == Decision()


@pytest.mark.parametrize(
    ("phase", "reason"),
    [("Failed", "Hang"), ("Failed", "RestartLimitReached"), ("Failed", "NoProgress"), ("Failed", "InvalidSpec"),
     ("Succeeded", "Succeeded")],
)  # fmt: skip
def test_a_finished_job_stops_whatever_of_its_gang_still_runs_and_keeps_what_ended(phase, reason):
    """Finished means stopped: a gang failed as hung, or for its restart limit while its other ranks still
    ran, holds its nodes until its Job is suspended (the Job controller then ends its running pods and
    keeps the ended ones' logs), or deleted where Kueue owns the suspend flag. A Job the Job controller
    finished, or whose pods all ended, stays as it is."""
    failed = {"type": phase, "status": "True", "reason": reason, "lastTransitionTime": "2026-11-30T11:59:00Z"}
    job = scaletrain_job(status={"phase": phase, "currentJob": "demo-g0", "conditions": [failed]})
    still_running = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=1)]
    assert decide(job, observed(job, {0: gang_job(job, 0)}, still_running), NOW) == Decision(
        patch_child_job=operator_suspends("demo-g0")
    )
    assert decide(job, observed(job, {0: gang_job(job, 0, suspend=True)}, still_running), NOW) == Decision()
    queued = scaletrain_job(
        status=job.status.model_dump(mode="json", by_alias=True, exclude_none=True), queueName="team-q"
    )
    assert decide(queued, observed(queued, {0: gang_job(queued, 0)}, still_running), NOW) == Decision(
        delete_child_jobs=("demo-g0",)
    )
    all_ended = [gang_pod(0, "Succeeded", exit_code=0), gang_pod(1, "Failed", exit_code=1)]
    assert decide(job, observed(job, {0: gang_job(job, 0)}, all_ended), NOW) == Decision()
    for finished_by_its_controller in ("Complete", "Failed"):
        child = gang_job(job, 0, conditions=[finished_by_its_controller])
        assert decide(job, observed(job, {0: child}, still_running), NOW) == Decision()


def test_a_current_job_deleted_by_hand_counts_as_a_gang_restart_up_to_the_limit():
    job = scaletrain_job(status=running_status(), maxRestarts=1)
    decision = decide(job, observed(job, {}), NOW)
    (next_gang,) = decision.create
    assert (
        next_gang["metadata"]["name"] == "demo-g1" and next_gang["metadata"]["annotations"][RESTARTS_ANNOTATION] == "1"
    )
    assert decision.status["restarts"] == 1 and decision.status["currentJob"] == "demo-g1"
    assert decision.status["phase"] == "Restarting" and decision.delete_child_jobs == ()
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "JobDeleted"), ("Warning", "Restarting")]
    assert "Job demo-g0 was deleted, not by the operator" in decision.events[0].message
    assert "gang restart 1/1" in decision.events[1].message
    first_deletion = decision.events[0]
    # Deleted again: the limit is reached.
    restarted = scaletrain_job(status=running_status(currentJob="demo-g1", restarts=1), maxRestarts=1)
    decision = decide(restarted, observed(restarted, {}), NOW)
    assert decision.create == () and decision.status["phase"] == "Failed"
    assert decision.events[0].occasion != first_deletion.occasion  # another Job's deletion: posted too
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RestartLimitReached" and "maxRestarts (1) reached" in failed["message"]
    assert [e.reason for e in decision.events] == ["JobDeleted", "Failed"]


def test_the_last_pods_succeeding_go_straight_to_succeeded_with_no_pending_between():
    """All pods Succeeded means Succeeded, before the Job controller marks the Job Complete."""
    job = scaletrain_job(status=running_status())
    pods = [gang_pod(0, "Succeeded", exit_code=0), gang_pod(1, "Running")]
    one_left = decide(job, observed(job, {0: gang_job(job, 0)}, pods), NOW)
    assert one_left.status["phase"] == "Running" and one_left.status["message"] == "1 of 2 nodes active"
    pods = [gang_pod(0, "Succeeded", exit_code=0), gang_pod(1, "Succeeded", exit_code=0)]
    both = decide(job, observed(job, {0: gang_job(job, 0)}, pods), NOW)
    assert both.status["phase"] == "Succeeded"


def test_succeeded_shows_rank_zeros_final_step_and_rounded_loss_from_its_termination_message_and_no_eta():
    last_poll = {"step": 190, "maxSteps": 200, "loss": 1.5, "samplesPerSecond": 40.0, "etaSeconds": 2.5,
                 "generation": 0}  # fmt: skip
    job = scaletrain_job(status=running_status(progress=last_poll))
    summary = {"result": "Succeeded", "step": 200, "maxSteps": 200, "loss": 1.0987654321, "resumedFrom": None,
               "checkpointsSetAside": [], "seconds": 21.3}  # fmt: skip
    pods = [
        gang_pod(0, "Succeeded", exit_code=0, termination_message=json.dumps(summary)),
        gang_pod(1, "Succeeded", exit_code=0),
    ]
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, pods), NOW)
    assert decision.status["phase"] == "Succeeded"
    final = merge_patched(last_poll, decision.status["progress"])
    assert final == {"step": 200, "maxSteps": 200, "loss": 1.099, "samplesPerSecond": 40.0, "checkpointsSetAside": [],
                     "generation": 0}  # fmt: skip
    # What an earlier gang reported does not stay beside this one's final answer.
    earlier_gang = scaletrain_job(status=running_status(progress=last_poll | {"generation": 3, "evalLoss": 2.0}))
    decision = decide(earlier_gang, observed(earlier_gang, {0: gang_job(job, 0)}, pods), NOW)
    assert merge_patched(last_poll, decision.status["progress"]) == {
        "step": 200, "maxSteps": 200, "loss": 1.099, "checkpointsSetAside": [], "generation": 0
    }  # fmt: skip
    # A custom command's message holds no progress: only the ETA goes; a job never polled gets no progress.
    pods[0] = gang_pod(0, "Succeeded", exit_code=0, termination_message="done")
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, pods), NOW)
    polled_without_eta = {key: value for key, value in last_poll.items() if key != "etaSeconds"}
    assert merge_patched(last_poll, decision.status["progress"]) == polled_without_eta
    never_polled = scaletrain_job(status=running_status())
    assert "progress" not in decide(never_polled, observed(never_polled, {0: gang_job(job, 0)}, pods), NOW).status


def test_eval_loss_throughput_and_mfu_reach_the_status_rounded_for_kubectl_and_bad_values_are_dropped():
    served = {"step": 7, "evalLoss": 2.3456789, "tokensPerSecond": 123456.789, "tflopsPerDevice": 142.53125,
              "mfu": 0.3142857}  # fmt: skip
    patch = status_patch(parse_progress(json.dumps(served).encode()), 2, {}, read_at=NOW)
    assert merge_patched({"maxSteps": 2**63 - 1, "loss": 4.2}, patch) == {  # an answer replaces the one before
        "step": 7, "evalLoss": 2.346, "tokensPerSecond": 123500.0, "tflopsPerDevice": 142.5, "mfu": 0.3143,
        "generation": 2, "readAt": "2026-11-30T12:00:00Z",
    }  # fmt: skip
    # On a CPU the trainer serves no mfu, and none is made up.
    assert parse_progress(b'{"step": 7, "tflopsPerDevice": 0.0001}') == {"step": 7, "tflopsPerDevice": 0.0001}
    hostile = [
        {"tokensPerSecond": -1.0, "tflopsPerDevice": "142", "mfu": -0.1, "evalLoss": "2.3"},
        {"tokensPerSecond": True, "tflopsPerDevice": 1e999, "mfu": 1.5, "evalLoss": 1e999},  # mfu > 1: wrong
        {"tokensPerSecond": None, "tflopsPerDevice": [1.0], "mfu": {"value": 0.3}},
    ]
    for fields in hostile:
        assert parse_progress(json.dumps({"step": 7} | fields).encode()) == {"step": 7}, fields


def test_a_failed_rank_restarts_the_whole_gang():
    job = scaletrain_job(
        status=running_status(), activeDeadlineSeconds=3600
    )  # an in-place change, moot for a Job being deleted
    seen = observed(
        job, {0: gang_job(scaletrain_job(), 0)}, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)]
    )
    decision = decide(job, seen, NOW)
    assert decision.delete_child_jobs == ("demo-g0",) and decision.patch_child_job is None
    assert [o["metadata"]["name"] for o in decision.create] == ["demo-g1"]
    assert decision.status["restarts"] == 1 and decision.status["currentJob"] == "demo-g1"
    assert decision.status["phase"] == "Restarting"
    (event,) = decision.events
    assert (event.type, event.reason) == ("Warning", "Restarting")
    assert "pod demo-g0-1-abcde failed (Error, exit code 137)" in event.message and "gang restart 1/3" in event.message


def test_the_restart_limit_fails_the_job():
    job = scaletrain_job(status=running_status(restarts=3, currentJob="demo-g3"))
    decision = decide(
        job, observed(job, {3: gang_job(job, 3)}, [gang_pod(0, "Failed", exit_code=1, generation=3)]), NOW
    )
    assert decision.create == () and decision.delete_child_jobs == ()
    assert decision.status["phase"] == "Failed" and "maxRestarts (3) reached" in decision.status["message"]
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RestartLimitReached"


def test_a_config_error_fails_at_once_without_restarts():
    job = scaletrain_job(status=running_status())
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Failed", exit_code=78)]), NOW)
    assert decision.create == () and decision.delete_child_jobs == () and decision.status["restarts"] == 0
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert decision.status["phase"] == "Failed" and failed["reason"] == "ConfigError"


def test_a_complete_job_succeeds():
    pending = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0"})
    both = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    running = decide(pending, observed(pending, {0: gang_job(pending, 0)}, both), NOW).status
    job = scaletrain_job(status=running)
    complete = gang_job(job, 0, conditions=["Complete"])
    seen = observed(job, {0: complete}, [gang_pod(0, "Succeeded"), gang_pod(1, "Succeeded")])
    decision = decide(job, seen, NOW)
    assert decision.status["phase"] == "Succeeded" and decision.status["completionTime"] == "2026-11-30T12:00:00Z"
    conditions = {c["type"]: c["status"] for c in decision.status["conditions"]}
    assert conditions == {"Running": "False", "Succeeded": "True"}
    assert decision.events == (Event("Normal", "Succeeded", "all 2 nodes finished", G0),)
    finished = scaletrain_job(status=decision.status)
    assert decide(finished, seen, NOW) == Decision()  # terminal: nothing more to do


def test_suspend_and_resume():
    job = scaletrain_job(status=running_status(), suspend=True)
    unsuspended_child = gang_job(scaletrain_job(), 0)
    decision = decide(job, observed(job, {0: unsuspended_child}, [gang_pod(0, "Running")]), NOW)
    assert decision.patch_child_job == operator_suspends("demo-g0")
    assert decision.status["phase"] == "Suspended"
    assert decision.events == (Event("Normal", "Suspended", "spec.suspend is true", G0),)
    # Resumed: the next gang goes on from the checkpoint the suspension saved. The suspended Job is not
    # un-suspended: its pods ended Failed (exit 80), which its podFailurePolicy would count once it ran.
    resumed = scaletrain_job(status=decision.status)
    decision = decide(resumed, observed(resumed, {0: gang_job(resumed, 0, suspend=True)}), NOW)
    assert decision.delete_child_jobs == ("demo-g0",) and [c["metadata"]["name"] for c in decision.create] == [
        "demo-g1"
    ]
    assert decision.create[0]["spec"]["suspend"] is False and decision.patch_child_job is None
    assert decision.status["phase"] == "Restarting" and decision.status["restarts"] == 0
    assert "disruptions" not in decision.status or decision.status["disruptions"] == 0


def test_a_queued_job_waits_for_kueue_instead_of_unsuspending_itself():
    job = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0"}, queueName="team-a")
    decision = decide(job, observed(job, {0: gang_job(job, 0)}), NOW)
    assert decision.patch_child_job is None
    assert decision.status["phase"] == "Pending" and "waiting for Kueue" in decision.status["message"]


def test_pods_killed_by_a_suspension_are_not_crashes():
    """Kueue preempting (or the user suspending) a gang: the Job controller terminates its pods, which
    may show Failed with exit code 143 before they go. Not a crash: Kueue's preemption is a disruption,
    and the next generation queues again; the user's suspension waits."""
    queued = scaletrain_job(status=running_status(), queueName="team-a")
    preempted = gang_job(queued, 0, suspend=True)
    decision = decide(
        queued, observed(queued, {0: preempted}, [gang_pod(0, "Failed", exit_code=143), gang_pod(1, "Running")]), NOW
    )
    assert decision.delete_child_jobs == ("demo-g0",)
    assert [o["metadata"]["name"] for o in decision.create] == ["demo-g1"]
    assert decision.create[0]["spec"]["suspend"] is True  # queued: Kueue admits it
    assert decision.status["restarts"] == 0 and decision.status["disruptions"] == 1
    assert decision.status["phase"] == "Restarting" and "Kueue preempted the gang" in decision.status["message"]

    suspended = scaletrain_job(status=running_status(), suspend=True)  # the user's suspend, not yet applied to the Job
    decision = decide(
        suspended, observed(suspended, {0: gang_job(suspended, 0)}, [gang_pod(0, "Failed", exit_code=143)]), NOW
    )
    assert decision.delete_child_jobs == () and decision.status["phase"] == "Suspended"


def test_a_spec_change_stops_the_gang_at_a_step_boundary_before_the_next_one_starts():
    """Another size (kubectl scale) or any spec the gang cannot take: its Job is suspended, whose SIGTERM
    makes each pod save a checkpoint after its step; the next gang starts only once no pod of the old one is
    left, so that it resumes from that checkpoint and trains no step twice. Counted as no restart."""
    running = scaletrain_job(status=running_status())
    resized = scaletrain_job(status=running_status(), nodes=4, training={"globalBatchSize": 32})
    both_running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    decision = decide(resized, observed(resized, {0: gang_job(running, 0)}, both_running), NOW)
    assert decision.create == () and decision.delete_child_jobs == ()
    assert decision.patch_child_job == operator_suspends("demo-g0")
    status = decision.status
    assert status["phase"] == "Restarting" and status["nodes"]["current"] == 2
    assert status["message"].startswith("the gang resizes from 2 to 4 nodes: its pods save a checkpoint")
    # Suspended, and a pod still saving (being deleted): nothing more yet, but a look when its grace ends.
    stopping = scaletrain_job(status=status, nodes=4, training={"globalBatchSize": 32})
    saving = [gang_pod(0, "Running", deleted_at=NOW + timedelta(seconds=30)), gang_pod(1, "Failed", exit_code=80)]
    decision = decide(stopping, observed(stopping, {0: gang_job(running, 0, suspend=True)}, saving), NOW)
    assert decision.create == () and decision.delete_child_jobs == () and decision.patch_child_job is None
    assert decision.recheck_after == 30
    # The last pod ended after its checkpoint: the next gang, at the new size.
    stopped = [gang_pod(1, "Failed", exit_code=80)]
    decision = decide(stopping, observed(stopping, {0: gang_job(running, 0, suspend=True)}, stopped), NOW)
    assert decision.delete_child_jobs == ("demo-g0",)
    assert [o["metadata"]["name"] for o in decision.create] == ["demo-g1"]
    assert decision.create[0]["spec"]["completions"] == 4 and decision.create[0]["spec"]["suspend"] is False
    assert decision.status["restarts"] == 0 and decision.status["disruptions"] == 0
    assert decision.status["phase"] == "Restarting" and decision.status["nodes"]["current"] == 4
    resized_event = next(event for event in decision.events if event.reason == "Resized")
    assert resized_event.message == "the gang resizes from 2 to 4 nodes (spec.nodes is 4)"
    assert decision.status["resizes"] == [
        {"time": "2026-11-30T12:00:00Z", "fromNodes": 2, "toNodes": 4, "reason": "Scaled"}
    ]


def test_a_gang_stopping_for_a_spec_change_does_not_wait_for_a_pod_past_its_grace_period():
    """A pod still shown after its deletionTimestamp is on a node that does not answer: the kubelet would
    have killed it by then. The next gang starts."""
    running = scaletrain_job(status=running_status())
    changed = scaletrain_job(status=running_status(phase="Restarting"), env=[{"name": "EDITED", "value": "1"}])
    lingering = [gang_pod(0, "Running", deleted_at=NOW + timedelta(seconds=-1)), gang_pod(1, "Failed", exit_code=80)]
    decision = decide(changed, observed(changed, {0: gang_job(running, 0, suspend=True)}, lingering), NOW)
    assert decision.delete_child_jobs == ("demo-g0",) and [o["metadata"]["name"] for o in decision.create] == [
        "demo-g1"
    ]
    assert not any(event.reason == "Resized" for event in decision.events)


def test_a_spec_change_of_a_queued_job_restarts_at_once_since_kueue_owns_the_suspend_flag():
    running = scaletrain_job(status=running_status(), queueName="team-a")
    changed = scaletrain_job(status=running_status(), queueName="team-a", env=[{"name": "EDITED", "value": "1"}])
    both_running = [gang_pod(0, "Running"), gang_pod(1, "Running")]
    decision = decide(changed, observed(changed, {0: gang_job(running, 0)}, both_running), NOW)
    assert decision.delete_child_jobs == ("demo-g0",)
    assert [o["metadata"]["name"] for o in decision.create] == ["demo-g1"]
    assert decision.patch_child_job is None and not any(event.reason == "Resized" for event in decision.events)


def test_in_place_changes_patch_the_job():
    running = scaletrain_job(status=running_status())
    longer = scaletrain_job(status=running_status(), activeDeadlineSeconds=3600, maxRestarts=5)
    decision = decide(longer, observed(longer, {0: gang_job(running, 0)}, [gang_pod(0, "Running")]), NOW)
    assert decision.create == () and decision.delete_child_jobs == ()
    assert decision.patch_child_job == ChildJobPatch("demo-g0", {"activeDeadlineSeconds": 3600})


def test_leftover_jobs_of_older_generations_are_deleted():
    job = scaletrain_job(status=running_status(currentJob="demo-g2", restarts=2))
    seen = observed(job, {1: gang_job(job, 1), 2: gang_job(job, 2)}, [gang_pod(0, "Running", generation=2)])
    decision = decide(job, seen, NOW)
    assert decision.delete_child_jobs == ("demo-g1",) and decision.create == ()


def test_a_lost_status_patch_is_recovered_from_the_jobs_that_exist():
    """The operator created demo-g1 but died before recording it: the next reconcile continues there."""
    job = scaletrain_job(status=running_status(currentJob="demo-g0"))
    decision = decide(job, observed(job, {1: gang_job(job, 1)}, [gang_pod(0, "Running", generation=1)]), NOW)
    assert decision.create == () and decision.status["currentJob"] == "demo-g1"


def test_only_the_highest_priority_live_peer_is_the_active_replica():
    def record(priority, seconds_ago=0, lifetime=60):
        return {
            "priority": priority,
            "lifetime": lifetime,
            "lastseen": (NOW - timedelta(seconds=seconds_ago)).isoformat(),
        }

    me = {"me": record(5)}
    assert peering.is_active(me, "me", 5, NOW)
    assert not peering.is_active(me | {"other": record(7)}, "me", 5, NOW)
    assert not peering.is_active(me | {"other": record(5)}, "me", 5, NOW)  # kopf pauses both on a tie
    assert peering.is_active(me | {"other": record(3)}, "me", 5, NOW)
    assert peering.is_active(me | {"other": record(7, seconds_ago=61)}, "me", 5, NOW)  # its record expired


def test_the_restart_names_the_pod_that_failed_first_and_ignores_pods_being_deleted():
    job = scaletrain_job(status=running_status())
    # Node 1 was killed; node 0's collective broke a second later: the root cause is node 1.
    pods = [
        gang_pod(0, "Failed", exit_code=1, finished_at=NOW + timedelta(seconds=5)),
        gang_pod(1, "Failed", exit_code=137, finished_at=NOW + timedelta(seconds=4)),
    ]
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, pods), NOW)
    assert "pod demo-g0-1-abcde failed (Error, exit code 137)" in decision.status["message"]

    terminating = gang_pod(  # stopped, not crashed
        0, "Failed", exit_code=143, finished_at=NOW + timedelta(seconds=4), deleted_at=NOW + timedelta(seconds=3)
    )
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, [terminating, gang_pod(1, "Running")]), NOW)
    assert decision.delete_child_jobs == () and decision.status["phase"] == "Pending"  # no restart: it waits
    assert decision.status["message"] == "1 of 2 pods running; waiting for pod demo-g0-0-abcde (being deleted)"


def test_the_spec_hash_is_the_same_for_every_generation_and_changes_with_the_pods():
    for path in EXAMPLES:
        job = parse_job(load_yaml(path))
        hashes = {with_spec_hash(render_job(job, g))["metadata"]["annotations"][SPEC_HASH_ANNOTATION] for g in range(4)}
        assert len(hashes) == 1, path.name
    job, wider = scaletrain_job(), scaletrain_job(nodes=4, training={"globalBatchSize": 32})
    assert gang_job(job, 0)["metadata"]["annotations"] != gang_job(wider, 0)["metadata"]["annotations"]


def test_the_ttl_deletes_a_finished_job_once_it_has_passed():
    finished = NOW - timedelta(seconds=30)
    assert decide_ttl("Succeeded", finished, 30, NOW) == Decision(delete_stj=True)
    assert decide_ttl("Failed", finished, 0, NOW) == Decision(delete_stj=True)
    assert decide_ttl("Succeeded", finished, 31, NOW) == Decision()  # not yet
    assert decide_ttl("Succeeded", finished, None, NOW) == Decision()  # no TTL
    assert decide_ttl("Running", finished, 0, NOW) == Decision()  # not finished


def test_an_invalid_spec_is_failed_once_with_every_problem():
    problems = [Problem(("spec", "env", 0, "name"), "WORLD_SIZE is set by ScaleTrain"), Problem(("spec",), "two")]
    decision = decide_invalid(problems, {}, 3, NOW)
    message = "invalid spec: spec.env[0].name: WORLD_SIZE is set by ScaleTrain; spec: two"
    assert decision.status["phase"] == "Failed" and decision.status["message"] == message
    assert decision.status["observedGeneration"] == 3
    assert [(c["type"], c["reason"]) for c in decision.status["conditions"]] == [("Failed", "InvalidSpec")]
    assert decision.events == (Event("Warning", "InvalidSpec", message, "None, spec generation 3"),)
    assert decide_invalid(problems, decision.status, 3, NOW) == Decision()  # already said: no retry loop


def _reported(at_seconds, promised_seconds, read_at_seconds=0, generation=0, running_since_seconds=-60):
    """A Running job whose rank 0 last reported `at_seconds` from NOW, promising the next within
    `promised_seconds` (progress.staleAfter), as the operator read it from gang `generation`
    `read_at_seconds` from NOW; its gang turned Running `running_since_seconds` from NOW."""

    def moment(seconds):
        return (NOW + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    running = {
        "type": "Running",
        "status": "True",
        "reason": "Running",
        "lastTransitionTime": moment(running_since_seconds),
    }
    progress = {"step": 7, "updatedAt": moment(at_seconds), "staleAfter": moment(at_seconds + promised_seconds),
                "readAt": moment(read_at_seconds), "generation": generation}  # fmt: skip
    return running_status(progress=progress, conditions=[running])


def test_a_gang_whose_rank_0_answers_a_broken_promise_is_restarted_as_hung():
    read_allowance = OperatorConfig().progress_timeout_seconds  # the answer may be from any moment of the read
    pods = [gang_pod(0, "Running"), gang_pod(1, "Running")]

    def decide_for(status):
        job = scaletrain_job(status=status, maxRestarts=2)
        return decide(job, observed(job, {0: gang_job(job, 0)}, pods), NOW)

    # Read just after the promise ran out: within the read's own time, the answer may predate it.
    within_read = decide_for(_reported(at_seconds=-40, promised_seconds=40 - read_allowance / 2))
    assert within_read.delete_child_jobs == () and within_read.recheck_after is None
    # Read a read's time after the promise ran out, and it still holds it: hung. Restarted, counted.
    hung = decide_for(_reported(at_seconds=-40, promised_seconds=40 - read_allowance))
    assert hung.delete_child_jobs == ("demo-g0",) and hung.status["restarts"] == 1
    assert [(e.type, e.reason) for e in hung.events] == [("Warning", "Hang"), ("Warning", "Restarting")]
    assert "rank 0 reported no progress since step 7" in hung.events[0].message
    assert "gang restart 1/2" in hung.events[1].message
    # Reported before the operator marked the job Running (a busy operator may be seconds late): it counts.
    early = decide_for(_reported(at_seconds=-40, promised_seconds=30, running_since_seconds=-5))
    assert early.delete_child_jobs == ("demo-g0",)


def test_time_alone_never_makes_a_hang_only_a_read_after_the_promise_does():
    """The promise ran out long ago, but the last read came before that: the operator was down, could not
    reach rank 0, or could not write the status since. Nothing is known of the gang: no hang."""
    job = scaletrain_job(status=_reported(at_seconds=-600, promised_seconds=30, read_at_seconds=-590), maxRestarts=2)
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), gang_pod(1, "Running")]), NOW)
    assert decision.delete_child_jobs == () and decision.status["phase"] == "Running"


def test_a_promise_of_an_earlier_gang_never_makes_the_new_one_hung():
    """The status write of a restart was lost (or the operator died before it): the status still says
    Running, with the old gang's broken promise, while the new gang's Job runs. The promise was g0's."""
    job = scaletrain_job(status=_reported(at_seconds=-600, promised_seconds=30, generation=0), maxRestarts=2)
    pods = [gang_pod(0, "Running", generation=1), gang_pod(1, "Running", generation=1)]
    decision = decide(job, observed(job, {1: gang_job(job, 1)}, pods), NOW)
    assert decision.delete_child_jobs == () and decision.create == ()
    assert decision.status["phase"] == "Running" and decision.status["currentJob"] == "demo-g1"
    assert decision.status["restarts"] == 0


def test_a_gang_that_stops_running_leaves_no_promise_for_the_next_one():
    """Suspended, restarting or finished: the promise in progress.staleAfter was that gang's. Kept, it would
    have the next gang (or the same Job resumed) taken for hung at once."""
    promised = _reported(at_seconds=-10, promised_seconds=30)
    job = scaletrain_job(status=promised, suspend=True)
    suspended = decide(job, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), gang_pod(1, "Running")]), NOW)
    assert suspended.status["phase"] == "Suspended"
    assert suspended.status["progress"] == {"staleAfter": None}  # a merge patch: removes only the promise
    job = scaletrain_job(status=promised)
    restarting = decide(
        job, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=1)]), NOW
    )
    assert restarting.status["phase"] == "Restarting" and restarting.status["progress"] == {"staleAfter": None}
    running = decide(job, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), gang_pod(1, "Running")]), NOW)
    assert "progress" not in (running.status or {})


def test_a_job_that_an_admission_controller_suspended_at_creation_waits_and_counts_nothing():
    """Kueue with manageJobsWithoutQueueName creates every Job suspended: that is not the user resuming."""
    job = scaletrain_job(status={"phase": "Pending", "currentJob": "demo-g0"})
    for queue, said in ((None, "waiting for admission: Job demo-g0 was suspended by another controller"),
                        ("default", "waiting for Kueue to admit it from queue default")):  # fmt: skip
        # Kueue's webhook suspended the Job at creation (no note of the operator's on it), and gave it the
        # namespace's default LocalQueue where there is one.
        suspended = gang_job(job, suspend=True, labels={KUEUE_QUEUE_LABEL: queue} if queue else None)
        decision = decide(job, observed(job, {0: suspended}), NOW)
        assert decision.create == () and decision.delete_child_jobs == () and decision.patch_child_job is None
        assert decision.status["phase"] == "Pending" and decision.status["message"].startswith(said)
        assert decision.status["restarts"] == 0 and decision.events == ()


def test_a_running_gang_whose_job_an_admission_controller_suspends_is_preempted_without_a_queue_too():
    job = scaletrain_job(status=running_status())
    by_kueue = gang_job(job, suspend=True, labels={KUEUE_QUEUE_LABEL: "default"})  # as in the test above
    taken = observed(job, {0: by_kueue}, [gang_pod(0, "Failed", exit_code=143), gang_pod(1, "Running")])
    decision = decide(job, taken, NOW)
    assert decision.delete_child_jobs == ("demo-g0",) and [o["metadata"]["name"] for o in decision.create] == [
        "demo-g1"
    ]
    assert decision.status["restarts"] == 0 and decision.status["disruptions"] == 1


def test_suspending_a_queued_job_deletes_its_job_so_kueue_releases_the_quota_and_resuming_starts_the_next():
    """Kueue owns a queued Job's suspend flag: suspending it by a patch would start a tug-of-war with Kueue."""
    running = scaletrain_job(status=running_status(), queueName="team-a")
    admitted = gang_job(running, 0, suspend=False)
    suspended = scaletrain_job(status=running_status(), queueName="team-a", suspend=True)
    decision = decide(
        suspended, observed(suspended, {0: admitted}, [gang_pod(0, "Running"), gang_pod(1, "Running")]), NOW
    )
    assert decision.delete_child_jobs == ("demo-g0",) and decision.create == () and decision.patch_child_job is None
    assert decision.status["phase"] == "Suspended" and decision.status["restarts"] == 0
    assert [gang["ended"] for gang in decision.status["gangs"]] == ["SpecChanged"]
    # The Job gone (its pods saving on their SIGTERM): still Suspended, nothing made, nothing counted.
    gone = scaletrain_job(status=decision.status, queueName="team-a", suspend=True)
    saving = [gang_pod(0, "Running", deleted_at=NOW + timedelta(seconds=20))]
    decision = decide(gone, observed(gone, {}, saving), NOW)
    assert decision.create == () and decision.delete_child_jobs == ()
    assert (decision.status or {}).get("phase", "Suspended") == "Suspended"  # a patch of what changed
    # Resumed: the next gang waits for the last pod to save, then starts (and queues), counted as nothing.
    suspended_gang = {"generation": 0, "ended": "SpecChanged"}
    resumed = scaletrain_job(status=running_status(phase="Suspended", gangs=[suspended_gang]), queueName="team-a")
    waiting = decide(resumed, observed(resumed, {}, saving), NOW)
    assert waiting.create == () and waiting.recheck_after == 20 and waiting.status["phase"] == "Restarting"
    decision = decide(resumed, observed(resumed, {}), NOW)
    assert [o["metadata"]["name"] for o in decision.create] == ["demo-g1"] and decision.delete_child_jobs == ()
    assert decision.create[0]["spec"]["suspend"] is True  # for Kueue to admit
    assert decision.status["restarts"] == 0 and decision.status.get("disruptions", 0) == 0


def test_a_queued_job_suspended_before_its_first_gang_makes_no_job_for_kueue_to_admit():
    job = scaletrain_job(queueName="team-a", suspend=True)
    decision = decide(job, Observed(services={}, jobs={}, pods=[]), NOW)
    assert [o["kind"] for o in decision.create] == ["Service", "Service"]
    assert decision.status["phase"] == "Suspended"


def test_a_job_whose_suspension_someone_else_undid_is_stopped_by_deleting_its_job():
    """The operator suspended the Job, and another controller (an admission controller that owns the flag)
    un-suspended it: patching it again would fight that controller for ever."""
    job = scaletrain_job(status=running_status(phase="Suspended"), suspend=True)
    undone = gang_job(job, 0, suspend=False, annotations={SUSPENDED_BY_OPERATOR_ANNOTATION: "1"})
    decision = decide(job, observed(job, {0: undone}, [gang_pod(0, "Running")]), NOW)
    assert decision.delete_child_jobs == ("demo-g0",) and decision.patch_child_job is None
    assert decision.status["phase"] == "Suspended"


WRITE_ERROR = '{"result": "WriteError", "error": "OSError: [Errno 28] No space left on device"}'


@pytest.mark.parametrize(
    "change",
    [{"nodes": 3, "training": {"globalBatchSize": 24}}, {"env": [{"name": "EDITED", "value": "1"}]}],
    ids=["a scale", "an edit"],
)
def test_a_failure_seen_with_a_spec_change_is_judged_first_and_a_final_one_stays_final(change):
    """A pod exits 74 (a write error, final) and a scale or an edit follows within the same pass: the job
    fails, as it would have without the change, and its record names the failure."""
    running = scaletrain_job(status=running_status(), maxRestarts=0)
    changed = scaletrain_job(status=running_status(), maxRestarts=0, **change)
    pods = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=74, termination_message=WRITE_ERROR)]
    decision = decide(changed, observed(changed, {0: gang_job(running, 0)}, pods), NOW)
    assert decision.status["phase"] == "Failed" and decision.create == () and decision.patch_child_job is None
    assert "demo-g0-1-abcde" in decision.status["message"] and "No space left" in decision.status["message"]
    assert [(gang["generation"], gang["ended"]) for gang in decision.status["gangs"]] == [(0, "Failed")]
    # One that a restart may fix is a restart, counted, that takes the new spec too.
    restartable = scaletrain_job(status=running_status(), maxRestarts=3, **change)
    crashed = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=1)]
    decision = decide(restartable, observed(restartable, {0: gang_job(running, 0)}, crashed), NOW)
    assert decision.status["restarts"] == 1 and decision.delete_child_jobs == ("demo-g0",)
    assert [o["metadata"]["name"] for o in decision.create] == ["demo-g1"]
    assert [gang["ended"] for gang in decision.status["gangs"]] == ["Failed"]


def test_a_checkpoint_that_fails_to_save_while_the_gang_stops_for_a_spec_change_fails_the_job():
    """The Job is suspended (the handover): exits 80 and 143 are the suspension's doing, a write error is not."""
    running = scaletrain_job(status=running_status())
    resized = scaletrain_job(status=running_status(phase="Restarting"), nodes=4, training={"globalBatchSize": 32})
    stopping = gang_job(running, 0, suspend=True, annotations={SUSPENDED_BY_OPERATOR_ANNOTATION: "1"})
    saved = [gang_pod(0, "Failed", exit_code=80), gang_pod(1, "Failed", exit_code=143)]
    decision = decide(resized, observed(resized, {0: stopping}, saved), NOW)
    assert decision.status["phase"] == "Restarting" and [o["metadata"]["name"] for o in decision.create] == ["demo-g1"]
    unsaved = [
        gang_pod(0, "Failed", exit_code=80),
        gang_pod(1, "Failed", exit_code=74, termination_message=WRITE_ERROR),
    ]
    decision = decide(resized, observed(resized, {0: stopping}, unsaved), NOW)
    assert decision.status["phase"] == "Failed" and decision.create == ()
    assert "cannot write its checkpoints" in decision.status["message"]
    assert not any(event.reason == "Resized" for event in decision.events)


def _crashed_gang(job, ran_s):
    """Gang g0 of `job`, made `ran_s` before NOW, whose rank 1 crashed (exit 1)."""
    child = gang_job(job, 0, created=NOW - timedelta(seconds=ran_s))
    return observed(job, {0: child}, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=1)])


def test_quick_restarts_in_a_row_wait_doubling_and_the_next_gangs_job_holds_the_wait():
    """411 gang restarts in 300 s, each a Job created and deleted, is what no back-off gives."""
    first = decide(scaletrain_job(status=running_status()), _crashed_gang(scaletrain_job(), ran_s=5), NOW)
    assert first.create[0]["spec"]["suspend"] is False and first.status["quickRestarts"] == 1  # at once
    job = scaletrain_job(status=running_status(quickRestarts=1))
    decision = decide(job, _crashed_gang(job, ran_s=5), NOW)
    held = decision.create[0]
    assert held["spec"]["suspend"] is True and held["metadata"]["annotations"]["scaletrain.io/start-after"] == (
        "2026-11-30T12:00:10Z"
    )
    assert decision.status["nextGangAt"] == "2026-11-30T12:00:10Z" and decision.status["quickRestarts"] == 2
    assert decision.recheck_after == 10 and decision.status["restarts"] == 1
    assert "the next gang starts in 10 s (spec.restartBackoff: 2 quick restarts in a row)" in decision.status["message"]
    assert any(
        "the next gang starts in 10 s" in event.message for event in decision.events if event.reason == "Restarting"
    )
    # It waits (the hold is on the Job: a lost status write cannot lose it), then its Job is un-suspended.
    restarting = scaletrain_job(status=decision.status | {"phase": "Restarting", "currentJob": "demo-g1"})
    held["status"] = {}
    waiting = decide(restarting, observed(restarting, {1: held}), NOW + timedelta(seconds=4))
    assert waiting.patch_child_job is None and waiting.create == () and waiting.recheck_after == 6
    assert waiting.status is None or waiting.status.get("phase", "Restarting") == "Restarting"
    started = decide(restarting, observed(restarting, {1: held}), NOW + timedelta(seconds=10))
    notes = {"scaletrain.io/suspended-at-spec-generation": None, "scaletrain.io/start-after": None}
    assert started.patch_child_job == ChildJobPatch("demo-g1", {"suspend": False}, notes)
    assert started.status["nextGangAt"] is None and started.create == ()
    # The third quick one waits twice as long; a gang that ran resetAfterSeconds restarts at once, and resets.
    third = scaletrain_job(status=running_status(quickRestarts=2))
    assert decide(third, _crashed_gang(third, ran_s=5), NOW).status["nextGangAt"] == "2026-11-30T12:00:20Z"
    long_run = decide(third, _crashed_gang(third, ran_s=600), NOW)
    assert long_run.create[0]["spec"]["suspend"] is False and long_run.status["quickRestarts"] == 0
    # With a queue, Kueue decides when the next gang starts.
    queued = scaletrain_job(status=running_status(quickRestarts=2), queueName="team-a")
    assert "nextGangAt" not in decide(queued, _crashed_gang(queued, ran_s=5), NOW).status


def test_disruptions_have_a_finite_limit_by_default():
    job = scaletrain_job(status=running_status(disruptions=30))
    evicted = gang_pod(1, "Failed", exit_code=80)
    decision = decide(job, observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), evicted]), NOW)
    assert decision.status["phase"] == "Failed" and "maxDisruptions (30) reached" in decision.status["message"]


def test_a_lost_status_write_of_a_restart_loses_neither_the_failed_gangs_record_nor_its_event():
    """The restart's status patch failed (a burst of 500s), or the operator was killed before it: the next pass
    finds g1 but a status that knows nothing of how g0 ended. The Job the restart made carries it."""
    job = scaletrain_job(status=running_status())
    crashed = observed(job, {0: gang_job(job, 0)}, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=1)])
    restart = decide(job, crashed, NOW)
    (said,) = [event for event in restart.events if event.reason == "Restarting"]
    (next_gang,) = restart.create
    next_gang["status"] = {}
    decision = decide(job, observed(job, {1: next_gang}), NOW)  # the status as before the restart
    assert decision.status["gangs"] == restart.status["gangs"] == [{"generation": 0, "ended": "Failed"}]
    assert decision.status["phase"] == "Restarting" and "demo-g0-1-abcde failed (Error, exit code 1)" in said.message
    assert decision.status["message"] == restart.status["message"] and decision.status["restarts"] == 1
    assert [event for event in decision.events if event.reason == "Restarting"] == [said]  # the same Event: once
    recorded = scaletrain_job(status=decision.status)
    assert "gangs" not in (decide(recorded, observed(recorded, {1: next_gang}), NOW).status or {})
