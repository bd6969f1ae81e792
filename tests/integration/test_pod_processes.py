"""The pod executor tells pods' processes apart after a pod has gone. The kernel reuses a deleted
network namespace's inode number for a namespace made later, perhaps another pod's: a stopped pod
stopped again (as the kubelet does when the pod's object is deleted after its processes died) must
not kill what now lives in a namespace of that number."""

from __future__ import annotations

import uuid

from scaletrain_operator.local.executor import PodExecutor
from scaletrain_operator.local.processes import ProcessInfo, scan_processes


def sleeping_pod(name):
    container = {"name": "main", "image": "python", "command": ["sleep", "600"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


def test_a_stopped_pod_no_longer_claims_processes_by_its_old_network_namespace(tmp_path):
    executor = PodExecutor(tmp_path)
    try:
        pod = executor.start(sleeping_pod("old"))
        (main,) = pod.processes(scan_processes())
        stranger = ProcessInfo(pid=main + 100_000, env_value=None, netns_inode=pod.sandbox.netns_inode)
        if pod.sandbox.netns_inode is not None:  # a namespace per pod (root)
            assert pod.processes([stranger]) == [stranger.pid]  # while the pod has its namespace
        pod.stop(grace_seconds=0)
        assert pod.processes([stranger]) == []
        assert pod.processes(scan_processes()) == []
    finally:
        executor.close(grace_seconds=0)
