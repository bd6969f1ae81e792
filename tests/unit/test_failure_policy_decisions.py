"""The failure policy in the operator's decisions: disruptions apart from restarts, failurePolicy
rules in the condition and the Event, nodes kept off by the next gangs, the grace period rendered."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client import REGISTRY

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.api.spec import ExcludeNodes
from scaletrain_operator.controller import metrics
from scaletrain_operator.controller.cluster import EVENT_MESSAGE_LIMIT
from scaletrain_operator.controller.reconcile import decide
from scaletrain_operator.controller.status import StatusBuilder, bounded
from scaletrain_operator.policy.node_exclusion import avoid_nodes, with_node_excluded
from scaletrain_operator.render.child_annotations import (
    DISRUPTIONS_ANNOTATION,
    EXCLUDED_NODES_ANNOTATION,
    RESTARTS_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    with_spec_hash,
)
from scaletrain_operator.render.children import render_job
from scaletrain_testing.gang_objects import gang_job, gang_pod, observed, scaletrain_job
from scaletrain_testing.jobs import base_job, running_status
from scaletrain_trainer.contract.exit_codes import EXIT_HANG, EXIT_NON_FINITE, EXIT_PREEMPTED
from scaletrain_trainer.contract.validation import ProblemsError

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
EXCLUDE = {"excludeNodes": {"mode": "Required", "max": 2}}
WAITED = '{"result": "Hang", "step": 7, "doing": "in step 8", "waitingOnPeers": true}'
RUNNING = running_status()
EVICTED = {"deleted_at": NOW - timedelta(minutes=1), "disruption": "TerminationByKubelet"}  # by the kubelet


def _decide(job, pods, child=None, generation=0):
    """The operator's decision on `job` whose gang `generation` has the Job `child` (else as rendered) and `pods`."""
    return decide(job, observed(job, {generation: child or gang_job(job, generation)}, pods), NOW)


def _restarting(decision):
    return next(c for c in decision.status["conditions"] if c["type"] == "Restarting")


def test_a_disruption_restarts_the_gang_without_using_max_restarts():
    job = scaletrain_job(RUNNING, maxRestarts=0)
    decision = _decide(job, [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=143, node="n1", **EVICTED)])
    (next_gang,) = decision.create
    assert (decision.status["restarts"], decision.status["disruptions"]) == (0, 1)
    annotations = next_gang["metadata"]["annotations"]
    assert (annotations[RESTARTS_ANNOTATION], annotations[DISRUPTIONS_ANNOTATION]) == ("0", "1")
    assert _restarting(decision)["reason"] == "Disruption"
    assert "a disruption, not counted against maxRestarts" in decision.status["message"]


def test_the_trainers_preempted_exit_is_a_disruption_and_max_disruptions_caps_them():
    preempted = [
        gang_pod(0, "Failed", exit_code=EXIT_PREEMPTED, termination_message='{"result": "Preempted", "step": 20}'),
        gang_pod(1, "Running"),
    ]
    assert _decide(scaletrain_job(RUNNING, maxRestarts=0), preempted).status["disruptions"] == 1
    capped = _decide(scaletrain_job(running_status(disruptions=2), maxDisruptions=2), preempted)
    assert capped.status["phase"] == "Failed" and capped.create == ()
    assert next(c for c in capped.status["conditions"] if c["type"] == "Failed")["reason"] == "DisruptionLimitReached"


def test_a_lost_status_patch_cannot_lose_a_disruption_or_an_excluded_node():
    job = scaletrain_job(RUNNING, failurePolicy=EXCLUDE)
    child = gang_job(job, annotations={DISRUPTIONS_ANNOTATION: "2", EXCLUDED_NODES_ANNOTATION: '["n0"]'})
    decision = _decide(job, [gang_pod(0, "Running"), gang_pod(1, "Running")], child)
    assert decision.status["disruptions"] == 2 and decision.status["excludedNodes"] == ["n0"]


