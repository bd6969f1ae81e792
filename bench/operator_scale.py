"""Operator at scale on the real control plane: N ScaleTrainJobs created at once, then one pod of each fails.

The control plane is the tests' own (tests/scaletrain_testing/control_plane.py: etcd, kube-apiserver, the Job
controller, the scheduler); the operator is installed as its Helm chart installs it (namespaced, one
replica, its ServiceAccount and RBAC) and runs as its own process (`scaletrain-operator`). The jobs'
pods are placed on fake Nodes of their own (Ready, tainted for the benchmark's jobs alone), which no
kubelet runs: the pods are bound and stay Pending.

Two phases, each reported as a table and JSON:
- creation: seconds from each job's creation until its Service and Job exist (p50, p95), until every
  job is Pending with both pods counted;
- restart: a kubelet's report that one pod of each gang failed (pods/status, exit code 1, from several
  client threads), and seconds from that report until the gang's next Job exists; then every job must
  show exactly one restart.
For each phase: the API requests the operator made per job by verb (the API server's audit log, the
operator's user only, until it has been quiet for a second), its CPU seconds, and its resident memory.

    python bench/operator_scale.py [--jobs 100]     # writes bench/results/operator_scale.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import statistics
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from scaletrain_operator.api import naming
from scaletrain_testing.audit import AuditLog, Request
from scaletrain_testing.control_plane import KUBERNETES_VERSION, ControlPlane, free_ports, given_or_started
from scaletrain_testing.fake_nodes import fake_nodes, placed_on_fake_nodes
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import Team, install_operator, operator_process

RESULTS = Path(__file__).resolve().parent / "results"
NODES = 2  # per job
FLAGS = ("--liveness-port", "0", "--progress-interval", "60")
WATCHED = ("scaletrainjobs.scaletrain.io", "jobs.batch", "pods")  # kopf lists each before it watches it
CLIENTS = 10  # client threads creating the jobs, and failing their pods, "at once"
QUIET_SECONDS = 1.0  # the operator is done once it has made no request for this long
READS = frozenset({"get", "list", "watch"})
PODS_PER_NODE = 500  # a fake Node's pod capacity; the Nodes hold two generations of every gang
FAILED_EXIT_CODE = 1  # a rank's failure that the gang policy answers with a restart


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reconciles(metrics_port: int) -> tuple[float, float]:
    """How many reconciles the operator ran, and their seconds in all (its Prometheus histogram)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    values = dict(line.rsplit(" ", 1) for line in lines if line.startswith("scaletrain_reconcile_seconds_"))
    return float(values["scaletrain_reconcile_seconds_count"]), float(values["scaletrain_reconcile_seconds_sum"])


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


class Watched:
    """What happens in the benchmark's namespace, from watch streams, without polling every job (a list of
    1000 jobs is a load on the shared API server): when each Service and Job first appeared (the moment the
    API server committed it, give or take the watch's latency), and each ScaleTrainJob's latest status."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self.first_seen: dict[str, float] = {}  # "KIND/NAME" of the Services and Jobs
        self.statuses: dict[str, dict[str, Any]] = {}  # by ScaleTrainJob name
        self._stop = threading.Event()
        stjs = (naming.GROUP, naming.VERSION, namespace, naming.PLURAL)
        self._lists = {  # a kind's list call, and its arguments
            "Job": (client.BatchV1Api(api).list_namespaced_job, (namespace,)),
            "Service": (client.CoreV1Api(api).list_namespaced_service, (namespace,)),
            naming.KIND: (client.CustomObjectsApi(api).list_namespaced_custom_object, stjs),
        }
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Watched:
        """Each watch starts from a list taken here, before anything is created: an object created before
        its watch started would come as part of the list, not as an event."""
        for kind, (list_call, args) in self._lists.items():
            listed = json.loads(list_call(*args, _preload_content=False).data)
            thread = threading.Thread(target=self._watch, args=(kind, listed["metadata"]["resourceVersion"]))
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _watch(self, kind: str, version: str) -> None:
        """Short server-side watches, resumed from the last resourceVersion, so that stopping waits at most
        one of them."""
        list_call, args = self._lists[kind]
        while not self._stop.is_set():
            for event in watch.Watch().stream(list_call, *args, resource_version=version, timeout_seconds=1):
                obj = event["raw_object"]
                name, version = obj["metadata"]["name"], obj["metadata"]["resourceVersion"]
                if kind != naming.KIND and event["type"] == "ADDED":
                    self.first_seen.setdefault(f"{kind}/{name}", time.monotonic())
                elif kind == naming.KIND and event["type"] in ("ADDED", "MODIFIED"):
                    self.statuses[name] = obj.get("status") or {}

    def job_at(self, name: str, generation: int) -> float | None:
        """When the Job of a ScaleTrainJob's gang `generation` appeared."""
        return self.first_seen.get(f"Job/{naming.child_job_name(name, generation)}")

    def children_at(self, name: str) -> float | None:
        """When both of a ScaleTrainJob's children existed: its Service and its first Job."""
        service = self.first_seen.get(f"Service/{name}")
        job = self.job_at(name, 0)
        return max(service, job) if service is not None and job is not None else None

    def settled(self, names: list[str]) -> bool:
        """Every job Pending with all its pods counted: the operator has seen each job's whole gang."""
        statuses = [self.statuses.get(name, {}) for name in names]
        return all(s.get("phase") == "Pending" and (s.get("nodes") or {}).get("pending") == NODES for s in statuses)

    def restarted(self, names: list[str]) -> bool:
        return all(restarted_once(name, self.statuses.get(name, {})) for name in names)


