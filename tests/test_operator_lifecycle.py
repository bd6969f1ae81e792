"""Operator restarts and deletion without an operator: each test starts and stops its own kopf."""

from __future__ import annotations

import time
import urllib.request

import pytest
from test_operator import (
    NAMESPACE,
    children,
    configured_cluster,
    operator_process,
    running_operator,
    start_pods,
    stj,
    submit,
    wait_phase,
)
from trainer_runs import free_port


@pytest.fixture
def cluster():
    with configured_cluster() as emulated:
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