def test_a_rule_names_the_condition_reason_and_the_event():
    spot = {
        "name": "SpotReclaim",
        "action": "RestartGangIgnoreLimit",
        "onExitCodes": {"operator": "In", "values": [143]},
    }
    job = scaletrain_job(RUNNING, failurePolicy={"rules": [spot]}, maxRestarts=0)
    decision = _decide(job, [gang_pod(0, "Failed", exit_code=143), gang_pod(1, "Running")])
    assert _restarting(decision)["reason"] == "SpotReclaim"
    restarting = [e.message for e in decision.events if e.reason == "Restarting"]
    assert "(failurePolicy rule SpotReclaim)" in restarting[0]
    bad_input = {"name": "BadInput", "action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
    failing = scaletrain_job(RUNNING, failurePolicy={"rules": [bad_input]})
    failed = _decide(failing, [gang_pod(0, "Failed", exit_code=3), gang_pod(1, "Running")])
    assert next(c for c in failed.status["conditions"] if c["type"] == "Failed")["reason"] == "BadInput"
    assert any(e.reason == "Failed" and "rule BadInput" in e.message for e in failed.events)


def test_after_a_hang_on_a_node_the_next_gang_is_kept_off_it_and_the_spec_hash_stays():
    job = scaletrain_job(RUNNING, failurePolicy=EXCLUDE)
    hung = [
        gang_pod(0, "Failed", exit_code=EXIT_HANG, node="n2", termination_message=WAITED),
        gang_pod(1, "Running", node="n1"),
    ]
    decision = _decide(job, hung)
    (next_gang,) = decision.create
    assert decision.status["excludedNodes"] == ["n1"]
    terms = next_gang["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]
    unexcluded = with_spec_hash(render_job(job, 1))
    assert next_gang["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == unexcluded["metadata"]["annotations"][
        SPEC_HASH_ANNOTATION]  # fmt: skip
    assert "the next gangs avoid node n1" in decision.status["message"]


def test_without_exclude_nodes_no_node_is_avoided_and_an_application_crash_blames_none():
    hung = [
        gang_pod(0, "Failed", exit_code=EXIT_HANG, node="n2", termination_message=WAITED),
        gang_pod(1, "Running", node="n1"),
    ]
    assert _decide(scaletrain_job(RUNNING), hung).status["excludedNodes"] == []
    crashed = [gang_pod(0, "Failed", exit_code=1, node="n2"), gang_pod(1, "Running", node="n1")]
    assert _decide(scaletrain_job(RUNNING, failurePolicy=EXCLUDE), crashed).status["excludedNodes"] == []


def test_the_exclusion_keeps_the_users_terms_and_drops_the_oldest_nodes():
    pools = [{"matchExpressions": [{"key": "pool", "operator": "In", "values": [pool]}]} for pool in "ab"]
    users = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": pools}}}
    job = render_job(parse_job(base_job(affinity=users)), 0)
    required = avoid_nodes(job, ["n1"], ExcludeNodes(mode="Required"))
    terms = required["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]
    assert all(t["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}] for t in terms)
    preferred = avoid_nodes(job, ["n1"], ExcludeNodes(mode="Preferred"))["spec"]["template"]["spec"]["affinity"][
        "nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]  # fmt: skip
    assert preferred == [{"weight": 100, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}}]  # fmt: skip
    assert with_node_excluded(("n1", "n2"), "n3", ExcludeNodes(max=2)) == ("n2", "n3")
    assert with_node_excluded(("n1", "n2"), "n1", ExcludeNodes(max=2)) == ("n2", "n1")  # newest again
    assert with_node_excluded(("n1",), "n3", None) == ("n1",)


def test_the_grace_period_is_rendered_from_the_spec_or_the_pod_template():
    def grace(**spec):
        return render_job(parse_job(base_job(**spec)), 0)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]

    template = {"spec": {"terminationGracePeriodSeconds": 30}}
    assert (grace(), grace(terminationGracePeriodSeconds=600), grace(podTemplate=template)) == (120, 600, 30)
    with pytest.raises(ProblemsError) as refused:
        parse_job(base_job(terminationGracePeriodSeconds=600, podTemplate=template))
    assert str(refused.value) == (
        "spec.podTemplate.spec.terminationGracePeriodSeconds: terminationGracePeriodSeconds is 600 in spec; set it "
        "in one place"
    )


def test_goodput_sums_the_time_running_and_waiting_at_each_phase_change():
    def enter(job, phase, seconds):
        return StatusBuilder(job, NOW + timedelta(seconds=seconds)).phase(phase)["goodput"]

    created = parse_job(base_job())
    pending = enter(created, "Pending", 0)
    nothing_yet = {"runningSeconds": 0, "waitingSeconds": 0, "runningSecondsAtSize": [], "recomputedSteps": 0}
    assert pending == nothing_yet | {"since": "2026-11-30T12:00:00Z"}
    running = enter(scaletrain_job(running_status(phase="Pending", goodput=pending)), "Running", 10)
    restarting = enter(scaletrain_job(running_status(phase="Running", goodput=running)), "Restarting", 70)
    suspended = enter(scaletrain_job(running_status(phase="Restarting", goodput=restarting)), "Suspended", 75)
    resumed = enter(scaletrain_job(running_status(phase="Suspended", goodput=suspended)), "Pending", 1000)
    assert (running["waitingSeconds"], restarting["runningSeconds"], suspended["waitingSeconds"]) == (10, 60, 15)
    assert (resumed["runningSeconds"], resumed["waitingSeconds"]) == (60, 15)  # time suspended is in neither
    still_running = scaletrain_job(running_status(phase="Running", goodput=running))
    assert "goodput" not in StatusBuilder(still_running, NOW).phase("Running")


def test_goodput_sums_the_time_running_at_each_size_of_the_gang():
    """A 3-node gang runs 60 s, is scaled to 2 nodes (Restarting 5 s), runs 30 s at 2 and 10 s at 3 again."""

    def enter(status, phase, seconds):
        job = scaletrain_job(running_status(**status))
        return StatusBuilder(job, NOW + timedelta(seconds=seconds)).phase(phase)["goodput"]

    def at(size):
        return {"current": size}

    running = enter({"phase": "Pending", "nodes": at(3)}, "Running", 0)
    restarting = enter({"phase": "Running", "nodes": at(3), "goodput": running}, "Restarting", 60)
    at_2 = enter({"phase": "Restarting", "nodes": at(2), "goodput": restarting}, "Running", 65)
    again = enter({"phase": "Running", "nodes": at(2), "goodput": at_2}, "Restarting", 95)
    at_3 = enter({"phase": "Restarting", "nodes": at(3), "goodput": again}, "Running", 96)
    done = enter({"phase": "Running", "nodes": at(3), "goodput": at_3}, "Succeeded", 106)
    assert done["runningSecondsAtSize"] == [{"nodes": 3, "runningSeconds": 70}, {"nodes": 2, "runningSeconds": 30}]
    assert (done["runningSeconds"], done["waitingSeconds"]) == (100, 6)


def test_the_operator_exports_each_jobs_goodput_and_restart_causes_until_it_is_gone():
    status = {"restarts": 2, "disruptions": 3, "goodput": {"runningSeconds": 60.5, "waitingSeconds": 15}}
    job = {"metadata": {"namespace": "team", "name": "demo"}, "status": status}

    def sample(name, **labels):
        return REGISTRY.get_sample_value(name, {"namespace": "team", "name": "demo"} | labels)

    metrics.report_jobs([job])
    assert sample("scaletrain_job_seconds", spent="running") == 60.5
    assert sample("scaletrain_job_seconds", spent="waiting") == 15
    assert sample("scaletrain_job_gang_restarts", cause="disruption") == 3
    metrics.report_jobs([])
    assert sample("scaletrain_job_seconds", spent="running") is None


def test_the_operator_exports_each_jobs_phase_progress_and_alerted_events_and_skips_what_is_not_a_number():
    """The series the chart's dashboard and alerts read (charts/scaletrain/files/, prometheusrule.yaml)."""
    progress = {"step": 40, "checkpointStep": 20, "tokensPerSecond": "fast", "lossFinite": False,
                "updatedAt": "2026-12-04T12:00:00Z"}  # fmt: skip
    training = {"checkpoint": {"dir": "/checkpoints"}}
    job = {"metadata": {"namespace": "team", "name": "demo"}, "spec": {"training": training},
           "status": {"phase": "Running", "progress": progress}}  # fmt: skip

    def sample(name, **labels):
        return REGISTRY.get_sample_value(name, {"namespace": "team", "name": "demo"} | labels)

    metrics.report_jobs([job])
    assert (sample("scaletrain_job_phase", phase="Running"), sample("scaletrain_job_phase", phase="Pending")) == (1, 0)
    assert (sample("scaletrain_job_step"), sample("scaletrain_job_checkpoint_step")) == (40, 20)
    assert sample("scaletrain_job_tokens_per_second") is None  # anyone may write the status: not a number, left out
    assert sample("scaletrain_job_loss_finite") == 0
    assert sample("scaletrain_job_progress_updated_timestamp_seconds") == 1796385600
    assert sample("scaletrain_job_checkpoint_every_steps") == 100  # the default
    # The Events the alerts count with increase() exist at 0, so that a job's first one is seen.
    assert sample("scaletrain_events_total", type="Warning", reason="Hang") == 0
    metrics.count_event("team", "demo", "Warning", "Hang")
    assert sample("scaletrain_events_total", type="Warning", reason="Hang") == 1
    metrics.report_jobs([])
    assert sample("scaletrain_events_total", type="Warning", reason="Hang") is None
    assert sample("scaletrain_job_phase", phase="Running") is None


def _reported(generation, started, saved, step):
    """status.progress as the operator copied it from rank 0 of `generation`."""
    return {"step": step, "resumedFromStep": started, "checkpointStep": saved, "generation": generation}


def _gang(generation, started, saved, ended="Failed"):
    return {"generation": generation, "startedFromStep": started, "reachedStep": started + 3,
            "checkpointStep": saved, "ended": ended}  # fmt: skip


TWO_STUCK_GANGS = (_gang(0, 0, 0), _gang(1, 0, 0))


def _third_gang(progress, gangs=TWO_STUCK_GANGS):
    """A job in its third gang (g2), the two before it as `gangs`, rank 0's last report `progress`."""
    status = running_status(currentJob="demo-g2", restarts=2, gangs=list(gangs), progress=progress)
    return scaletrain_job(status, maxRestarts=10)


CRASHED = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=1)]


def test_gangs_that_fail_in_a_row_without_a_newer_checkpoint_fail_the_job_with_no_progress():
    failed = _decide(_third_gang(_reported(2, 0, 0, 3)), CRASHED, generation=2)
    reason = next(c for c in failed.status["conditions"] if c["type"] == "Failed")["reason"]
    assert (failed.status["phase"], reason) == ("Failed", "NoProgress")
    assert (
        "3 gangs in a row failed without a checkpoint newer than the one they started from"
        in (failed.status["message"])
    )
    assert [gang["generation"] for gang in failed.status["gangs"]] == [0, 1, 2]


def test_a_gang_that_saved_a_newer_checkpoint_breaks_the_run_and_keeps_the_job_going():
    decision = _decide(_third_gang(_reported(2, 0, 5, 8)), CRASHED, generation=2)
    assert decision.status["phase"] == "Restarting"
    assert decision.status["gangs"][-1] == {"generation": 2, "startedFromStep": 0, "reachedStep": 8,
                                            "checkpointStep": 5, "ended": "Failed"}  # fmt: skip
    # A report of an earlier gang says nothing of this one: it never reported, so it made no progress.
    assert _decide(_third_gang(_reported(1, 0, 5, 8)), CRASHED, generation=2).status["phase"] == "Failed"


def test_disruptions_and_spec_changes_are_not_part_of_a_crash_loop():
    after_a_disruption = (_gang(0, 0, 0), _gang(1, 0, 0, ended="Disrupted"))
    decision = _decide(_third_gang(_reported(2, 0, 0, 3), after_a_disruption), CRASHED, generation=2)
    assert decision.status["phase"] == "Restarting"  # 1 in a row: the one before the disruption is not counted
    preempted = [
        gang_pod(0, "Failed", exit_code=EXIT_PREEMPTED, termination_message='{"result": "Preempted", "step": 9}'),
        gang_pod(1, "Running"),
    ]
    disrupted = _decide(_third_gang(_reported(2, 0, 0, 3)), preempted, generation=2)
    assert disrupted.status["gangs"][-1]["ended"] == "Disrupted" and disrupted.status["gangs"][-1]["reachedStep"] == 9


def test_the_steps_a_gang_trains_again_add_up_in_the_goodput():
    """g0 reached step 8 and saved step 5; g1 resumed from 5 and failed at 7: steps 6-8 were trained
    twice (3). g1's record counts them once it ends."""
    first = {"generation": 0, "startedFromStep": 0, "reachedStep": 8, "checkpointStep": 5, "ended": "Failed"}
    status = running_status(currentJob="demo-g1", gangs=[first], progress=_reported(1, 5, 5, 7))
    job = scaletrain_job(status, maxRestarts=10)
    decision = _decide(job, CRASHED, generation=1)
    assert decision.status["goodput"]["recomputedSteps"] == 3
    assert decision.status["gangs"][-1]["startedFromStep"] == 5


# A long traceback, as the pod launcher leaves its end in the termination message (up to 4096 bytes).
LONG_TRACEBACK = (
    "Traceback (most recent call last):\n"
    + '  File "/app/train.py", line 1, in f\n    f()\n' * 60
    + ("RuntimeError: CUDA error: an illegal memory access was encountered")
)
LAST_LINE = "RuntimeError: CUDA error: an illegal memory access was encountered"


def _failed_event(decision):
    return next(e.message for e in decision.events if e.reason == "Failed")


def test_a_restart_and_a_failure_for_the_restart_limit_say_the_exception_in_status_and_event():
    crashed = [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=1, termination_message=LONG_TRACEBACK)]
    restart = _decide(scaletrain_job(RUNNING, maxRestarts=1), crashed)
    assert restart.status["message"].endswith(LAST_LINE)
    (restarting,) = [e.message for e in restart.events if e.reason == "Restarting"]
    failed = _decide(scaletrain_job(RUNNING, maxRestarts=0), crashed)
    assert failed.status["phase"] == "Failed" and failed.status["message"].endswith(LAST_LINE)
    for message in (restarting, _failed_event(failed)):
        # The Event's message is cut as the operator posts it: its start says what failed, its end why.
        posted = bounded(message, EVENT_MESSAGE_LIMIT)
        assert len(posted) <= EVENT_MESSAGE_LIMIT < len(message)
        assert posted.startswith("pod demo-g0-1-abcde failed (Error, exit code 1);") and posted.endswith(LAST_LINE)


def test_a_loss_that_is_not_finite_fails_the_job_at_once_naming_the_step_and_the_checkpoint():
    summary = '{"result": "NonFinite", "firstNonFiniteStep": 9, "step": 10, "lastFiniteCheckpointStep": 5}'
    diverged = [
        gang_pod(0, "Failed", exit_code=EXIT_NON_FINITE, termination_message=summary),
        gang_pod(1, "Failed", exit_code=EXIT_NON_FINITE, termination_message=summary),
    ]
    decision = _decide(scaletrain_job(RUNNING, maxRestarts=3), diverged)
    assert decision.create == () and decision.status["phase"] == "Failed"
    assert next(c for c in decision.status["conditions"] if c["type"] == "Failed")["reason"] == "NonFiniteLoss"
    for message in (decision.status["message"], _failed_event(decision)):
        assert "loss not finite at step 9 (the last finite checkpoint: step 5), not retried" in message


def test_a_gang_that_finished_with_a_loss_that_is_not_finite_fails_the_job():
    summary = '{"result": "Succeeded", "step": 40, "maxSteps": 40, "loss": null, "lossFinite": false}'
    pods = [gang_pod(0, "Succeeded", exit_code=0, termination_message=summary), gang_pod(1, "Succeeded", exit_code=0)]
    decision = _decide(scaletrain_job(RUNNING), pods)
    assert decision.status["phase"] == "Failed"
    assert "pod demo-g0-0-abcde finished (Completed, exit code 0): loss not finite at step 40" in (
        _failed_event(decision)
    )


def test_an_eviction_names_the_evicted_pod_and_keeps_the_next_gang_off_its_node():
    """Rank 1 on n1 is evicted; rank 0 on n2 stops first, after the checkpoint every rank saved."""
    preempted = {"exit_code": EXIT_PREEMPTED, "termination_message": '{"result": "Preempted", "step": 20}'}
    gang = [
        gang_pod(0, "Failed", node="n2", finished_at=NOW - timedelta(seconds=30), **preempted),
        gang_pod(1, "Failed", node="n1", finished_at=NOW - timedelta(seconds=29), **preempted, **EVICTED),
    ]
    decision = _decide(scaletrain_job(RUNNING, failurePolicy=EXCLUDE), gang)
    assert decision.status["excludedNodes"] == ["n1"]
    (restarting,) = [e.message for e in decision.events if e.reason == "Restarting"]
    assert restarting.startswith("pod demo-g0-1-abcde was disrupted on node n1 (TerminationByKubelet, exit code 80)")
