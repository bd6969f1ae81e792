"""The operator's decisions for a gang that restarts in place (controller/restarts.py): its Job and pods are kept and
say the next generation, the in-place channel is told what to run, and whatever a restart in place cannot keep (a
pod that is gone, a node to avoid, a spec change, a cluster without the restart rule) recreates the gang."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from scaletrain_operator.controller.decision import InPlaceWord
from scaletrain_operator.controller.reconcile import decide
from scaletrain_operator.in_place import WorkloadEnd
from scaletrain_operator.render.child_annotations import (
    ENDED_GANG_ANNOTATION,
    GANG_GENERATION_ANNOTATION,
    REPLACED_PODS_ANNOTATION,
    RESTARTS_ANNOTATION,
    START_AFTER_ANNOTATION,
)
from scaletrain_operator.render.in_place import runs_in_place
from scaletrain_testing.gang_objects import gang_job, gang_pod, in_place_settings, observed, rfc3339, scaletrain_job
from scaletrain_testing.jobs import running_status
from scaletrain_trainer.contract.exit_codes import EXIT_HANG, EXIT_PREEMPTED

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=timezone.utc)
FAILED = WorkloadEnd(0, 1, "ValueError: boom", NOW)  # rank 1's agent: its workload failed; the pod waits


def running_pods(generation: int = 0, **pod: object) -> list[dict]:
    return [gang_pod(rank, "Running", generation, node=f"node-{rank}", **pod) for rank in range(2)]


def test_a_failed_rank_restarts_the_gang_in_place_keeping_its_job_and_pods(tmp_path):
    settings, job = in_place_settings(tmp_path), scaletrain_job(status=running_status())
    seen = observed(job, {0: gang_job(job, 0, in_place=True)}, running_pods())
    decision = decide(job, replace(seen, said={1: FAILED}), NOW, settings)
    assert decision.create == () and decision.delete_child_jobs == ()
    patch = decision.patch_child_job
    assert patch is not None and patch.job == "demo-g0" and patch.spec == {}
    notes = patch.annotations
    assert notes[GANG_GENERATION_ANNOTATION] == "1" and notes[RESTARTS_ANNOTATION] == "1"
    assert notes[START_AFTER_ANNOTATION] == rfc3339(NOW)  # the first quick restart goes at once
    assert "exit code 1" in notes[ENDED_GANG_ANNOTATION]  # the agent's word: the kubelet keeps no record of it
    status = decision.status
    assert (status["phase"], status["gangGeneration"], status["currentJob"], status["restarts"]) == (
        "Restarting",
        1,
        "demo-g0",
        1,
    )
    assert "pod demo-g0-1-abcde failed (Error, exit code 1)" in status["message"]
    assert decision.in_place == InPlaceWord(1, 2, NOW)
    (event,) = decision.events
    assert event.reason == "Restarting" and event.occasion == "demo-g0, spec generation 1"


def test_the_restarted_gang_waits_out_its_backoff_at_the_barrier_then_runs(tmp_path):
    settings = in_place_settings(tmp_path)
    until = NOW + timedelta(seconds=20)
    job = scaletrain_job(
        status=running_status(phase="Restarting", gangGeneration=1, restarts=1, nextGangAt=rfc3339(until))
    )
    notes = {GANG_GENERATION_ANNOTATION: "1", RESTARTS_ANNOTATION: "1", START_AFTER_ANNOTATION: rfc3339(until)}
    current = gang_job(job, 0, in_place=True, annotations=notes)
    waiting = decide(job, observed(job, {1: current}, running_pods()), NOW, settings)
    assert waiting.status is None or waiting.status.get("phase", "Restarting") == "Restarting"
    assert waiting.recheck_after == 20 and waiting.in_place == InPlaceWord(1, 2, until)
    released = decide(job, observed(job, {1: current}, running_pods()), until, settings)
    assert released.status["phase"] == "Running" and released.status["nextGangAt"] is None
    assert released.patch_child_job is None and released.create == () and released.delete_child_jobs == ()
    assert released.in_place == InPlaceWord(1, 2, until)
    # The next failure is of generation 1, and its Restarting Event is another one (its occasion is the gang's).
    restarted = decide(
        job.model_copy(update={"status": job.status.model_copy(update={"phase": "Running", "next_gang_at": None})}),
        observed(job, {1: current}, running_pods(), said={0: WorkloadEnd(1, 3, "", until)}),
        until + timedelta(seconds=600),
        settings,
    )
    assert restarted.patch_child_job.annotations[GANG_GENERATION_ANNOTATION] == "2"
    assert restarted.events[0].occasion == "demo-g1, spec generation 1"


def test_whatever_a_restart_in_place_cannot_keep_recreates_the_gang(tmp_path):
    settings, job = in_place_settings(tmp_path), scaletrain_job(status=running_status())
    current = gang_job(job, 0, in_place=True)
    said = {1: FAILED}
    cases = {
        "a pod that failed for good": [gang_pod(0, "Running"), gang_pod(1, "Failed", exit_code=137)],
        "a pod being deleted": [gang_pod(0, "Running", deleted_at=NOW), gang_pod(1, "Running")],
    }
    for case, pods in cases.items():
        seen = observed(job, {0: current}, pods)
        decision = decide(job, replace(seen, said=said), NOW, settings)
        assert decision.delete_child_jobs == ("demo-g0",), case
        assert [child["metadata"]["name"] for child in decision.create] == ["demo-g1"], case
        assert runs_in_place(decision.create[0]), case  # the next gang may restart in place again
        assert decision.in_place == InPlaceWord(0, 2, None, ending=True), case  # waiting agents exit at once
    # The spec changed in the same pass: the next gang runs the new spec, in a new Job.
    changed = scaletrain_job(status=running_status(), env=[{"name": "EDITED", "value": "1"}])
    seen = observed(changed, {0: current}, running_pods())
    decision = decide(changed, replace(seen, said=said), NOW, settings)
    assert [child["metadata"]["name"] for child in decision.create] == ["demo-g1"]
    # spec.restartStrategy turned Recreate since the gang started.
    recreating = scaletrain_job(status=running_status(), restartStrategy="Recreate")
    seen = observed(recreating, {0: current}, running_pods())
    decision = decide(recreating, replace(seen, said=said), NOW, settings)
    assert decision.delete_child_jobs == ("demo-g0",) and not runs_in_place(decision.create[0])


def test_a_node_the_next_gangs_avoid_recreates_the_gang_off_it(tmp_path):
    policy = {"excludeNodes": {"mode": "Required"}}
    settings = in_place_settings(tmp_path)
    job = scaletrain_job(status=running_status(), failurePolicy=policy)
    seen = observed(job, {0: gang_job(job, 0, in_place=True)}, running_pods())
    stuck = WorkloadEnd(0, EXIT_HANG, "", NOW)  # rank 1's watchdog: a fault of its node's
    decision = decide(job, replace(seen, said={1: stuck}), NOW, settings)
    (next_gang,) = decision.create
    assert "node-1" in str(next_gang["spec"]["template"]["spec"]["affinity"])
    assert decision.delete_child_jobs == ("demo-g0",)


def drained(disruption: str = "EvictionByEvictionAPI") -> list[dict]:
    """Rank 1 evicted (`kubectl drain`), saving its checkpoint on its way out; rank 0 stopped after the same save
    (exit 80), its agent waiting for the word."""
    evicted = gang_pod(1, "Running", node="node-1", deleted_at=NOW, disruption=disruption, uid="uid-1", created=NOW)
    return [gang_pod(0, "Running", node="node-0", uid="uid-0", created=NOW), evicted]


def test_a_pod_a_drain_takes_is_replaced_while_the_others_restart_in_place(tmp_path):
    policy = {"excludeNodes": {"mode": "Required"}}
    settings = in_place_settings(tmp_path)
    job = scaletrain_job(status=running_status(), failurePolicy=policy)
    current = gang_job(job, 0, in_place=True)
    stopped = WorkloadEnd(0, EXIT_PREEMPTED, "", NOW)
    decision = decide(job, replace(observed(job, {0: current}, drained()), said={0: stopped}), NOW, settings)
    assert decision.create == () and decision.delete_child_jobs == ()
    notes = decision.patch_child_job.annotations
    assert notes[GANG_GENERATION_ANNOTATION] == "1" and notes[REPLACED_PODS_ANNOTATION] == '["uid-1"]'
    status = decision.status
    assert (status["disruptions"], status["restarts"], status["excludedNodes"]) == (1, 0, ["node-1"])
    assert "pod demo-g0-1-abcde is replaced, the others restart in place" in status["message"]
    assert decision.in_place == InPlaceWord(1, 2, NOW)
    # The evicted pod ended and is gone before the operator looked: its replacement is on its way all the same.
    gone = decide(job, replace(observed(job, {0: current}, drained()[:1]), said={0: stopped}), NOW, settings)
    assert gone.create == () and gone.patch_child_job.annotations[GANG_GENERATION_ANNOTATION] == "1"
    # Next: the Job controller made rank 1's replacement, not placed yet (the cache leaves the replaced pod out).
    patched = gang_job(job, 0, in_place=True, annotations=notes)
    later_job = scaletrain_job(status=status, failurePolicy=policy)
    replacement = gang_pod(1, "Pending", scheduled=None, uid="uid-1b", created=NOW + timedelta(seconds=5))
    pods = [drained()[0], replacement]
    later = decide(later_job, observed(later_job, {1: patched}, pods), NOW + timedelta(seconds=6), settings)
    assert later.create == () and later.delete_child_jobs == () and later.patch_child_job is None
    assert later.in_place == InPlaceWord(1, 2, NOW) and later.events == ()
    # A pod that fails now, while the replacement is still on its way, restarts the gang in place again.
    failed = decide(
        later_job, observed(later_job, {1: patched}, pods, said={0: WorkloadEnd(1, 1, "", NOW)}),
        NOW + timedelta(seconds=7), settings,
    )  # fmt: skip
    assert failed.delete_child_jobs == () and failed.patch_child_job.annotations[GANG_GENERATION_ANNOTATION] == "2"


def test_a_pod_the_scheduler_preempted_or_of_a_job_that_fails_on_disruption_recreates_the_gang(tmp_path):
    """A preempted pod's replacement would wait for the room the preemptor took, the other pods holding theirs:
    the gang is recreated, and waits whole. A Job made before disrupted pods were replaced (an upgrade) fails on
    one, and makes no replacement, nor for a pod that is gone."""
    settings, job = in_place_settings(tmp_path), scaletrain_job(status=running_status())
    stopped = {0: WorkloadEnd(0, EXIT_PREEMPTED, "", NOW)}
    made_before = gang_job(job, 0, in_place=True)
    made_before["spec"]["podFailurePolicy"] = gang_job(job, 0)["spec"]["podFailurePolicy"]
    cases = {
        "preempted": (gang_job(job, 0, in_place=True), drained("PreemptionByScheduler")),
        "made before": (made_before, drained()),
        "made before, the pod gone": (made_before, drained()[:1]),
    }
    for case, (current, pods) in cases.items():
        decision = decide(job, replace(observed(job, {0: current}, pods), said=stopped), NOW, settings)
        assert decision.delete_child_jobs == ("demo-g0",), case
        assert [child["metadata"]["name"] for child in decision.create] == ["demo-g1"], case


def test_the_last_restart_fails_the_job_and_tells_the_waiting_agents_to_end(tmp_path):
    settings = in_place_settings(tmp_path)
    job = scaletrain_job(status=running_status(restarts=3, gangGeneration=3))
    current = gang_job(job, 0, in_place=True, annotations={GANG_GENERATION_ANNOTATION: "3"})
    seen = observed(job, {3: current}, running_pods())
    decision = decide(job, replace(seen, said={1: WorkloadEnd(3, 1, "", NOW)}), NOW, settings)
    assert decision.status["phase"] == "Failed" and decision.patch_child_job is None
    assert decision.in_place == InPlaceWord(3, 2, None, ending=True)


def test_a_lost_status_write_of_a_restart_in_place_loses_nothing(tmp_path):
    """The Job says generation 1 and how generation 0 ended; the status still says generation 0 (its write was
    lost): the record and the count come back from the Job, and the gang is not taken for deleted."""
    settings, job = in_place_settings(tmp_path), scaletrain_job(status=running_status())
    seen = observed(job, {0: gang_job(job, 0, in_place=True)}, running_pods())
    restart = decide(job, replace(seen, said={1: FAILED}), NOW, settings)
    patched = gang_job(job, 0, in_place=True, annotations=restart.patch_child_job.annotations)
    later = decide(job, observed(job, {1: patched}, running_pods()), NOW + timedelta(seconds=1), settings)
    assert later.create == () and later.delete_child_jobs == ()
    status = later.status
    assert (status["gangGeneration"], status["restarts"], status["phase"]) == (1, 1, "Restarting")
    assert [gang["generation"] for gang in status["gangs"]] == [0]
    assert later.events[0].reason == "Restarting" and later.events[0] == restart.events[0]  # the same Event, once


def test_a_job_deleted_after_a_restart_in_place_ends_the_generation_it_ran(tmp_path):
    settings = in_place_settings(tmp_path)
    job = scaletrain_job(status=running_status(gangGeneration=2, restarts=2))
    decision = decide(job, observed(job, {}), NOW, settings)
    assert [child["metadata"]["name"] for child in decision.create] == ["demo-g3"]
    assert "Job demo-g2 was deleted" in decision.events[0].message


def unavailable(decision):
    return [c for c in decision.status["conditions"] if c["type"] == "InPlaceRestartsUnavailable"]


def test_a_cluster_that_cannot_restart_in_place_says_so_once_and_recreates(tmp_path):
    settings, job = in_place_settings(tmp_path, restarts_in_place=False), scaletrain_job()
    first = decide(job, observed(job, {}), NOW, settings)
    (gang,) = [child for child in first.create if child["kind"] == "Job"]
    assert not runs_in_place(gang)
    (said,) = unavailable(first)
    assert said["status"] == "True" and said["reason"] == "RestartRuleNotTaken"
    assert "a restart recreates the gang instead" in said["message"]
    assert [e.reason for e in first.events if e.reason == "InPlaceRestartsUnavailable"] == [
        "InPlaceRestartsUnavailable"
    ]
    told = scaletrain_job(status=running_status(conditions=first.status["conditions"]))
    again = decide(told, observed(told, {0: gang_job(told, 0)}, running_pods()), NOW, settings)
    assert not [e for e in again.events if e.reason == "InPlaceRestartsUnavailable"]
    # Where it can, or where the job asks to recreate, nothing is said.
    assert not unavailable(decide(job, observed(job, {}), NOW, in_place_settings(tmp_path)))
    recreating = scaletrain_job(restartStrategy="Recreate")
    assert not unavailable(decide(recreating, observed(recreating, {}), NOW, settings))


def test_a_gang_whose_rank_0_broke_its_promise_restarts_in_place_as_hung(tmp_path):
    """Every pod of a hung gang still runs (a stuck rank never exits): the gang restarts in place, its agents
    killing the stuck workloads, counted as a restart like a hang of a recreated gang."""
    stale = NOW - timedelta(seconds=60)
    progress = {"step": 7, "updatedAt": rfc3339(stale), "staleAfter": rfc3339(stale + timedelta(seconds=10)),
                "readAt": rfc3339(NOW), "generation": 0}  # fmt: skip
    job = scaletrain_job(status=running_status(progress=progress), maxRestarts=2)
    decision = decide(job, observed(job, {0: gang_job(job, 0, in_place=True)}, running_pods()), NOW,
                      in_place_settings(tmp_path))  # fmt: skip
    assert decision.delete_child_jobs == () and decision.create == ()
    assert decision.patch_child_job.annotations[GANG_GENERATION_ANNOTATION] == "1"
    assert [(e.reason, e.type) for e in decision.events] == [("Hang", "Warning"), ("Restarting", "Warning")]
    assert decision.status["restarts"] == 1 and decision.in_place == InPlaceWord(1, 2, NOW)


def test_a_gang_at_its_barrier_that_kueue_preempts_ends_at_once_not_after_its_backoff(tmp_path):
    until = NOW + timedelta(seconds=60)
    job = scaletrain_job(
        status=running_status(phase="Restarting", gangGeneration=1, restarts=1, nextGangAt=rfc3339(until)),
        queueName="team",
    )
    notes = {GANG_GENERATION_ANNOTATION: "1", RESTARTS_ANNOTATION: "1", START_AFTER_ANNOTATION: rfc3339(until)}
    suspended = gang_job(job, 0, in_place=True, annotations=notes, suspend=True)  # by Kueue: no note of ours
    decision = decide(job, observed(job, {1: suspended}, running_pods()), NOW, in_place_settings(tmp_path))
    assert [e.reason for e in decision.events][:1] == ["Preempted"] and decision.delete_child_jobs == ("demo-g0",)