def listed_all(audit: AuditLog, user: str, since: int) -> bool:
    """Whether `user` has listed every kind the operator watches (kopf retries a list refused with 429)."""
    requests = audit.requests(user, after=since, settle_seconds=0)
    return set(WATCHED) <= {r.resource for r in requests if r.verb == "list" and r.code == 200}


def bench_spec(namespace: str) -> dict[str, Any]:
    """What each job's spec adds: its gang of NODES pods, on the namespace's fake Nodes."""
    return {"nodes": NODES} | placed_on_fake_nodes(namespace)


def at_once(action: Callable[[str], object], names: list[str]) -> dict[str, float]:
    """`action(name)` for every name from CLIENTS threads; when each call returned (its write was committed)."""

    def timed(name: str) -> tuple[str, float]:
        action(name)
        return name, time.monotonic()

    with ThreadPoolExecutor(CLIENTS) as pool:
        return dict(pool.map(timed, names))


def not_restarted_once(team: Team, names: list[str]) -> dict[str, dict[str, Any]]:
    """The jobs whose status, as listed now, does not show exactly one restart into the next gang, by name."""
    statuses = {job["metadata"]["name"]: job.get("status") or {} for job in team.kube.list("stj", team.namespace)}
    return {name: status for name in names if not restarted_once(name, status := statuses.get(name, {}))}


def restarted_once(name: str, status: dict[str, Any]) -> bool:
    """One restart counted, the next gang's Job current, and the job waiting for that gang's pods."""
    return (
        status.get("restarts") == 1
        and status.get("currentJob") == naming.child_job_name(name, 1)
        and status.get("phase") in ("Restarting", "Pending")
    )


def first_pods(team: Team) -> dict[str, dict[str, Any]]:
    """The pod of completion index 0 of each job's first gang, by job name (one list of the namespace)."""
    selector = f"{naming.LABEL_GENERATION}=0,{naming.COMPLETION_INDEX_LABEL}=0"
    pods = team.kube.list("pods", team.namespace, selector)
    return {pod["metadata"]["labels"][naming.LABEL_JOB_NAME]: pod for pod in pods}


def requests_once_quiet(audit: AuditLog, user: str, after: int, timeout: float) -> list[Request]:
    """The operator's requests since `after`, once it has made none for QUIET_SECONDS."""
    seen = -1

    def quiet() -> list[Request] | None:
        nonlocal seen
        made = audit.requests(user, after=after, settle_seconds=QUIET_SECONDS)
        done, seen = len(made) == seen, len(made)
        return made if done else None

    return wait_for(quiet, "the operator to go quiet", timeout, interval=0)


