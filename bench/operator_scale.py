"""Operator at scale on the real control plane: 100 ScaleTrainJobs created at once.

The control plane is the tests' own (tests/scaletrain_testing/control_plane.py: etcd, kube-apiserver, the Job
controller, the scheduler); the operator is installed as its Helm chart installs it (namespaced, one
replica, its ServiceAccount and RBAC) and runs as its own process (`scaletrain-operator`). Reports, as
a table and JSON: seconds from each job's creation until its Service and Job exist (p50, p95), the API
requests the operator made per job by verb (the API server's audit log, the operator's user only,
from the first create until the operator has been quiet for a second), and the operator's resident
memory. No kubelet runs, so the pods stay Pending; every job settles as Pending with both pods.

    python bench/operator_scale.py [--jobs 100]     # writes bench/results/operator_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from scaletrain_testing.audit import AuditLog, Request
from scaletrain_testing.control_plane import KUBERNETES_VERSION, ControlPlane
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import Team, install_operator, operator_process

RESULTS = Path(__file__).resolve().parent / "results"
NODES = 2  # per job
FLAGS = ("--metrics-port", "0", "--liveness-port", "0", "--progress-interval", "60")
WATCHED = ("scaletrainjobs.scaletrain.io", "jobs.batch", "pods")  # kopf lists each before it watches it
CREATORS = 10  # client threads creating the jobs "at once"
QUIET_SECONDS = 1.0  # the operator is done once it has made no request for this long
READS = frozenset({"get", "list", "watch"})


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def wait_for(condition, what: str, timeout: float, interval: float = 0.1):
    """The first truthy value of `condition()`; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)
    return value


class FirstSeen:
    """When each object of a kind first appeared in a namespace, from a watch stream: the moment the API
    server committed it, give or take the watch's latency, without polling every job."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self.at: dict[str, float] = {}
        self._stop = threading.Event()
        self._namespace = namespace
        self._lists = (client.BatchV1Api(api).list_namespaced_job, client.CoreV1Api(api).list_namespaced_service)
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> FirstSeen:
        """Each watch starts from a list taken here, before anything is created: an object created before
        its watch started would come as part of the list, not as an event."""
        for list_call in self._lists:
            version = list_call(self._namespace).metadata.resource_version
            thread = threading.Thread(target=self._watch, args=(list_call, version), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _watch(self, list_call, version: str) -> None:
        """Short server-side watches, resumed from the last resourceVersion, so that stopping waits at most
        one of them."""
        while not self._stop.is_set():
            events = watch.Watch().stream(list_call, self._namespace, resource_version=version, timeout_seconds=1)
            for event in events:
                metadata = event["raw_object"]["metadata"]
                version = metadata["resourceVersion"]
                if event["type"] == "ADDED":
                    self.at.setdefault(f"{list_call.__name__}/{metadata['name']}", time.monotonic())

    def children_at(self, name: str) -> float | None:
        """When both of a ScaleTrainJob's children existed: its Service and its first Job."""
        service = self.at.get(f"list_namespaced_service/{name}")
        job = self.at.get(f"list_namespaced_job/{name}-g0")
        return max(service, job) if service is not None and job is not None else None


def listed_all(audit: AuditLog, user: str, since: int) -> bool:
    """Whether `user` has listed every kind the operator watches (kopf retries a list refused with 429)."""
    requests = audit.requests(user, after=since, settle_seconds=0)
    return set(WATCHED) <= {r.resource for r in requests if r.verb == "list" and r.code == 200}


def create_all(team: Team, names: list[str]) -> dict[str, float]:
    """Create the jobs concurrently; when each create returned (the job existed from then on)."""

    def create(name: str) -> tuple[str, float]:
        team.submit(name, nodes=NODES)
        return name, time.monotonic()

    with ThreadPoolExecutor(CREATORS) as pool:
        return dict(pool.map(create, names))


def all_settled(team: Team, count: int) -> bool:
    """Every job Pending with all its pods counted: the operator has seen each job's whole gang."""
    jobs = team.kube.list("stj", team.namespace)
    statuses = [job.get("status") or {} for job in jobs]
    return len(jobs) == count and all(
        status.get("phase") == "Pending" and (status.get("nodes") or {}).get("pending") == NODES for status in statuses
    )


def requests_once_quiet(audit: AuditLog, user: str, after: int, timeout: float) -> list[Request]:
    """The operator's requests since `after`, once it has made none for QUIET_SECONDS."""
    seen = -1

    def quiet() -> list[Request] | None:
        nonlocal seen
        made = audit.requests(user, after=after, settle_seconds=QUIET_SECONDS)
        done, seen = len(made) == seen, len(made)
        return made if done else None

    return wait_for(quiet, "the operator to go quiet", timeout, interval=0)


