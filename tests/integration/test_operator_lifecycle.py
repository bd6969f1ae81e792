"""Operator restarts, deletion without an operator, the process's endpoints and HA, on the real control
plane: each test installs the chart for its own namespace and starts and stops its own operators."""

from __future__ import annotations

import time
import urllib.request

import pytest

from scaletrain_testing.audit import counts
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import Team, install_operator, install_watching, operator_process
from scaletrain_testing.timeouts import (
    CONTROLLERS_REACTION_S,
    OPERATOR_LIVENESS_S,
    OPERATOR_REACTION_S,
    OPERATOR_STOP_S,
)
from scaletrain_testing.trainer_runs import free_port
from scaletrain_testing.waiting import wait_until

QUIET = ("--liveness-port", "0", "--metrics-port", "0")


@pytest.fixture
def install(control_plane, namespace, tmp_path):
    return install_watching(control_plane, namespace, tmp_path)


@pytest.fixture
def team(control_plane, namespace):
    return Team(Kube(control_plane.api_client()), namespace)


def test_an_operator_restart_creates_no_duplicates(install, team, control_plane):
    with operator_process(install, *QUIET):
        team.submit("survivor")
        (pod, _) = team.start_pods("survivor-g0")
        before = team.wait_phase("survivor", "Running")
    mark = control_plane.audit.mark()
    with operator_process(install, *QUIET):
        time.sleep(3.0)  # the initial listing replays every object to the new operator
        team.set_pod_phase(pod, "Running")  # and a fresh event
        made = counts(control_plane.audit.requests(install.user, after=mark, settle_seconds=2.0))
    assert made[("list", "scaletrainjobs.scaletrain.io")] >= 1  # it did start and look
    assert made[("create", "jobs.batch")] == 0 and made[("create", "services")] == 0
    assert len(team.children("survivor", "jobs")) == 1 and len(team.children("survivor", "services")) == 2
    after = team.stj("survivor")
    assert after["status"]["phase"] == "Running" and after["status"]["startTime"] == before["status"]["startTime"]


def test_deletion_needs_no_operator(install, team):
    with operator_process(install, *QUIET):
        team.submit("doomed")
        team.start_pods("doomed-g0")
        team.wait_phase("doomed", "Running")
    team.kube.delete("stj", team.namespace, "doomed")  # the operator is gone; nothing may block this
    assert team.stj("doomed") is None
    for kind in ("jobs", "services", "pods"):  # the real garbage collector follows the ownerReferences
        wait_until(
            lambda kind=kind: team.children("doomed", kind) == [], CONTROLLERS_REACTION_S, f"no {kind} of doomed"
        )


def test_the_operator_process_serves_liveness_and_metrics(install, team):
    """`scaletrain-operator` as it runs in its Deployment: kopf with /healthz and Prometheus metrics."""
    liveness, metrics = free_port(), free_port()
    with operator_process(install, "--liveness-port", str(liveness), "--metrics-port", str(metrics)):
        team.submit("from-process")
        team.wait_phase("from-process", "Pending")

        def get(port, path):
            return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)

        assert wait_until(
            lambda: get(liveness, "/healthz").status == 200, OPERATOR_LIVENESS_S, "/healthz to answer 200"
        )
        assert "scaletrain_reconcile_seconds_count" in get(metrics, "/metrics").read().decode()


def test_peered_replicas_keep_one_active_and_hand_over_on_shutdown(control_plane, namespace, team, tmp_path):
    """Two replicas as the chart runs them, cluster-wide with a ClusterKopfPeering: random priorities
    make exactly one active (kopf would pause both on equal ones); when it shuts down, the standby
    takes over."""
    peering = f"{namespace}-peering"
    values = {"peering": {"name": peering}}
    install = install_operator(control_plane, values, f"{namespace}-operator", tmp_path)
    with operator_process(install, *QUIET) as first, operator_process(install, *QUIET) as second:

        def both_peers():
            status = (team.kube.get("clusterkopfpeerings", None, peering) or {}).get("status") or {}
            return len(status) == 2 and status

        peers = wait_until(both_peers, OPERATOR_REACTION_S, "both replicas in the peering")
        active_identity = max(peers, key=lambda identity: peers[identity]["priority"])
        by_pid = {str(first.pid): first, str(second.pid): second}
        active = by_pid[active_identity.split("/")[1]]
        standby = second if active is first else first
        team.submit("ha-first")
        team.wait_phase("ha-first", "Pending")
        time.sleep(1.0)  # time for a standby that wrongly reconciles too
        assert f"created Job {team.namespace}/ha-first-g0" in active.log_path.read_text()
        # (Of this test's namespace: before the peers settle, a cluster-wide replica may briefly act on jobs
        # that earlier tests left behind.)
        assert f"created Service {team.namespace}/" not in standby.log_path.read_text()
        assert f"created Job {team.namespace}/" not in standby.log_path.read_text()

        active.terminate()  # a rolling update, or a drained node: kopf leaves the peering on the way out
        active.wait(OPERATOR_STOP_S)
        team.submit("ha-second")
        team.wait_phase("ha-second", "Pending")
        assert f"created Job {team.namespace}/ha-second-g0" in standby.log_path.read_text()
