"""One restart of a big gang, in place against recreated, on the tests' control plane with fake Nodes (the second
half of issue #50's recovery benchmark; bench/recovery.py is the first, with real processes).

The operator is installed as its chart installs it and serves its status-report endpoint. A job of --pods pods (a
script of one's own that never ends) runs on fake Nodes played by a simulated kubelet
(tests/scaletrain_testing/simulated_kubelet.py): it writes what a kubelet writes for each pod, and each pod of an
in-place gang has the real agent's channel to the operator. Once the job runs, one pod's workload fails (exit code
1); the gang policy restarts the gang. Per restart:

- **seconds**: from the failure until every pod's workload runs again (in place: the operator released the next
  generation to every agent; recreated: every pod of the next gang is Running); in place, also until every agent
  was told to restart, and until every pod had restarted (its kubelet's two writes made);
- **API writes per pod**: every client's writes in the job's namespace (the operator, the Job controller, the
  garbage collector, the scheduler, the simulated kubelet), from the failure until the job shows the restart and
  all is quiet; Events apart;
- **pods created**.

Each run is one strategy, and the runs alternate for --rounds rounds.

    python bench/gang_restart.py [--pods 500] [--rounds 3]   # writes bench/results/gang_restart.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from scaletrain_operator.api import naming
from scaletrain_operator.local.pod_network import free_port
from scaletrain_operator.local.status_reports import serving_pki
from scaletrain_testing.audit import AuditLog, Request
from scaletrain_testing.control_plane import KUBERNETES_VERSION, ControlPlane, given_or_started
from scaletrain_testing.fake_nodes import fake_nodes, placed_on_fake_nodes
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import Team, install_operator, operator_process
from scaletrain_testing.simulated_kubelet import RESTARTED, STARTED, TOLD, SimulatedKubelet
from scaletrain_testing.waiting import wait_until

RESULTS = Path(__file__).resolve().parent / "results"
STRATEGIES = ("InPlace", "Recreate")
PODS_PER_NODE = 250  # a fake Node's pod capacity
QUIET_SECONDS = 2.0  # the restart's requests are all in once the API has had none for this long
NOT_COUNTED = frozenset({"events", "events.events.k8s.io"})
TARGET_SECONDS_RATIO, TARGET_WRITES_PER_POD = 0.3, 2.0
PHASES = {TOLD: "allToldSeconds", RESTARTED: "allRestartedSeconds", STARTED: "seconds"}  # the report's names
MEDIANS = (*PHASES.values(), "writesPerPod", "podsCreated")


def job_spec(strategy: str, pods: int, namespace: str) -> dict[str, Any]:
    return {
        "nodes": pods,
        "command": ["sleep", "infinity"],
        "training": DELETE,
        "restartStrategy": strategy,
        "maxRestarts": 1,
        "restartBackoff": {"initialSeconds": 0},
    } | placed_on_fake_nodes(namespace)


def of_job(started: dict[str, float], name: str) -> dict[str, float]:
    """The entries of `started` (by pod name) of the job `name`'s pods, whichever gang's Job made them."""
    return {pod: at for pod, at in started.items() if pod.startswith(f"{name}-g")}


def restart_once(
    team: Team, kubelet: SimulatedKubelet, audit: AuditLog, name: str, strategy: str, pods: int, timeout: float
) -> dict[str, Any]:
    """Run the job `name`, fail one pod's workload, measure the gang's restart, delete the job."""
    team.submit(name, **job_spec(strategy, pods, team.namespace))
    wait_until(
        lambda: len(of_job(kubelet.moments_in(STARTED, 0), name)) == pods, timeout, f"every pod of {name} running"
    )
    if strategy == "InPlace":
        wait_until(lambda: kubelet.agents_waiting() >= pods, timeout, f"every agent of {name} heard by the operator")
    team.wait_phase(name, "Running", timeout)
    selector = f"{naming.LABEL_JOB_NAME}={name},{naming.COMPLETION_INDEX_LABEL}={pods // 2}"
    (failing,) = team.kube.list("pods", team.namespace, selector)
    mark, began = audit.mark(), time.monotonic()
    kubelet.fail(failing["metadata"]["name"])
    again = f"every pod of {name} running again"
    wait_until(lambda: len(of_job(kubelet.moments_in(STARTED, 1), name)) == pods, timeout, again)
    # In place, each pod is also told to restart, then restarts, before it starts: until the last pod's of each.
    last = {kind: max(of_job(kubelet.moments_in(kind, 1), name).values(), default=None) for kind in PHASES}
    phases = {PHASES[kind]: at - began for kind, at in last.items() if at is not None}
    team.wait_status(name, lambda s: s.get("restarts") == 1 and s.get("phase") == "Running", timeout)
    requests = quiet_requests(audit, mark, team.namespace, timeout)
    team.kube.delete("stj", team.namespace, name)
    wait_until(lambda: not team.kube.list("pods", team.namespace), timeout, f"the pods of {name} gone")
    return phases | restart_report(requests, pods)


def quiet_requests(audit: AuditLog, after: int, namespace: str, timeout: float) -> list[Request]:
    """Every client's counted writes in `namespace` since `after`, once none has come for QUIET_SECONDS (a shared
    control plane may be busy elsewhere: a test's namespace being deleted)."""
    seen = -1

    def quiet() -> list[Request] | None:
        nonlocal seen
        made = audit.requests(None, after=after, settle_seconds=QUIET_SECONDS)
        made = [r for r in made if r.namespace == namespace and counted(r)]
        done, seen = len(made) == seen, len(made)
        return made if done else None

    return wait_until(quiet, timeout, "the API to go quiet", interval_s=0)


