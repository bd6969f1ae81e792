"""The RBAC table (scaletrain_operator.controller.rbac) against the calls a real operator process makes.

The operator runs as its Deployment runs it (`scaletrain-operator`, with peering) through a lifecycle
that needs every permission: create, run, fail and restart a gang, suspend, succeed, expire by TTL.
Every API request it makes must be allowed by the table, and every verb in the table must be used.
The chart's Roles are generated from the same table (test_chart.py checks they match).
"""

from __future__ import annotations

import pytest

from scaletrain_operator.controller import rbac
from support.emulator import CRD_PATH, EmulatedCluster
from support.operator_harness import (
    NAMESPACE,
    PEERING_CRDS,
    TIMEOUT,
    create_peering,
    fail_pod,
    operator_process,
    start_pods,
    stj,
    submit,
    wait_phase,
)

PEERING = "scaletrain"
SCOPES = {
    "namespaced": (False, ("-n", NAMESPACE)),
    "clusterwide": (True, ("-A",)),
}


def run_every_kind_of_change(cluster):
    submit(cluster, "lifecycle", maxRestarts=1, ttlSecondsAfterFinished=0)
    pods = start_pods(cluster, "lifecycle-g0")
    wait_phase(cluster, "lifecycle", "Running", timeout=30)
    fail_pod(cluster, pods[1]["metadata"]["name"], exit_code=137)  # gang restart: delete g0, create g1
    start_pods(cluster, "lifecycle-g1", phase="Succeeded")
    cluster.set_status("jobs", NAMESPACE, "lifecycle-g1", {"conditions": [{"type": "Complete", "status": "True"}]})
    cluster.wait_until(lambda: stj(cluster, "lifecycle") is None, timeout=TIMEOUT)  # TTL: delete the job

    submit(cluster, "paused")
    start_pods(cluster, "paused-g0")
    wait_phase(cluster, "paused", "Running")
    cluster.patch("stj", NAMESPACE, "paused", {"spec": {"suspend": True}})  # patch the Job
    wait_phase(cluster, "paused", "Suspended")


@pytest.mark.parametrize("scope", SCOPES)
def test_the_rbac_table_allows_exactly_the_calls_the_operator_makes(scope):
    clusterwide, scope_args = SCOPES[scope]
    with EmulatedCluster(crds=[CRD_PATH, *PEERING_CRDS], namespaces=(NAMESPACE,)) as cluster:
        create_peering(cluster, PEERING, None if clusterwide else NAMESPACE)
        args = (*scope_args, "--peering", PEERING, "--progress-interval", "0.3", "--liveness-port", "0")
        with operator_process(cluster, *args, "--metrics-port", "0"):
            run_every_kind_of_change(cluster)
        # Only the operator talks HTTP here (the test's helpers change the emulator's state directly).
        calls = [call for call in cluster.emulator.calls if not call[1].startswith("/")]  # discovery: no RBAC

    table = rbac.permissions(clusterwide=clusterwide, peering=True)
    granted = {(p.qualified, verb) for p in table for verb in p.verbs}
    used = {(resource, verb) for verb, resource, _, _ in calls}
    assert used - granted == set(), "calls the chart's RBAC would forbid"
    assert granted - used == set(), "permissions the operator never uses"
    if not clusterwide:  # a Role in the watched namespace is enough
        assert {namespace for _, _, namespace, _ in calls} == {NAMESPACE}
