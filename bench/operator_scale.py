"""Operator at scale: 100 ScaleTrainJobs created at once against the emulated API server.

The operator runs as its own process (`scaletrain-operator`), as in a cluster. Reports, as a table
and JSON: seconds from creation until each job's Service and Job exist (p50, p95), API requests the
operator made per job (counted at the emulator), and the operator's resident memory.

    python bench/operator_scale.py [--jobs 100]     # writes bench/results/operator_scale.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # for tests/support, the harness the tests and benchmarks share

from support.emulator import EmulatedCluster  # noqa: E402
from support.operator_harness import operator_process  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NAMESPACE = "bench"


def job_document(name: str) -> dict:
    return {
        "apiVersion": "scaletrain.io/v1alpha1",
        "kind": "ScaleTrainJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"image": "trainer:1", "nodes": 2, "training": {"globalBatchSize": 16, "microBatchSize": 4}},
    }


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def emulator_latency_ms(cluster: EmulatedCluster, name: str, samples: int = 20) -> float:
    """The emulator's own time for one status patch over HTTP, with every object in place: the yardstick
    for the latencies above (the emulator is pure Python and shares the CPUs with the operator)."""
    from kubernetes import client

    api = client.CustomObjectsApi(cluster.api_client())
    started = time.perf_counter()
    for index in range(samples):
        body = {"status": {"message": f"latency probe {index}"}}
        api.patch_namespaced_custom_object_status("scaletrain.io", "v1alpha1", NAMESPACE, "scaletrainjobs", name, body)
    return (time.perf_counter() - started) / samples * 1000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()

    flags = ("-n", NAMESPACE, "--metrics-port", "0", "--liveness-port", "0", "--progress-interval", "60")
    with EmulatedCluster(namespaces=(NAMESPACE,)) as cluster, operator_process(cluster, *flags) as operator:
        cluster.wait_until(lambda: cluster.request_counts()[("watch", "scaletrainjobs.scaletrain.io")], 30)
        time.sleep(1.0)
        idle_rss = rss_bytes(operator.pid)
        cluster.reset_request_counts()
        names = [f"job-{i:03d}" for i in range(args.jobs)]
        created_at = {}
        for name in names:  # "at once": written straight into the emulator, back to back
            cluster.create("stj", job_document(name))
            created_at[name] = time.monotonic()
        ready_at: dict[str, float] = {}
        deadline = time.monotonic() + args.timeout
        while len(ready_at) < len(names) and time.monotonic() < deadline:
            for name in names:
                if (
                    name not in ready_at
                    and cluster.get("jobs", NAMESPACE, f"{name}-g0")
                    and cluster.get("services", NAMESPACE, name)
                ):
                    ready_at[name] = time.monotonic()
            time.sleep(0.01)
        cluster.wait_until(lambda: all(
            (cluster.get("stj", NAMESPACE, n) or {}).get("status", {}).get("phase") == "Pending" for n in names
        ), timeout=args.timeout)  # fmt: skip
        time.sleep(1.0)  # let the last status writes land before counting
        counts = cluster.request_counts()
        busy_rss = rss_bytes(operator.pid)
        emulator_ms = emulator_latency_ms(cluster, names[0])
    if len(ready_at) < len(names):
        raise SystemExit(f"only {len(ready_at)} of {len(names)} jobs got their children within {args.timeout}s")

    latencies = [ready_at[n] - created_at[n] for n in names]
    operator_requests = sum(counts.values())
    result = {
        "jobs": len(names),
        "secondsUntilChildrenExist": {
            "p50": percentile(latencies, 0.5),
            "p95": percentile(latencies, 0.95),
            "max": max(latencies),
            "mean": statistics.fmean(latencies),
        },
        "apiRequestsPerJob": operator_requests / len(names),
        "apiRequestsByKind": {f"{verb} {resource}": n for (verb, resource), n in sorted(counts.items())},
        "operatorRssBytes": {"idle": idle_rss, "after": busy_rss},
        "emulatorStatusPatchMs": emulator_ms,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "operator_scale.json").write_text(json.dumps(result, indent=2))
    print(f"{len(names)} ScaleTrainJobs created at once")
    print(
        f"{'children exist after':<28} p50 {result['secondsUntilChildrenExist']['p50']:.2f} s, "
        f"p95 {result['secondsUntilChildrenExist']['p95']:.2f} s"
    )
    print(f"{'API requests per job':<28} {result['apiRequestsPerJob']:.1f}")
    for kind, n in result["apiRequestsByKind"].items():
        print(f"    {kind:<52} {n / len(names):6.1f} per job")
    print(f"{'operator RSS':<28} {idle_rss / 2**20:.0f} MiB idle, {busy_rss / 2**20:.0f} MiB after")
    print(f"{'emulator: one status patch':<28} {emulator_ms:.1f} ms (the latencies above are bound by it)")


if __name__ == "__main__":
    main()
