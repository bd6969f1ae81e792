"""The status-report endpoint under the load it is sized for: scripts of one's own pushing progress (report_server.py).

The endpoint runs as in the operator, on a thread of its own, in a process of its own here, so that its CPU time is
its own; whose a report is comes from a warm token cache (the cost of every report but one per pod and 5 minutes).
Clients post the Kubeflow Trainer status protocol's body as HF's KubeflowCallback does: a new TLS connection for
each report. Two phases, interleaved for --rounds rounds:
- alone: --reports reports from --clients client threads at once;
- beside hogs: the same while --hogs clients each hold a connection open and say nothing (a tenant's stuck or
  hostile script), which must delay no one else's report.
For each: reports a second, the latency's median and p95, and the endpoint's CPU per report. 1,000 jobs reporting
every 5 s are 200 reports a second.

    python bench/status_reports.py [--reports 400] [--clients 8] [--hogs 64] [--rounds 3]
        # writes bench/results/status_reports.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scaletrain_operator.api.naming import STATUS_REPORTS_PATH
from scaletrain_operator.local.pod_network import free_port
from scaletrain_operator.local.status_reports import serving_pki

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_PER_SECOND = 200  # 1,000 jobs, each reporting every 5 s
REPORT = json.dumps(
    {
        "trainerStatus": {
            "lastUpdatedTime": "2026-12-05T08:00:00.000000+00:00",
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 180,
            "metrics": [{"name": name, "value": "1.5"} for name in ("loss", "current_step", "total_steps",
                                                                    "learning_rate", "grad_norm", "epoch")],
        }
    }
).encode()  # fmt: skip
SERVER = """
import sys, threading
from scaletrain_operator.in_place import InPlaceGangs
from scaletrain_operator.report_server import Reports, Sender, StatusServer
class WarmCache:
    def sender(self, token, address):
        return Sender(("bench", "job-" + token[-3:]), 0, 0)
server = StatusServer(int(sys.argv[1]), sys.argv[2], WarmCache(), Reports(), InPlaceGangs(), lambda: True, "127.0.0.1")
server.start()
print("ready", flush=True)
sys.stdin.read()
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def post(url: str, context: ssl.SSLContext, token: str) -> float:
    started = time.perf_counter()
    request = urllib.request.Request(url, REPORT, {"Authorization": f"Bearer {token}"}, method="POST")
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:
        assert answer.status == 200, answer.status
    return time.perf_counter() - started


def phase(url: str, context: ssl.SSLContext, pid: int, reports: int, clients: int, hogs: int, port: int) -> dict:
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(hogs)]
    try:
        cpu, started = cpu_seconds(pid), time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            latencies = sorted(pool.map(lambda n: post(url, context, f"token-{n:03d}"), range(reports)))
        wall, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu
    finally:
        for connection in held:
            connection.close()
    return {
        "reportsPerSecond": reports / wall,
        "latencyMedianMs": 1000 * statistics.median(latencies),
        "latencyP95Ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
        "cpuMsPerReport": 1000 * cpu / reports,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=400)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--hogs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tls, port = serving_pki(Path(scratch) / "tls", "127.0.0.1"), free_port()
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port), str(tls)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
            url = f"https://127.0.0.1:{port}{STATUS_REPORTS_PATH}"
            runs: dict[str, list[dict]] = {"alone": [], "besideHogs": []}
            for _ in range(args.rounds):  # interleaved: the machine's noise falls on both alike
                runs["alone"].append(phase(url, context, server.pid, args.reports, args.clients, 0, port))
                runs["besideHogs"].append(phase(url, context, server.pid, args.reports, args.clients, args.hogs, port))
        finally:
            server.kill()
            server.wait()
    medians = {
        name: {key: statistics.median(run[key] for run in done) for key in done[0]} for name, done in runs.items()
    }
    report = {
        "reports": args.reports,
        "clients": args.clients,
        "hogs": args.hogs,
        "rounds": args.rounds,
        "medians": medians,
        "runs": runs,
        "targetReportsPerSecond": TARGET_PER_SECOND,
        "hogsSlowdownP95": medians["besideHogs"]["latencyP95Ms"] / medians["alone"]["latencyP95Ms"],
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "status_reports.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"| | alone | beside {args.hogs} silent connections |\n| --- | --- | --- |")
    for key, label in (
        ("reportsPerSecond", "reports a second"),
        ("latencyMedianMs", "latency, median (ms)"),
        ("latencyP95Ms", "latency, p95 (ms)"),
        ("cpuMsPerReport", "endpoint CPU per report (ms)"),
    ):
        print(f"| {label} | {medians['alone'][key]:.1f} | {medians['besideHogs'][key]:.1f} |")


if __name__ == "__main__":
    main()
