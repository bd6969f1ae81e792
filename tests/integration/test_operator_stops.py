"""A finished job holds nothing: whatever ends it, no pod of its gang still runs soon after. And what other
tenants can put in a job's way does not move it: a bare pod posing as rank 0, or a child's name held by an
object being deleted. On the real control plane with the operator as the chart installs it; without a
kubelet, the tests report pod phases as a kubelet would."""

from __future__ import annotations

import secrets
import time

import pytest

from scaletrain_operator.api import naming
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import (
    PROGRESS_EACH_READ,
    QUIET,
    Team,
    condition,
    install_watching,
    operator_process,
)
from scaletrain_testing.progress_server import RANK0_PROGRESS, ProgressServer, promise
from scaletrain_testing.timeouts import OPERATOR_REACTION_S
from scaletrain_testing.waiting import wait_until

STOPPED_WITHIN_S = 10.0  # after the terminal phase: what the tests here hold the operator to
FORGED_IP = "127.0.0.2"  # the impostor's pod IP: loopback too


@pytest.fixture(scope="module")
def team(control_plane, tmp_path_factory):
    namespace = control_plane.create_namespace(f"stops-{secrets.token_hex(3)}")
    install = install_watching(control_plane, namespace, tmp_path_factory.mktemp("operator"))
    env = {"SCALETRAIN_OPERATOR_PROGRESS_URL": "http://{pod_ip}:{port}/progress"}  # the pods' IPs: loopback
    with operator_process(install, *QUIET, *PROGRESS_EACH_READ, env=env):
        yield Team(Kube(control_plane.api_client()), namespace)


def still_running(team: Team, name: str) -> list[str]:
    return [
        pod["metadata"]["name"]
        for pod in team.children(name, "pods")
        if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
    ]


def hang(team: Team, name: str, server: ProgressServer) -> None:
    """Rank 0 answers a promise that ran out long ago, as a stuck training loop's server does."""
    team.start_pods(f"{name}-g0")
    server.progress = RANK0_PROGRESS | promise(1, at=None) | {"staleAfter": "2026-01-01T00:00:00Z"}


def restart_limit(team: Team, name: str, server: ProgressServer) -> None:
    """Rank 1 fails while rank 0 still runs (blocked in a collective), with no restart left."""
    pods = team.start_pods(f"{name}-g0")
    team.fail_pod(pods[1], exit_code=1)


def invalid_edit(team: Team, name: str, server: ProgressServer) -> None:
    """The running job's spec is edited into one the operator cannot run (the CRD lets it through)."""
    team.start_pods(f"{name}-g0")
    team.wait_phase(name, "Running")
    team.patch_stj(name, {"spec": {"env": [{"name": "WORLD_SIZE", "value": "8"}]}})


def deadline(team: Team, name: str, server: ProgressServer) -> None:
    """activeDeadlineSeconds passes: the Job controller fails the Job and ends its pods itself."""
    team.start_pods(f"{name}-g0")


@pytest.mark.parametrize(
    ("end", "spec", "reason"),
    [
        (hang, {}, "RestartLimitReached"),
        (restart_limit, {}, "RestartLimitReached"),
        (invalid_edit, {}, "InvalidSpec"),
        (deadline, {"activeDeadlineSeconds": 3}, "DeadlineExceeded"),
    ],
    ids=["hang", "restart-limit", "invalid-spec", "deadline"],
)
def test_after_the_job_failed_no_pod_of_it_runs(team, end, spec, reason):
    name = f"{end.__name__.replace('_', '-')}-{secrets.token_hex(2)}"
    with ProgressServer() as server:
        server.healthy(60)
        team.submit(name, training={"metricsPort": server.port}, maxRestarts=0, **spec)
        end(team, name, server)
        failed = team.wait_phase(name, "Failed")
        failed_at = time.monotonic()
    assert condition(failed, "Failed")["reason"] == reason, failed["status"]
    wait_until(lambda: not still_running(team, name), STOPPED_WITHIN_S, f"no pod of {name} running")
    print(f"{reason}: no pod running {time.monotonic() - failed_at:.1f} s after Failed")


def test_a_bare_pod_posing_as_rank_0_is_never_read(team):
    """Another pod in the namespace carries rank 0's labels and annotation (all but the Job controller's
    uid label, with which the Job would adopt it) and, at its own IP and rank 0's port, serves a
    long-broken promise. It is not owned by the gang's Job: the operator reads the real rank 0 only, and
    the healthy gang is never taken for hung."""
    with ProgressServer() as real:
        real.healthy(2, step=7)
        team.submit("posed", training={"metricsPort": real.port})
        rank_0, rank_1 = team.pods("posed-g0")
        labels = {key: value for key, value in rank_0["metadata"]["labels"].items() if "controller-uid" not in key}
        impostor = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "posed-g0-0-forged", "namespace": team.namespace, "labels": labels,
                         "annotations": rank_0["metadata"]["annotations"]},
            "spec": {"containers": [{"name": naming.TRAINER_CONTAINER, "image": "forged"}]},
        }  # fmt: skip
        forged_progress = RANK0_PROGRESS | {"step": 1, "staleAfter": "2000-01-01T00:00:00Z"}
        with ProgressServer(forged_progress, host=FORGED_IP, port=real.port) as forged:
            team.set_pod_phase(team.kube.create("pods", impostor, team.namespace), "Running", pod_ip=FORGED_IP)
            team.set_pod_phase(rank_1, "Running")  # the real rank 0 still starting: no address yet
            time.sleep(4.0)  # many passes, in which the impostor is the only "rank 0" with an address
            team.set_pod_phase(rank_0, "Running")
            team.wait_status("posed", lambda s: (s.get("progress") or {}).get("step") == 7)
            time.sleep(4.0)  # many passes
            status = team.stj("posed")["status"]
            assert forged.answered == 0
    assert status["phase"] == "Running" and status["restarts"] == 0
    assert "Hang" not in [reason for _, reason, _ in team.events("posed")]


def test_a_childs_name_held_by_an_object_being_deleted_is_waited_for_and_said(team):
    """A Job of another owner holds the name of the job's first gang and is being deleted, held by a
    finalizer. The job says what it waits for (no retry storm, no false ApiRetrying), and starts once the
    name is free."""
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "held-g0", "namespace": team.namespace, "finalizers": ["example.com/hold"]},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}},
    }  # fmt: skip
    team.kube.create("jobs", foreign, team.namespace)
    team.kube.delete("jobs", team.namespace, "held-g0")
    team.submit("held")
    waiting = team.wait_status("held", lambda s: "finalizers: example.com/hold" in (s.get("message") or ""))
    assert waiting["phase"] == "Pending" and "is being deleted" in waiting["message"]
    team.kube.patch("jobs", team.namespace, "held-g0", {"metadata": {"finalizers": None}})
    started = wait_until(
        lambda: [j for j in team.children("held", "jobs") if j["metadata"].get("uid")],
        OPERATOR_REACTION_S,
        "the Job of held",
    )
    assert started[0]["metadata"]["ownerReferences"][0]["name"] == "held"
    assert "ApiRetrying" not in [reason for _, reason, _ in team.events("held")]