class Probe:
    """What is measured of the operator in each phase: its requests (from the audit log), its reconciles
    (its metrics), its CPU time and memory, and the machine's load average when the phase began and ended
    (the control plane, the operator and the benchmark share the CPUs)."""

    def __init__(self, audit: AuditLog, user: str, pid: int, metrics_port: int, timeout: float):
        self.audit, self.user, self.pid, self.metrics_port, self.timeout = audit, user, pid, metrics_port, timeout

    def phase(self, run: Callable[[], tuple[dict[str, float], dict[str, float]]]) -> dict[str, Any]:
        """Run a phase: `run()` returns when each job's step began and when it was done, by job name. The
        phase ends once the operator has been quiet for QUIET_SECONDS."""
        mark, cpu, load = self.audit.mark(), cpu_seconds(self.pid), os.getloadavg()[0]
        runs, seconds = reconciles(self.metrics_port)
        began_at, done_at = run()
        requests = requests_once_quiet(self.audit, self.user, mark, self.timeout)
        runs_after, seconds_after = reconciles(self.metrics_port)
        return phase_report(began_at, done_at, requests) | {
            "reconcilesPerJob": (runs_after - runs) / len(began_at),
            "reconcileSecondsMean": (seconds_after - seconds) / max(runs_after - runs, 1),
            "operatorCpuSeconds": cpu_seconds(self.pid) - cpu,
            "operatorRssBytes": rss_bytes(self.pid),
            "loadAverage1m": {"start": load, "end": os.getloadavg()[0]},
        }


def create_jobs(team: Team, names: list[str], seen: Watched, timeout: float) -> tuple[dict, dict]:
    """Create the jobs at once; each is done when its Service and Job exist. Returns once every job is
    Pending with both pods counted."""
    spec = bench_spec(team.namespace)
    created_at = at_once(lambda name: team.submit(name, **spec), names)
    wait_for(lambda: all(seen.children_at(n) for n in names), "every job's children", timeout)
    ready_at = {name: seen.children_at(name) for name in names}
    wait_for(lambda: seen.settled(names), "every job Pending with its pods", timeout)
    return created_at, ready_at


def fail_one_pod_each(team: Team, names: list[str], seen: Watched, timeout: float) -> tuple[dict, dict]:
    """Report one pod of each gang Failed, at once; each job is done when its next gang's Job exists.
    Returns once every job's status shows the restart."""
    pods = first_pods(team)
    failed_at = at_once(lambda name: team.fail_pod(pods[name], FAILED_EXIT_CODE), names)
    wait_for(lambda: all(seen.job_at(n, 1) for n in names), "every gang's next Job", timeout)
    restarted_at = {name: seen.job_at(name, 1) for name in names}
    wait_for(lambda: seen.restarted(names), "every job to show one restart", timeout)
    return failed_at, restarted_at


def measure(control_plane: ControlPlane, jobs: int, timeout: float, workdir: Path) -> dict[str, Any]:
    namespace = control_plane.create_namespace(f"bench-{secrets.token_hex(3)}")
    values = {"watchNamespaces": [namespace], "replicaCount": 1, "peering": {"enabled": False}}
    install = install_operator(control_plane, values, f"{namespace}-operator", workdir)  # the release's namespace
    team = Team(Kube(control_plane.api_client()), namespace)
    audit = control_plane.audit
    names = [f"job-{index:04d}" for index in range(jobs)]
    started = audit.mark()
    with fake_nodes(team.kube, namespace, math.ceil(2 * jobs * NODES / PODS_PER_NODE), PODS_PER_NODE):
        (metrics_port,) = free_ports(1)
        with operator_process(install, *FLAGS, "--metrics-port", str(metrics_port)) as operator:
            wait_for(lambda: listed_all(audit, install.user, started), "the operator to list what it watches", timeout)
            time.sleep(1.0)  # its watches start right after the lists
            idle_rss = rss_bytes(operator.pid)
            probe = Probe(audit, install.user, operator.pid, metrics_port, timeout)
            with Watched(team.kube.api, namespace) as seen:
                creation = probe.phase(lambda: create_jobs(team, names, seen, timeout))
                restart = probe.phase(lambda: fail_one_pod_each(team, names, seen, timeout))
            wrong = not_restarted_once(team, names)  # again, now that the operator is quiet: none may move on
        delete_all(team, timeout)
    for made in (namespace, f"{namespace}-operator"):
        control_plane.delete_namespace(made)
    if wrong:
        raise AssertionError(f"{len(wrong)} jobs do not show exactly one restart, e.g. {next(iter(wrong.items()))}")
    return {
        "jobs": jobs,
        "cpus": os.cpu_count(),
        "kubernetes": KUBERNETES_VERSION,
        "operatorRssBytesIdle": idle_rss,
        "creation": creation,
        "restart": restart,
    }


