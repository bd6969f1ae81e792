"""What a cluster with a real node can leave on the host: processes, mounts, network namespaces, links
(the bridge, veths) and iptables rules. A snapshot before `up` and one after `down` must match."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path

# The processes a cluster starts, by executable name; a pod's own processes are found by their cgroup.
COMPONENTS = frozenset(
    {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kube-proxy",
        "coredns",
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "pause",
    }
)
_COUNTERS = re.compile(r"\[\d+:\d+\]")


@dataclass(frozen=True)
class Residue:
    processes: frozenset[str]
    mounts: frozenset[str]
    network_namespaces: frozenset[str]
    links: frozenset[str]
    iptables_rules: frozenset[str]

    def new_since(self, before: Residue) -> dict[str, list[str]]:
        """What this snapshot has that `before` had not, by kind; empty when nothing was left."""
        found = {}
        for field in fields(self):
            extra = sorted(getattr(self, field.name) - getattr(before, field.name))
            if extra:
                found[field.name] = extra
        return found


def snapshot() -> Residue:
    return Residue(
        processes=frozenset(_component_processes()),
        mounts=frozenset(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()),
        network_namespaces=frozenset(p.name for p in Path("/run/netns").glob("*")),
        links=frozenset(re.sub(r"@.*", "", line.split(": ")[1]) for line in _lines("ip", "-o", "link", "show")),
        iptables_rules=frozenset(rule for tool in ("iptables-save", "ip6tables-save") for rule in _rules(tool)),
    )


def _rules(tool: str) -> list[str]:
    """The rules and the chains of our own naming, by table: not the tables and built-in chains that
    merely listing them (nftables) can create."""
    rules, table = [], ""
    for line in _lines(tool):
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith("-A ") or (line.startswith(":") and line.split()[1] == "-"):
            rules.append(f"{tool} {table}: {_COUNTERS.sub('', line).strip()}")
    return rules


def _component_processes() -> list[str]:
    found = []
    for process in Path("/proc").glob("[0-9]*"):
        try:
            name = os.readlink(process / "exe").rsplit("/", 1)[-1]
            cgroups = (process / "cgroup").read_text()
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        if name in COMPONENTS or "/kubepods" in cgroups:
            found.append(f"{process.name} {name}")
    return found


def _lines(*command: str) -> list[str]:
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
