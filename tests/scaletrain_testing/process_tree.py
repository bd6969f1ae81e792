"""Processes as /proc shows them, for tests that check what a run leaves behind (Linux only). Zombies
count as gone: they run nothing, and their parent (or init) reaps them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from scaletrain_operator.local.processes import scan_processes

POLL_INTERVAL_S = 0.02


def live_parents() -> dict[int, int]:
    """Each live (not zombie) process's parent: pid → ppid."""
    parents = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]  # "pid (comm) STATE PPID ..."; comm may hold spaces
        if state != "Z":
            parents[int(proc.name)] = int(ppid)
    return parents


def descendants(root: int) -> set[int]:
    """The live processes below `root`: its children, theirs, and so on (new sessions included)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in live_parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def processes_mentioning(text: str) -> set[int]:
    """The live processes whose command line contains `text` (a path, say)."""
    found = set()
    for pid in live_parents():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.add(pid)
    return found


def survivors(pids: Iterable[int], mentioning: str, timeout_s: float) -> tuple[set[int], float]:
    """Wait up to `timeout_s` for `pids`, and every process whose command line mentions `mentioning`, to be
    gone. Returns those still alive then (none: all gone) and the seconds waited. A measure, not an
    assertion (so not waiting.wait_until): the caller kills what is left before it asserts."""
    started = time.monotonic()
    while True:
        left = (set(pids) & set(live_parents())) | processes_mentioning(mentioning)
        waited = time.monotonic() - started
        if not left or waited >= timeout_s:
            return left, waited
        time.sleep(POLL_INTERVAL_S)


def processes_with_env(entry: str) -> list[int]:
    """The live processes whose environment holds `entry` ("NAME=value")."""
    name, value = entry.split("=", 1)
    return [process.pid for process in scan_processes(name) if process.env_value == value]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
