"""A container's processes, found as a container runtime finds them in the container's cgroup.

torchrun starts its workers in sessions of their own, so a process group misses them. Every process
of a local container carries a marker in its environment (whatever it starts inherits it), and
in a pod network namespace /proc/PID/ns/net names the pod's namespace too, which even a process
that cleared its environment cannot leave. One scan of /proc answers both (Linux only).

The marker also outlives the executor. A SIGKILLed run-local cannot stop its pods, and what it
started would train on: torchrun reparented to init, and its workers, in sessions of their own, out
of reach of any process group signal. A PR_SET_PDEATHSIG would cover only each pod's main process,
fires when the *thread* that started it ends (the kubelet stand-in starts pods from per-pod
threads), and is cleared by exec of a set-user-ID program. So each executor has an OrphanGuard: a
process of its own, in a session of its own (no Ctrl-C of the terminal reaches it), whose stdin is a
pipe that only the executor's process holds open. However that process ends, the kernel closes the
pipe; the guard reads its end, SIGKILLs every process that carries the executor's run marker (a
process forked meanwhile carries it too, so it scans until none is left), and exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# "RUN.POD/CONTAINER" in every process of a local container: the executor's run marker, the pod's, its name
MARKER_ENV = "SCALETRAIN_LOCAL_CONTAINER"
KILL_WAIT_SECONDS = 5.0  # after SIGKILL: a process in uninterruptible I/O is left to init after this
POLL_SECONDS = 0.05
GUARD_START_SECONDS = 5.0  # an interpreter's start, on a busy machine


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    env_value: str | None  # its value of the variable scanned for (MARKER_ENV by default)
    netns_inode: int | None  # its network namespace

    def of_pod(self, pod_marker: str, netns_inode: int | None) -> bool:
        in_namespace = netns_inode is not None and self.netns_inode == netns_inode
        return in_namespace or (self.env_value or "").startswith(pod_marker + "/")

    def of_run(self, run_marker: str) -> bool:
        return (self.env_value or "").startswith(run_marker + ".")


def scan_processes(env_name: str = MARKER_ENV) -> list[ProcessInfo]:
    """Every live (not zombie) process that this user may inspect, with its value of `env_name`."""
    prefix = env_name.encode() + b"="
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
            value = next(
                (entry[len(prefix) :].decode(errors="replace") for entry in environ if entry.startswith(prefix)), None
            )
            found.append(ProcessInfo(int(proc.name), value, _netns_inode(proc)))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def signal_processes(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_run(run_marker: str, timeout_seconds: float = KILL_WAIT_SECONDS) -> int:
    """SIGKILL every process of the run until none is left, or `timeout_seconds` have passed (an
    unkillable one is left to init). Returns how many were killed."""
    killed: set[int] = set()
    give_up = time.monotonic() + timeout_seconds
    while time.monotonic() < give_up:
        pids = [process.pid for process in scan_processes() if process.of_run(run_marker)]
        if not pids:
            break
        signal_processes(pids, signal.SIGKILL)
        killed.update(pids)
        time.sleep(POLL_SECONDS)
    return len(killed)


class OrphanGuard:
    """Kills what is left of an executor's pods once the executor's process has ended, however it
    ended (see the module's docstring). Every pod marker starts with `run_marker`; the first one asked
    for starts the guard process, before its pod."""

    def __init__(self) -> None:
        self.run_marker = uuid.uuid4().hex
        self._guard: subprocess.Popen[bytes] | None = None
        self._held = -1  # the pipe's end whose closing the guard waits for
        self._lock = threading.Lock()  # pods start from several threads (the kubelet stand-in's)

    def pod_marker(self) -> str:
        with self._lock:
            if self._guard is None:
                self._start()
        return f"{self.run_marker}.{uuid.uuid4().hex}"

    def close(self) -> None:
        """The executor is done: the guard kills what may be left and exits (waited for, up to a limit)."""
        with self._lock:
            guard, held, self._guard, self._held = self._guard, self._held, None, -1
        if guard is None:
            return
        os.close(held)
        try:
            guard.wait(timeout=KILL_WAIT_SECONDS + GUARD_START_SECONDS)
        except subprocess.TimeoutExpired:  # stuck on an unkillable process: it ends on its own
            pass

    def _start(self) -> None:
        watched, self._held = os.pipe()  # both ends close on exec: no pod inherits the held end
        try:
            # In the directory that holds this package: `-m` imports this very module, whatever the path.
            self._guard = subprocess.Popen(
                [sys.executable, "-m", __name__, self.run_marker], stdin=watched, stdout=subprocess.DEVNULL,
                cwd=Path(__file__).parents[2], start_new_session=True,
            )  # fmt: skip
        except OSError:
            os.close(self._held)
            self._held = -1
            raise
        finally:
            os.close(watched)


def guard(run_marker: str) -> None:
    """The guard process: wait until the executor's process has closed the pipe on stdin (it never
    writes to it), then kill what it left running."""
    sys.stdin.buffer.read()
    killed = kill_run(run_marker)
    if killed:
        message = f"the pod executor's process ended without stopping its pods; killed {killed} process(es)"
        print(f"scaletrain: {message}", file=sys.stderr)


def exit_code(returncode: int) -> int:
    """A container's exit code: a process killed by signal N exits 128 + N, as the kubelet reports."""
    return 128 - returncode if returncode < 0 else returncode


def _netns_inode(proc: Path) -> int | None:
    try:
        link = os.readlink(proc / "ns" / "net")  # "net:[4026531840]"
    except OSError:
        return None
    return int(link[link.index("[") + 1 : -1])


if __name__ == "__main__":  # the guard process, started by OrphanGuard
    guard(sys.argv[1])
