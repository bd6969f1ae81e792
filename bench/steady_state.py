"""Running jobs at rest: how often the operator writes their status while every job's rank 0 answers its progress,
and what the operator and the API server spend on it.

The control plane is the tests' own (tests/scaletrain_testing/control_plane.py); the operator is installed as its
Helm chart installs it (namespaced, one replica) and reads progress every 15 s, the chart's default (--read-interval).
N jobs of 2 pods run on fake Nodes, their pods made Running by the simulated kubelet
(tests/scaletrain_testing/simulated_kubelet.py). Every rank 0 answers /progress from one server here
(scaletrain_testing.progress_server), whose listen queue holds every job's read at once: an answer reported just
now, promising the next within two minutes. Once every job is Running with its progress in its status, the benchmark
watches for --minutes and reports the operator's status writes per Running job a minute (the API server's audit
log), and the operator's and the API server's CPU seconds.

Each write interval given (--write-intervals: the default 60 s, and 0, every read written) runs in turn, in that
order, each with an operator of its own and jobs of its own.

    python bench/steady_state.py [--jobs 1000] [--minutes 5]     # writes bench/results/steady_state.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scaletrain_testing.control_plane import KUBERNETES_VERSION, ControlPlane, given_or_started
from scaletrain_testing.fake_nodes import fake_nodes, placed_on_fake_nodes
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import QUIET, Team, install_operator, operator_process
from scaletrain_testing.process_tree import cpu_seconds
from scaletrain_testing.progress_server import ProgressServer
from scaletrain_testing.simulated_kubelet import SimulatedKubelet
from scaletrain_testing.waiting import wait_until

RESULTS = Path(__file__).resolve().parent / "results"
NODES = 2  # per job
PODS_PER_NODE = 500
CLIENTS = 10  # client threads creating the jobs
STATUS_WRITE = ("patch", "scaletrainjobs.scaletrain.io/status")
PROMISE_SECONDS = 120  # rank 0's staleAfter, ahead of each answer
TARGET_WRITES_PER_JOB_MINUTE = 1.0  # at the defaults (issue 51)


def api_server_pid(control_plane: ControlPlane) -> int:
    """The API server's pid, as the control plane recorded it (work_dir/pids)."""
    records = [line.split() for line in (control_plane.work_dir / "pids").read_text().splitlines()]
    return int(next(pid for name, pid in reversed(records) if name == "kube-apiserver"))


def job_spec(namespace: str) -> dict[str, Any]:
    return {"nodes": NODES, "command": ["sleep", "infinity"], "training": DELETE} | placed_on_fake_nodes(namespace)


def all_running_with_progress(team: Team, jobs: int) -> bool:
    listed = team.kube.list("stj", team.namespace)
    statuses = [stj.get("status") or {} for stj in listed]
    return len(listed) == jobs and all(s.get("phase") == "Running" and s.get("progress") for s in statuses)


