"""The pod executor restarts a pod's containers in place, as the kubelet does for a container whose
restartPolicyRules say RestartAllContainers (KEP-5532): every container is killed and started again, the
init containers first, while the pod keeps its sandbox (its IP), its volumes and its phase, and each container
starts again from a fresh writable layer."""

from __future__ import annotations

import os
import sys

import pytest

from scaletrain_operator.api.conditions import ALL_CONTAINERS_RESTARTING, RESTARTING_ALL_CONTAINERS, PodPhase
from scaletrain_operator.local.executor import PodExecutor
from scaletrain_testing.local_pods import a_container, a_pod, run_to_end
from scaletrain_testing.timeouts import POD_RUN_S

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a container's own writable layer needs root")

SCRATCH = [{"name": "scratch", "mountPath": "/scratch"}]
# The first run waits for its peer to have started, leaves a file in its own layer and asks for the restart (42);
# the second says whether that file survived, and lets the peer end.
WORKER = """
import os, sys, time
if not os.path.exists('/scratch/first'):
    open('/scratch/first', 'w').close()
    open(os.path.expanduser('~/own-file'), 'w').close()
    while not os.path.exists('/scratch/peer.log'):
        time.sleep(0.02)
    sys.exit(42)
kept = os.path.exists(os.path.expanduser('~/own-file'))
open('/scratch/result', 'w').write('layer kept' if kept else 'layer fresh')
open('/scratch/done', 'w').close()
"""
PEER = """
import os, time
open('/scratch/peer.log', 'a').write('started\\n')
while not os.path.exists('/scratch/done'):
    time.sleep(0.02)
"""
RESTART_ON_42 = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]


def test_a_restart_all_containers_rule_restarts_the_whole_pod_where_it_stands(tmp_path):
    pod = a_pod("in-place", [sys.executable, "-c", WORKER], [{"name": "scratch", "emptyDir": {}}], SCRATCH)
    pod["spec"]["containers"][0] |= {"restartPolicy": "Never", "restartPolicyRules": RESTART_ON_42}
    pod["spec"]["containers"].append(a_container("peer", [sys.executable, "-c", PEER], SCRATCH))
    init = "open('/scratch/init.log', 'a').write('ran\\n')"
    pod["spec"]["initContainers"] = [a_container("init", [sys.executable, "-c", init], SCRATCH)]
    with PodExecutor(tmp_path) as executor:
        running = run_to_end(executor, pod, POD_RUN_S)
        status = running.status()
        scratch = executor.host_path(pod, "peer", "/scratch")

    assert running.phase == PodPhase.SUCCEEDED, running.tail()
    assert (scratch / "init.log").read_text() == "ran\n" * 2  # the init container ran again, on the same volume
    assert (scratch / "peer.log").read_text() == "started\n" * 2  # the peer was restarted too
    assert (scratch / "result").read_text() == "layer fresh"
    assert status["podIP"] == running.sandbox.ip  # the same sandbox throughout
    statuses = status["initContainerStatuses"] + status["containerStatuses"]
    assert [(s["name"], s["restartCount"]) for s in statuses] == [("init", 1), ("main", 1), ("peer", 1)]
    for container in statuses:
        assert container["lastState"]["terminated"]["reason"] == RESTARTING_ALL_CONTAINERS, container
        assert container["lastState"]["terminated"]["exitCode"] == 137, container
    restarting = next(c for c in status["conditions"] if c["type"] == ALL_CONTAINERS_RESTARTING)
    assert restarting["status"] == "False"


def test_a_code_no_rule_matches_ends_the_container_as_its_restart_policy_says(tmp_path):
    pod = a_pod("no-match", [sys.executable, "-c", "raise SystemExit(3)"])
    pod["spec"]["containers"][0] |= {"restartPolicy": "Never", "restartPolicyRules": RESTART_ON_42}
    with PodExecutor(tmp_path) as executor:
        running = run_to_end(executor, pod, POD_RUN_S)
    (main,) = running.status()["containerStatuses"]
    assert running.phase == PodPhase.FAILED
    assert (main["restartCount"], main["state"]["terminated"]["exitCode"], main["lastState"]) == (0, 3, {})