def counted(request: Request) -> bool:
    """A write the restart made: Events apart."""
    return request.is_write and request.resource not in NOT_COUNTED


def restart_report(writes: list[Request], pods: int) -> dict[str, Any]:
    by_kind = Counter(f"{r.verb} {r.resource}" for r in writes)
    return {
        "writesPerPod": len(writes) / pods,
        "podsCreated": by_kind.get("create pods", 0),
        "writes": dict(sorted(by_kind.items())),
    }


def measure(control_plane: ControlPlane, pods: int, rounds: int, timeout: float, workdir: Path) -> dict[str, Any]:
    namespace = control_plane.create_namespace(f"gang-{secrets.token_hex(3)}")
    values = {"watchNamespaces": [namespace], "replicaCount": 1, "peering": {"enabled": False}}
    install = install_operator(control_plane, values, f"{namespace}-operator", workdir)
    team = Team(Kube(control_plane.api_client()), namespace)
    tls, port = serving_pki(workdir / "status-reports-tls", "127.0.0.1"), free_port()
    endpoint = (f"--status-reports-port={port}", f"--status-reports-url=https://127.0.0.1:{port}",
                f"--status-reports-tls-dir={tls}", "--agent-image=scaletrain/operator:bench")  # fmt: skip
    flags = ("--liveness-port", "0", "--progress-interval", "60")
    restarts: dict[str, list[dict[str, Any]]] = {strategy: [] for strategy in STRATEGIES}
    with (
        fake_nodes(team.kube, namespace, math.ceil(2 * pods / PODS_PER_NODE), PODS_PER_NODE) as nodes,
        operator_process(install, *flags, *endpoint),
        SimulatedKubelet(team.kube, namespace, nodes, tls / "ca.crt", workdir / "kubelet") as kubelet,
    ):
        for round_ in range(rounds):
            for strategy in STRATEGIES if round_ % 2 == 0 else STRATEGIES[::-1]:
                name = f"{strategy.lower()}-{round_}"
                restarts[strategy].append(
                    restart_once(team, kubelet, control_plane.audit, name, strategy, pods, timeout)
                )
    for made in (namespace, f"{namespace}-operator"):
        control_plane.delete_namespace(made)
    medians = {
        strategy: {key: statistics.median(r[key] for r in runs) for key in MEDIANS if key in runs[0]}
        for strategy, runs in restarts.items()
    }
    return {
        "pods": pods,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "kubernetes": KUBERNETES_VERSION,
        "medians": medians,
        "secondsInPlaceOverRecreate": medians["InPlace"]["seconds"] / medians["Recreate"]["seconds"],
        "targets": {"secondsRatio": TARGET_SECONDS_RATIO, "writesPerPod": TARGET_WRITES_PER_POD, "podsCreated": 0},
        "restarts": restarts,
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"one restart of a {result['pods']}-pod gang, {result['cpus']} CPUs, Kubernetes {result['kubernetes']}, "
          f"medians of {result['rounds']}")  # fmt: skip
    print(f"{'':<10} {'seconds':>9} {'writes/pod':>11} {'pods created':>13}")
    for strategy, median in result["medians"].items():
        print(
            f"{strategy:<10} {median['seconds']:>9.2f} {median['writesPerPod']:>11.2f} {median['podsCreated']:>13.0f}"
        )
    print(f"in place / recreate, seconds: {result['secondsInPlaceOverRecreate']:.2f} "
          f"(target at most {TARGET_SECONDS_RATIO})")  # fmt: skip
    told, restarted, released = (result["medians"]["InPlace"][key] for key in PHASES.values())
    print(f"in place, every pod told to restart after {told:.2f} s, every pod restarted after {restarted:.2f} s, "
          f"every workload released after {released:.2f} s")  # fmt: skip
    for strategy, runs in result["restarts"].items():
        print(f"{strategy} writes, the first run: {runs[0]['writes']}")


def main(argv: list[str] | None = None, control_plane: ControlPlane | None = None) -> dict[str, Any]:
    """Run the benchmark on `control_plane`, or on one started here (the tests pass theirs)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each wait of the run")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gang-restart-") as workdir, given_or_started(control_plane) as plane:
        result = measure(plane, args.pods, args.rounds, args.timeout, Path(workdir))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "gang_restart.json").write_text(json.dumps(result, indent=2))
    print_table(result)
    return result


if __name__ == "__main__":
    main()
