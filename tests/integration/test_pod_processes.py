"""The pod executor's processes: it tells pods' processes apart after a pod has gone, and its pods
die with its process, however that process dies.

The kernel reuses a deleted network namespace's inode number for a namespace made later, perhaps
another pod's: a stopped pod stopped again (as the kubelet does when the pod's object is deleted
after its processes died) must not kill what now lives in a namespace of that number."""

from __future__ import annotations

import signal
import subprocess
import sys

from scaletrain_operator.local.executor import PodExecutor
from scaletrain_operator.local.processes import ProcessInfo, scan_processes, signal_processes
from scaletrain_testing.local_pods import a_pod
from scaletrain_testing.process_tree import descendants, survivors
from scaletrain_testing.timeouts import POD_START_S
from scaletrain_testing.waiting import wait_until

# A main process that starts a worker in a session of its own, as torchrun does, and says so.
WORKER_IN_OWN_SESSION = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True); "
    "print('worker started', flush=True); time.sleep(600)"
)


def sleeping_pod(name):
    return a_pod(name, ["sleep", "600"])


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


def test_sigkill_of_the_executors_process_leaves_none_of_its_pods_processes(tmp_path):
    """Its orphan guard kills them all within 2 s: the pod's main process and the worker it started in
    a session of its own (no process group signal reaches it)."""
    command = [
        sys.executable,
        "-m",
        "scaletrain_testing.executor_host",
        str(tmp_path),
        "python",
        "-c",
        WORKER_IN_OWN_SESSION,
    ]
    log = tmp_path / "logs" / "orphan_main.log"

    def worker_started() -> bool:
        if log.exists() and "worker started" in log.read_text():
            return True
        assert host.poll() is None, "the executor's host exited before the pod started its worker"
        return False

    host = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        wait_until(worker_started, POD_START_S, "the pod to start its worker", interval_s=0.05)
        tree = {host.pid, *descendants(host.pid)}
        host.kill()
        left, seconds = survivors(tree, str(tmp_path), timeout_s=2.0)
    finally:
        host.kill()
        host.wait(timeout=10)
    signal_processes(left, signal.SIGKILL)  # a failure leaves nothing running either
    assert left == set(), f"{len(left)} of {len(tree)} processes alive {seconds:.2f} s after SIGKILL"
    assert len(tree) >= 4, tree  # the host, its guard, the pod's main process and its worker