def measure(control_plane: ControlPlane, jobs: int, timeout: float, workdir: Path) -> dict[str, Any]:
    namespace = control_plane.create_namespace(f"bench-{secrets.token_hex(3)}")
    values = {"watchNamespaces": [namespace], "replicaCount": 1, "peering": {"enabled": False}}
    install = install_operator(control_plane, values, f"{namespace}-operator", workdir)  # the release's namespace
    team = Team(Kube(control_plane.api_client()), namespace)
    audit = control_plane.audit
    names = [f"job-{index:03d}" for index in range(jobs)]
    started = audit.mark()
    with operator_process(install, *FLAGS) as operator:
        wait_for(lambda: listed_all(audit, install.user, started), "the operator to list what it watches", timeout)
        time.sleep(1.0)  # its watches start right after the lists
        idle_rss = rss_bytes(operator.pid)
        with FirstSeen(team.kube.api, namespace) as seen:
            mark = audit.mark()
            created_at = create_all(team, names)
            wait_for(lambda: all(seen.children_at(n) for n in names), "every job's children", timeout)
            ready_at = {name: seen.children_at(name) for name in names}
        wait_for(lambda: all_settled(team, jobs), "every job Pending with its pods", timeout, interval=0.5)
        requests = requests_once_quiet(audit, install.user, mark, timeout)
        busy_rss = rss_bytes(operator.pid)
    delete_all(team, timeout)
    for created in (namespace, f"{namespace}-operator"):
        control_plane.delete_namespace(created)
    return report(names, created_at, ready_at, requests, idle_rss, busy_rss)


def delete_all(team: Team, timeout: float) -> None:
    """The jobs go before their namespace: another operator watching every namespace (a test's, on a
    shared control plane) would otherwise see their gangs lose their pods to the namespace's deletion."""
    for stj in team.kube.list("stj", team.namespace):
        team.kube.delete("stj", team.namespace, stj["metadata"]["name"])
    wait_for(lambda: team.kube.list("stj", team.namespace) == [], "the jobs to be deleted", timeout)


def report(names, created_at, ready_at, requests: list[Request], idle_rss: int, busy_rss: int) -> dict[str, Any]:
    latencies = [ready_at[name] - created_at[name] for name in names]
    by_kind = Counter(f"{r.verb} {r.resource}" for r in requests)
    by_verb = Counter(r.verb for r in requests)
    reads = sum(n for verb, n in by_verb.items() if verb in READS)
    return {
        "jobs": len(names),
        "cpus": os.cpu_count(),
        "kubernetes": KUBERNETES_VERSION,
        "secondsUntilChildrenExist": {
            "p50": percentile(latencies, 0.5),
            "p95": percentile(latencies, 0.95),
            "max": max(latencies),
            "mean": statistics.fmean(latencies),
        },
        "apiRequestsPerJob": len(requests) / len(names),
        "readsPerJob": reads / len(names),
        "writesPerJob": sum(r.is_write for r in requests) / len(names),
        "apiRequestsPerJobByVerb": {verb: n / len(names) for verb, n in sorted(by_verb.items())},
        "apiRequestsByKind": dict(sorted(by_kind.items())),
        "operatorRssBytes": {"idle": idle_rss, "after": busy_rss},
    }


def print_table(result: dict[str, Any]) -> None:
    jobs, latency = result["jobs"], result["secondsUntilChildrenExist"]
    print(f"{jobs} ScaleTrainJobs created at once, {result['cpus']} CPUs, Kubernetes {result['kubernetes']}")
    print(f"{'children exist after':<28} p50 {latency['p50']:.2f} s, p95 {latency['p95']:.2f} s")
    print(
        f"{'API requests per job':<28} {result['apiRequestsPerJob']:.1f} "
        f"({result['readsPerJob']:.1f} reads, {result['writesPerJob']:.1f} writes)"
    )
    for kind, n in result["apiRequestsByKind"].items():
        print(f"    {kind:<52} {n / jobs:6.2f} per job")
    rss = result["operatorRssBytes"]
    print(f"{'operator RSS':<28} {rss['idle'] / 2**20:.0f} MiB idle, {rss['after'] / 2**20:.0f} MiB after")


def main(argv: list[str] | None = None, control_plane: ControlPlane | None = None) -> dict[str, Any]:
    """Run the benchmark on `control_plane`, or on one started here (the tests pass theirs)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for each phase of the run")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="operator-scale-") as workdir:
        if control_plane is None:
            with ControlPlane() as started:
                result = measure(started, args.jobs, args.timeout, Path(workdir))
        else:
            result = measure(control_plane, args.jobs, args.timeout, Path(workdir))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "operator_scale.json").write_text(json.dumps(result, indent=2))
    print_table(result)
    return result


if __name__ == "__main__":
    main()
