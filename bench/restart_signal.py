"""How fast an in-place restart reaches a gang: from the operator's decision (in_place.InPlaceGangs.want of a new
generation) until every pod's agent holds the RESTART verdict, over the status-report endpoint as the operator
serves it (report_server.py, on a thread of its own, in a process of its own here). Each pod's agent holds a call
open while its workload runs (agent.Listener), as here: --pods client threads, one call each, on TLS. Senders come
from a warm token cache. The target: at most 1 s at 100 pods.

    python bench/restart_signal.py [--pods 100] [--rounds 5]   # writes bench/results/restart_signal.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from scaletrain_operator.local.pod_network import free_port
from scaletrain_operator.local.status_reports import serving_pki
from scaletrain_trainer.agent import Channel
from scaletrain_trainer.contract import wire

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_SECONDS = 1.0  # at 100 pods
HELD_AFTER_SECONDS = 3.0  # for the calls to be made and held before the decision
SERVER = """
import sys, time
from scaletrain_operator.in_place import InPlaceGangs
from scaletrain_operator.report_server import Reports, Sender, StatusServer
class WarmCache:
    def sender(self, token, address):
        return Sender(("bench", "job"), 0, int(token))
gangs, pods = InPlaceGangs(), int(sys.argv[3])
StatusServer(int(sys.argv[1]), sys.argv[2], WarmCache(), Reports(), gangs, lambda: True, "127.0.0.1").start()
gangs.want(("bench", "job"), 0, pods)
print("ready", flush=True)
for line in sys.stdin:
    decided = time.time()
    gangs.want(("bench", "job"), int(line), pods)
    print(decided, flush=True)
"""


def one_round(server: subprocess.Popen, url: str, tokens: list[Path], ca: Path, generation: int) -> dict:
    told: list[float] = []
    lock = threading.Lock()

    def hold(token: Path) -> None:
        word = Channel(url, token, ca).until({"state": wire.RUNNING, "generation": generation - 1}, 60)
        received = time.time()
        assert word is not None and word.verdict == wire.RESTART, word
        with lock:
            told.append(received)

    pods = [threading.Thread(target=hold, args=(token,)) for token in tokens]
    for pod in pods:
        pod.start()
    time.sleep(HELD_AFTER_SECONDS)
    assert not told, "a pod was told before the decision"
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(f"{generation}\n")
    server.stdin.flush()
    decided = float(server.stdout.readline())
    for pod in pods:
        pod.join(60)
    latencies = sorted(t - decided for t in told)
    return {"lastToldSeconds": latencies[-1], "medianToldSeconds": statistics.median(latencies), "told": len(told)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tls, port = serving_pki(Path(scratch) / "tls", "127.0.0.1"), free_port()
        tokens = [Path(scratch) / f"token-{rank}" for rank in range(args.pods)]
        for rank, token in enumerate(tokens):
            token.write_text(str(rank))
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port), str(tls), str(args.pods)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            url = f"https://127.0.0.1:{port}{wire.IN_PLACE_PATH}"
            runs = [one_round(server, url, tokens, tls / "ca.crt", g) for g in range(1, args.rounds + 1)]
        finally:
            server.kill()
            server.wait()
    report = {
        "pods": args.pods,
        "rounds": args.rounds,
        "medianLastToldSeconds": statistics.median(run["lastToldSeconds"] for run in runs),
        "medianMedianToldSeconds": statistics.median(run["medianToldSeconds"] for run in runs),
        "targetSeconds": TARGET_SECONDS,
        "runs": runs,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "restart_signal.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"| {args.pods} pods, medians of {args.rounds} rounds | seconds from the decision |\n| --- | --- |")
    print(f"| every pod told | {report['medianLastToldSeconds']:.3f} |")
    print(f"| half the pods told | {report['medianMedianToldSeconds']:.3f} |")


if __name__ == "__main__":
    main()
