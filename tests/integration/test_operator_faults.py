"""Faults between the operator and the API server, injected by a proxy in front of the real API server
(scaletrain_testing/fault_proxy.py): a status-write outage in the middle of a gang restart, and the
operator killed (SIGKILL) while a request of its restart is held. Whatever happens, a healthy gang keeps
running, and `restarts` counts exactly the restarts that happened.

Each gang's rank 0 here is a progress server at an address of its own (the pod's IP, as on a cluster)
that answers as a healthy trainer: each answer reported just now, promising the next within PROMISE
seconds; the first gang's goes with its pods. An operator that held the new gang to the old gang's
promise (still in the status, since the write that would replace it failed) would restart it as hung."""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from scaletrain_testing.fault_proxy import FaultProxy
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import (
    PROGRESS_EACH_READ,
    QUIET,
    OperatorInstall,
    Team,
    install_watching,
    operator_process,
)
from scaletrain_testing.progress_server import ProgressServer
from scaletrain_testing.timeouts import OPERATOR_TAKEOVER_S

PROMISE = 2.0  # seconds rank 0 promises its next report within
OPERATOR_ARGS = (*QUIET, *PROGRESS_EACH_READ)
OPERATOR_ENV = {"SCALETRAIN_OPERATOR_PROGRESS_URL": "http://{pod_ip}:{port}/progress"}
FIRST_GANG_IP, SECOND_GANG_IP = "127.0.0.1", "127.0.0.2"  # the pods' addresses: loopback ones


@dataclasses.dataclass
class Faulty:
    team: Team
    install: OperatorInstall  # its kubeconfig reaches the API server through the proxy
    proxy: FaultProxy

    @contextmanager
    def operator(self) -> Iterator:
        with operator_process(self.install, *OPERATOR_ARGS, env=OPERATOR_ENV) as process:
            yield process


@pytest.fixture
def faulty(control_plane, tmp_path) -> Iterator[Faulty]:
    namespace = control_plane.create_namespace(f"faults-{secrets.token_hex(3)}")
    # One replica, no peering: a killed operator's successor starts at once (with peering it would wait
    # for the dead one's record to expire, ~60 s; the test waits out every promise itself instead).
    install = install_watching(control_plane, namespace, tmp_path, {"replicaCount": 1, "peering": {"enabled": False}})
    with FaultProxy(control_plane, tmp_path) as proxy:
        proxied = dataclasses.replace(install, kubeconfig=proxy.kubeconfig_for(install.kubeconfig))
        yield Faulty(Team(Kube(control_plane.api_client()), namespace), proxied, proxy)


def running_with_promise(team: Team, name: str, job: str) -> dict:
    return team.wait_status(
        name,
        lambda s: (
            s.get("phase") == "Running"
            and s.get("currentJob") == job
            and (s.get("progress") or {}).get("generation") == int(job.rsplit("-g", 1)[1])
        ),
        OPERATOR_TAKEOVER_S,
        f"gang {job} Running with its progress",
    )


def finish(team: Team, name: str, job: str) -> dict:
    """The gang of `job` succeeds; the job's final status."""
    for pod in team.pods(job):
        team.set_pod_phase(pod, "Succeeded")
    return team.wait_phase(name, "Succeeded")["status"]


def reasons(team: Team, name: str) -> list[str]:
    return [reason for _, reason, _ in team.events(name)]