def delete_all(team: Team, timeout: float) -> None:
    """The jobs go before their namespace: another operator watching every namespace (a test's, on a
    shared control plane) would otherwise see their gangs lose their pods to the namespace's deletion."""
    for stj in team.kube.list("stj", team.namespace):
        team.kube.delete("stj", team.namespace, stj["metadata"]["name"])
    wait_for(lambda: team.kube.list("stj", team.namespace) == [], "the jobs to be deleted", timeout)


def phase_report(began_at: dict[str, float], done_at: dict[str, float], requests: list[Request]) -> dict[str, Any]:
    """Seconds from each job's `began_at` to its `done_at`, and the phase's requests per job."""
    names = list(began_at)
    latencies = [done_at[name] - began_at[name] for name in names]
    by_kind = Counter(f"{r.verb} {r.resource}" for r in requests)
    by_verb = Counter(r.verb for r in requests)
    reads = sum(n for verb, n in by_verb.items() if verb in READS)
    return {
        "seconds": {
            "p50": percentile(latencies, 0.5),
            "p95": percentile(latencies, 0.95),
            "max": max(latencies),
            "mean": statistics.fmean(latencies),
        },
        "clientsSeconds": max(began_at.values()) - min(began_at.values()),
        "apiRequestsPerJob": len(requests) / len(names),
        "readsPerJob": reads / len(names),
        "writesPerJob": sum(r.is_write for r in requests) / len(names),
        "apiRequestsPerJobByVerb": {verb: n / len(names) for verb, n in sorted(by_verb.items())},
        "apiRequestsByKind": dict(sorted(by_kind.items())),
    }


PHASES = {
    "creation": "children exist after creation",
    "restart": "next Job exists after a pod failed",
}


def print_table(result: dict[str, Any]) -> None:
    jobs = result["jobs"]
    print(f"{jobs} ScaleTrainJobs, {result['cpus']} CPUs, Kubernetes {result['kubernetes']}")
    print(f"{'operator RSS idle':<36} {result['operatorRssBytesIdle'] / 2**20:.0f} MiB")
    for phase, what in PHASES.items():
        measured = result[phase]
        latency, load = measured["seconds"], measured["loadAverage1m"]
        print(f"{phase}: {what:<28} p50 {latency['p50']:.2f} s, p95 {latency['p95']:.2f} s, max {latency['max']:.2f} s")
        print(f"    {'the clients wrote for':<32} {measured['clientsSeconds']:.1f} s ({CLIENTS} threads)")
        print(
            f"    {'API requests per job':<32} {measured['apiRequestsPerJob']:.1f} "
            f"({measured['readsPerJob']:.1f} reads, {measured['writesPerJob']:.1f} writes)"
        )
        for kind, n in measured["apiRequestsByKind"].items():
            print(f"        {kind:<48} {n / jobs:6.2f} per job")
        print(
            f"    {'reconciles per job':<32} {measured['reconcilesPerJob']:.1f}, "
            f"{measured['reconcileSecondsMean'] * 1000:.0f} ms each on average"
        )
        print(f"    {'operator CPU':<32} {measured['operatorCpuSeconds']:.1f} s")
        print(f"    {'operator RSS after':<32} {measured['operatorRssBytes'] / 2**20:.0f} MiB")
        print(f"    {'load average (1 min)':<32} {load['start']:.1f} at the start, {load['end']:.1f} at the end")


def main(argv: list[str] | None = None, control_plane: ControlPlane | None = None) -> dict[str, Any]:
    """Run the benchmark on `control_plane`, or on one started here (the tests pass theirs)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each wait of the run")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="operator-scale-") as workdir, given_or_started(control_plane) as plane:
        result = measure(plane, args.jobs, args.timeout, Path(workdir))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "operator_scale.json").write_text(json.dumps(result, indent=2))
    print_table(result)
    return result


if __name__ == "__main__":
    main()
