"""Failures around a gang, on the real control plane with the operator as the chart installs it: pods the
real scheduler cannot place, status writes the API server refuses (a webhook injects a 500), and a gang's
Job deleted by hand. Without a kubelet (except where a test brings its own), the tests report pod
phases as a kubelet would."""

from __future__ import annotations

import secrets
import time

import pytest

from scaletrain_testing.kubelet import FakeNode, Kubelet
from scaletrain_testing.operator_harness import Team, condition, quiet_team
from scaletrain_testing.status_faults import StatusWriteFaults
from scaletrain_testing.timeouts import OPERATOR_REACTION_S
from scaletrain_testing.waiting import wait_until

NOWHERE = {"scaletrain.io/test-pool": "nowhere"}  # a node selector no node matches


@pytest.fixture(scope="module")
def team(control_plane, tmp_path_factory):
    """The chart installed for one watched namespace, and its operator running, for the whole module."""
    with quiet_team(control_plane, tmp_path_factory.mktemp("operator"), "failures") as team:
        yield team


def reasons(team: Team, name: str) -> list[str]:
    return [reason for _, reason, _ in team.events(name)]


def test_a_pod_the_scheduler_cannot_place_shows_as_schedulable_false_with_its_message(team, control_plane, tmp_path):
    """One node with room for one pod of two, and no gang placement (with it, neither pod would be bound:
    test_gang_placement.py): the other stays Pending, PodScheduled False (Unschedulable). The job says so
    with the scheduler's message and one Warning Event, counts 1 of 2 nodes active, and says Schedulable
    again once the gang fits (here: resized to one node)."""
    taint = {"key": "scaletrain.io/test", "value": team.namespace, "effect": "NoSchedule"}  # for this job's pods only
    node = FakeNode(f"one-slot-{secrets.token_hex(3)}", taints=[taint], cpu="1")
    with Kubelet(control_plane.api_client(), [node], tmp_path / "kubelet", namespaces=[team.namespace]):
        started = time.monotonic()
        team.submit("crowded", command=["sleep", "600"], resources={"requests": {"cpu": "1"}},
                    tolerations=[taint | {"operator": "Equal"}], scheduling={"gang": "none"})  # fmt: skip
        unschedulable = team.wait_condition("crowded", "Schedulable", "False")
        print(f"Schedulable=False {time.monotonic() - started:.1f} s after the job was created")
        assert unschedulable["reason"] == "Unschedulable"
        assert "the scheduler cannot place pod crowded-g0-" in unschedulable["message"]
        assert "0/1 nodes are available: 1 Insufficient cpu." in unschedulable["message"]
        # Half a gang trains nothing: not Running, and the job says which pod waits, and the scheduler's why.
        half = team.wait_status("crowded", lambda s: s["phase"] == "Pending" and s["nodes"]["active"] == 1)
        assert half["message"].startswith("1 of 2 pods running; waiting for pod crowded-g0-")
        assert "(the scheduler cannot place it: 0/1 nodes are available: 1 Insufficient cpu." in half["message"]
        assert half["nodes"]["pending"] == 1
        warnings = [(kind, message) for kind, reason, message in team.events("crowded") if reason == "Unschedulable"]
        assert warnings == [("Warning", unschedulable["message"])]

        team.patch_stj("crowded", {"spec": {"nodes": 1}})  # the gang now fits: restarted as one pod
        scheduled = team.wait_condition("crowded", "Schedulable", "True")
        assert scheduled["reason"] == "Scheduled"
        assert team.wait_status("crowded", lambda s: s["phase"] == "Running")["currentJob"] == "crowded-g1"
        assert reasons(team, "crowded").count("Unschedulable") == 1
        team.kube.delete("stj", team.namespace, "crowded")  # its pods go with the kubelet