def steady(
    control_plane: ControlPlane,
    jobs: int,
    minutes: float,
    read_interval: float,
    write_interval: float,
    timeout: float,
    workdir: Path,
) -> dict[str, Any]:
    """`jobs` Running jobs under an operator reading progress every `read_interval` seconds and writing it every
    `write_interval`, watched for `minutes`."""
    workdir.mkdir(parents=True)
    namespace = control_plane.create_namespace(f"steady-{secrets.token_hex(3)}")
    values = {"watchNamespaces": [namespace], "replicaCount": 1, "peering": {"enabled": False}}
    install = install_operator(control_plane, values, f"{namespace}-operator", workdir)
    team, audit = Team(Kube(control_plane.api_client()), namespace), control_plane.audit
    server = ProgressServer(None)
    server.healthy(PROMISE_SECONDS)
    flags = (*QUIET, "--progress-interval", str(read_interval), "--progress-write-interval", str(write_interval))
    env = {"SCALETRAIN_OPERATOR_PROGRESS_URL": f"http://127.0.0.1:{server.port}/progress"}  # every job's rank 0
    nodes_needed = math.ceil(jobs * NODES / PODS_PER_NODE)
    try:
        with (
            server,
            fake_nodes(team.kube, namespace, nodes_needed, PODS_PER_NODE) as nodes,
            operator_process(install, *flags, env=env) as operator,
            SimulatedKubelet(team.kube, namespace, nodes, workdir / "no-ca.crt", workdir / "kubelet"),
        ):
            with ThreadPoolExecutor(CLIENTS) as clients:
                list(clients.map(lambda i: team.submit(f"job-{i:04d}", **job_spec(namespace)), range(jobs)))
            wait_until(lambda: all_running_with_progress(team, jobs), timeout, "every job Running with its progress",
                       interval_s=5)  # fmt: skip
            mark, apiserver = audit.mark(), api_server_pid(control_plane)
            operator_cpu, apiserver_cpu, began = cpu_seconds(operator.pid), cpu_seconds(apiserver), time.monotonic()
            time.sleep(minutes * 60)
            operator_cpu = cpu_seconds(operator.pid) - operator_cpu
            apiserver_cpu = cpu_seconds(apiserver) - apiserver_cpu
            watched = time.monotonic() - began
            requests = audit.requests(install.user, after=mark)
            writes = sum((r.verb, r.resource) == STATUS_WRITE for r in requests)
            reads = server.answered
            for stj in team.kube.list("stj", namespace):
                team.kube.delete("stj", namespace, stj["metadata"]["name"])
            wait_until(lambda: not team.kube.list("pods", namespace), timeout, "the jobs' pods gone", interval_s=2)
    finally:
        for made in (namespace, f"{namespace}-operator"):
            control_plane.delete_namespace(made)
    return {
        "writeIntervalSeconds": write_interval,
        "seconds": watched,
        "statusWritesPerJobMinute": writes / jobs / (watched / 60),
        "operatorRequestsPerJobMinute": len(requests) / jobs / (watched / 60),
        "progressReads": reads,
        "operatorCpuSecondsPerMinute": operator_cpu / (watched / 60),
        "apiServerCpuSecondsPerMinute": apiserver_cpu / (watched / 60),
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"{result['jobs']} Running jobs at rest, {result['cpus']} CPUs, Kubernetes {result['kubernetes']}, "
          f"progress read every {result['readIntervalSeconds']:g} s, watched {result['minutes']:g} min")  # fmt: skip
    print(
        f"{'write interval':>15} {'status writes/job/min':>22} {'operator CPU s/min':>19} {'API server CPU s/min':>21}"
    )
    for run in result["runs"]:
        print(f"{run['writeIntervalSeconds']:>13g} s {run['statusWritesPerJobMinute']:>22.2f} "
              f"{run['operatorCpuSecondsPerMinute']:>19.2f} {run['apiServerCpuSecondsPerMinute']:>21.2f}")  # fmt: skip
    print(f"target at the defaults: at most {TARGET_WRITES_PER_JOB_MINUTE} status write per Running job a minute")


def main(argv: list[str] | None = None, control_plane: ControlPlane | None = None) -> dict[str, Any]:
    """Run the benchmark on `control_plane`, or on one started here (the tests pass theirs)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--read-interval", type=float, default=15.0, help="the operator's --progress-interval")
    parser.add_argument("--write-intervals", type=float, nargs="+", default=[60.0, 0.0])
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for each wait of the run")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="steady-state-") as workdir, given_or_started(control_plane) as plane:
        runs = [
            steady(
                plane, args.jobs, args.minutes, args.read_interval, interval, args.timeout, Path(workdir) / str(index)
            )
            for index, interval in enumerate(args.write_intervals)
        ]
    result = {"jobs": args.jobs, "minutes": args.minutes, "readIntervalSeconds": args.read_interval,
              "cpus": os.cpu_count(), "kubernetes": KUBERNETES_VERSION,
              "target": {"statusWritesPerJobMinute": TARGET_WRITES_PER_JOB_MINUTE}, "runs": runs}  # fmt: skip
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "steady_state.json").write_text(json.dumps(result, indent=2))
    print_table(result)
    return result


if __name__ == "__main__":
    main()