def test_a_status_outage_during_a_restart_restarts_once_and_the_new_gang_runs_on(faulty):
    """Rank 1 fails; every status write of the job is refused (500) for longer than rank 0's promise and
    the operator's read allowance, so the write that records the restart is refused again and again."""
    team, proxy = faulty.team, faulty.proxy
    with contextlib.ExitStack() as stack:
        first_rank_0 = stack.enter_context(ProgressServer(host=FIRST_GANG_IP))
        stack.enter_context(faulty.operator())
        first_rank_0.healthy(PROMISE)
        port = first_rank_0.port
        team.submit("outage", training={"metricsPort": port, "hangTimeoutSeconds": 10}, maxRestarts=3)
        first = team.start_pods("outage-g0", pod_ip=FIRST_GANG_IP)
        running_with_promise(team, "outage", "outage-g0")
        outage = proxy.fail("PATCH", r"/scaletrainjobs/outage/status$", seconds=4 * PROMISE + 4)
        team.fail_pod(first[1], exit_code=1)
        first_rank_0.progress = None  # its pods are going
        second_rank_0 = stack.enter_context(ProgressServer(host=SECOND_GANG_IP, port=port))
        second_rank_0.healthy(PROMISE)
        team.start_pods("outage-g1", pod_ip=SECOND_GANG_IP)  # the restart's gang, made while the outage lasts
        time.sleep(max(0.0, outage.until - time.monotonic()))  # the outage runs its course
        assert len(outage.matched) >= 10, outage.matched
        status = running_with_promise(team, "outage", "outage-g1")
        assert status["restarts"] == 1
        time.sleep(PROMISE + 2)  # promises come and go: the gang is healthy
        final = finish(team, "outage", "outage-g1")
    assert final["restarts"] == 1
    assert "Hang" not in reasons(team, "outage") and reasons(team, "outage").count("Restarting") == 1
    assert [job["metadata"]["name"] for job in team.children("outage", "jobs")] == ["outage-g1"]
    failed_gang_recorded(team, "outage", final)


def failed_gang_recorded(team: Team, name: str, final: dict) -> None:
    """The record of g0, which failed (rank 1, exit code 1), and the one Restarting Event that names its pod."""
    assert [(gang["generation"], gang["ended"]) for gang in final["gangs"]] == [(0, "Failed"), (1, "Succeeded")]
    (restarting,) = [message for _, reason, message in team.events(name) if reason == "Restarting"]
    assert f"pod {name}-g0-1-" in restarting and "exit code 1" in restarting, restarting


@pytest.mark.parametrize(
    ("held_method", "held_path", "held_body"),
    [
        ("DELETE", r"/jobs/killed-g0$", None),  # after the new gang's Job was created
        ("PATCH", r"/scaletrainjobs/killed/status$", '"phase": ?"Restarting"'),  # after the old one's was deleted
    ],
    ids=["at-the-delete", "at-the-status-patch"],
)
def test_an_operator_killed_in_the_middle_of_a_restart_leaves_one_new_gang_and_one_restart(
    faulty, held_method, held_path, held_body
):
    team, proxy = faulty.team, faulty.proxy
    with ProgressServer(host=FIRST_GANG_IP) as first_rank_0:
        first_rank_0.healthy(PROMISE)
        port = first_rank_0.port
        with faulty.operator() as first_operator:
            team.submit("killed", training={"metricsPort": port}, maxRestarts=3)
            pods = team.start_pods("killed-g0", pod_ip=FIRST_GANG_IP)
            running_with_promise(team, "killed", "killed-g0")
            held = proxy.hold(held_method, held_path, body=held_body)
            team.fail_pod(pods[1], exit_code=1)
            held.wait_matched()
            first_operator.send_signal(signal.SIGKILL)
            first_operator.wait(10)
        first_rank_0.progress = None  # its pods are going
    proxy.remove(held)
    time.sleep(PROMISE + 3)  # no operator meanwhile, as until a standby takes over: every promise ran out
    with ProgressServer(host=SECOND_GANG_IP, port=port) as second_rank_0:
        second_rank_0.healthy(PROMISE)
        team.start_pods("killed-g1", pod_ip=SECOND_GANG_IP)
        with faulty.operator():
            status = running_with_promise(team, "killed", "killed-g1")
            assert status["restarts"] == 1
            time.sleep(PROMISE + 2)  # past any promise the status held
            final = finish(team, "killed", "killed-g1")
    assert final["restarts"] == 1 and "Hang" not in reasons(team, "killed")
    assert [job["metadata"]["name"] for job in team.children("killed", "jobs")] == ["killed-g1"]
    failed_gang_recorded(team, "killed", final)