def test_schedule_timeout_fails_a_gang_the_scheduler_cannot_place(team):
    """No event comes while the pods wait: the operator looks again when the timeout passes."""
    team.submit("nowhere", scheduleTimeoutSeconds=3, nodeSelector=NOWHERE)
    waiting = team.wait_condition("nowhere", "Schedulable", "False")
    seen = time.monotonic()
    failed = team.wait_phase("nowhere", "Failed")
    print(f"Failed {time.monotonic() - seen:.1f} s after Schedulable=False (scheduleTimeoutSeconds 3)")
    failure = condition(failed, "Failed")
    assert failure["reason"] == "Unschedulable" and "scheduleTimeoutSeconds (3) passed" in failure["message"]
    assert waiting["message"] in failure["message"]  # the scheduler's words
    # No pod may start later.
    wait_until(lambda: team.children("nowhere", "pods") == [], OPERATOR_REACTION_S, "no pod of nowhere")
    (job,) = team.children("nowhere", "jobs")
    assert job["spec"]["suspend"] is True
    assert [r for r in reasons(team, "nowhere") if r != "Created"] == ["Unschedulable", "Failed"]


def test_a_status_write_refused_once_converges_and_the_succeeded_event_is_posted_once(team, control_plane, tmp_path):
    team.submit("refused-once")
    pods = team.start_pods("refused-once-g0")
    team.wait_phase("refused-once", "Running")
    succeeded = lambda stj: (stj.get("status") or {}).get("phase") == "Succeeded"  # noqa: E731
    with StatusWriteFaults(control_plane, team.namespace, "refused-once", tmp_path, when=succeeded) as faults:
        for pod in pods:
            team.set_pod_phase(pod, "Succeeded")
        team.wait_phase("refused-once", "Succeeded", timeout_s=OPERATOR_REACTION_S)
        landed = time.monotonic()
    ((refused_at, _),) = faults.refused
    print(f"Succeeded landed {landed - refused_at:.1f} s after the refused write")
    assert reasons(team, "refused-once").count("Succeeded") == 1


def test_a_lost_status_write_of_a_restart_never_allows_a_third_gang(team, control_plane, tmp_path):
    """maxRestarts 1: the write that records restart 1 is refused. The count travels on the new gang's Job,
    so when that gang fails too, the job fails instead of starting a third."""
    team.submit("lost-restart", maxRestarts=1)
    pods = team.start_pods("lost-restart-g0")
    team.wait_phase("lost-restart", "Running")
    restart_recorded = lambda stj: (stj.get("status") or {}).get("restarts") == 1  # noqa: E731
    with StatusWriteFaults(control_plane, team.namespace, "lost-restart", tmp_path, when=restart_recorded) as faults:
        team.fail_pod(pods[1], exit_code=137)
        team.wait_status("lost-restart", lambda s: s.get("currentJob") == "lost-restart-g1" and s["restarts"] == 1)
        assert len(faults.refused) == 1
        second = team.start_pods("lost-restart-g1")
        team.wait_phase("lost-restart", "Running")
        team.fail_pod(second[0], exit_code=1)
        failed = team.wait_phase("lost-restart", "Failed")
    assert condition(failed, "Failed")["reason"] == "RestartLimitReached" and failed["status"]["restarts"] == 1
    assert [job["metadata"]["name"] for job in team.children("lost-restart", "jobs")] == ["lost-restart-g1"]
    failed_pod = team.kube.get("pods", team.namespace, second[0]["metadata"]["name"])
    assert failed_pod is not None and failed_pod["status"]["phase"] == "Failed"  # kept, for its logs
    assert reasons(team, "lost-restart").count("Restarting") == 1


def test_a_job_deleted_by_hand_is_a_warning_and_a_counted_gang_restart(team):
    team.submit("hand-deleted", maxRestarts=1)
    team.start_pods("hand-deleted-g0")
    team.wait_phase("hand-deleted", "Running")
    team.kube.delete("jobs", team.namespace, "hand-deleted-g0")
    status = team.wait_status("hand-deleted", lambda s: s.get("currentJob") == "hand-deleted-g1")
    assert status["restarts"] == 1 and team.kube.get("jobs", team.namespace, "hand-deleted-g1") is not None
    (deleted,) = [(kind, message) for kind, reason, message in team.events("hand-deleted") if reason == "JobDeleted"]
    assert deleted[0] == "Warning" and "Job hand-deleted-g0 was deleted, not by the operator" in deleted[1]

    team.kube.delete("jobs", team.namespace, "hand-deleted-g1")  # once more: maxRestarts is reached
    failed = team.wait_phase("hand-deleted", "Failed")
    assert condition(failed, "Failed")["reason"] == "RestartLimitReached" and failed["status"]["restarts"] == 1
    assert team.children("hand-deleted", "jobs") == [] and reasons(team, "hand-deleted").count("JobDeleted") == 2
