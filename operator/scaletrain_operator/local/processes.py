"""A container's processes, found as a container runtime finds them in the container's cgroup.

torchrun starts its workers in sessions of their own, so a process group misses them. Every process
of a local container carries a marker in its environment (whatever it starts inherits it), and
in a pod network namespace /proc/PID/ns/net names the pod's namespace too, which even a process
that cleared its environment cannot leave. One scan of /proc answers both (Linux only).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MARKER_ENV = "SCALETRAIN_LOCAL_CONTAINER"  # "POD_MARKER/CONTAINER" in every process of a local container


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    env_value: str | None  # its value of the variable scanned for (MARKER_ENV by default)
    netns_inode: int | None  # its network namespace

    def of_pod(self, pod_marker: str, netns_inode: int | None) -> bool:
        in_namespace = netns_inode is not None and self.netns_inode == netns_inode
        return in_namespace or (self.env_value or "").startswith(pod_marker + "/")


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


def processes_with_env(entry: str) -> list[int]:
    """The live processes whose environment holds `entry` ("NAME=value")."""
    name, value = entry.split("=", 1)
    return [process.pid for process in scan_processes(name) if process.env_value == value]


def signal_processes(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def exit_code(returncode: int) -> int:
    """A container's exit code: a process killed by signal N exits 128 + N, as the kubelet reports."""
    return 128 - returncode if returncode < 0 else returncode


def _netns_inode(proc: Path) -> int | None:
    try:
        link = os.readlink(proc / "ns" / "net")  # "net:[4026531840]"
    except OSError:
        return None
    return int(link[link.index("[") + 1 : -1])
