"""Operator restarts and deletion without an operator: each test starts and stops its own kopf."""

from __future__ import annotations

import time
import urllib.request

import pytest

from support.emulator import CRD_PATH, EmulatedCluster
from support.operator_harness import (
    NAMESPACE,
    PEERING_CRDS,
    children,
    create_peering,
    emulated_cluster,
    operator_process,
    running_operator,
    start_pods,
    stj,
    submit,
    wait_phase,
)
from support.trainer_runs import free_port


@pytest.fixture
def cluster():
    with emulated_cluster() as emulated:
        yield emulated


def test_an_operator_restart_creates_no_duplicates(cluster):
    with running_operator(cluster):
        submit(cluster, "survivor")
        start_pods(cluster, "survivor-g0")
        before = wait_phase(cluster, "survivor", "Running")
    cluster.reset_request_counts()
    with running_operator(cluster):
        time.sleep(1.0)  # the initial listing replays every object to the new operator
        cluster.set_pod_phase(NAMESPACE, "survivor-g0-0-x", "Running")  # and a fresh event
        time.sleep(0.5)
        counts = cluster.request_counts()
    assert counts[("create", "jobs.batch")] == 0 and counts[("create", "services")] == 0
    assert len(children(cluster, "survivor", "jobs")) == 1 and len(children(cluster, "survivor", "services")) == 1
    after = stj(cluster, "survivor")
    assert after["status"]["phase"] == "Running" and after["status"]["startTime"] == before["status"]["startTime"]


def test_deletion_needs_no_operator(cluster):
    with running_operator(cluster):
        submit(cluster, "doomed")
        start_pods(cluster, "doomed-g0")
        wait_phase(cluster, "doomed", "Running")
    cluster.delete("stj", NAMESPACE, "doomed")  # the operator is gone; nothing may block this
    assert stj(cluster, "doomed") is None
    for kind in ("jobs", "services", "pods"):
        assert children(cluster, "doomed", kind) == []


def test_the_operator_process_serves_liveness_and_metrics(cluster):
    """`scaletrain-operator` as it runs in its Deployment: kopf with /healthz and Prometheus metrics."""
    liveness, metrics = free_port(), free_port()
    args = ("-n", NAMESPACE, "--liveness-port", str(liveness), "--metrics-port", str(metrics))
    with operator_process(cluster, *args):
        submit(cluster, "from-process")
        wait_phase(cluster, "from-process", "Pending", timeout=30)

        def get(port, path):
            return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)

        assert cluster.wait_until(lambda: get(liveness, "/healthz").status == 200, timeout=10)
        assert "scaletrain_reconcile_seconds_count" in get(metrics, "/metrics").read().decode()


def test_peered_replicas_keep_one_active_and_hand_over_on_shutdown():
    """Two replicas as the chart runs them (--peering): random priorities make exactly one active (kopf
    would pause both on equal ones); when it shuts down, the standby takes over."""
    with EmulatedCluster(crds=[CRD_PATH, *PEERING_CRDS], namespaces=(NAMESPACE,)) as cluster:
        create_peering(cluster, "scaletrain")
        args = ("-A", "--peering", "scaletrain", "--liveness-port", "0", "--metrics-port", "0")
        with operator_process(cluster, *args) as first, operator_process(cluster, *args) as second:
            peers = cluster.wait_until(
                lambda: (
                    len(status := cluster.get("clusterkopfpeerings", None, "scaletrain").get("status") or {}) == 2
                    and status
                ),
                timeout=30,
            )
            active_identity = max(peers, key=lambda identity: peers[identity]["priority"])
            by_pid = {str(first.pid): first, str(second.pid): second}
            active = by_pid[active_identity.split("/")[1]]
            standby = second if active is first else first
            submit(cluster, "ha-first")
            wait_phase(cluster, "ha-first", "Pending", timeout=30)
            time.sleep(1.0)  # time for a standby that wrongly reconciles too
            assert "created Job team-a/ha-first-g0" in active.log_path.read_text()
            assert "created" not in standby.log_path.read_text()

            active.terminate()  # a rolling update, or a drained node: kopf leaves the peering on the way out
            active.wait(20)
            submit(cluster, "ha-second")
            wait_phase(cluster, "ha-second", "Pending", timeout=30)
            assert "created Job team-a/ha-second-g0" in standby.log_path.read_text()
