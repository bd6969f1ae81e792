"""What a gang restart costs, in place against recreated, on this machine with `scaletrain run-local` (its pod
executor runs pods as a kubelet would; issue #50's figures on a real node and a 500-pod gang are to come). A
2-node tiny GPT with the built-in trainer checkpoints every 5 steps; rank 1 dies (like a lost node) during step 8
of each of its first --crashes generations. Each run-local run is one strategy (spec.restartStrategy), and the
runs alternate for --rounds rounds. From each restart, from rank 1's own timeline (its data set notes it):

- **recovery**: from the crash until rank 1's first resumed step is done;
- split: **to a new process** (from the crash until the next generation's trainer started, its launcher: the
  failure seen, the verdict, the pods stopped and restarted or made anew, the barrier) and **process to first
  step** (from there: torchrun, imports, the rendezvous, the model, the checkpoint loaded, one step);
- **floor**: a fresh trainer's time from its start to its first resumed step, which is the second part; so a
  restart adds recovery - floor.

    python bench/recovery.py [--rounds 2] [--crashes 3]   # writes bench/results/recovery.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from scaletrain_testing.jobs import base_job, patched
from scaletrain_testing.trainer_runs import BASE_CONFIG, TRAINER_ENV, plugin_data

RESULTS = Path(__file__).resolve().parent / "results"
STRATEGIES = ("InPlace", "Recreate")
SCRATCH = "/scratch"
READS_PER_STEP = 8  # globalBatchSize 16 on 2 ranks
TARGET_ABOVE_FLOOR_S = 1.5


def job(name: str, strategy: str, crashes: int) -> dict:
    data = plugin_data(
        "TimedCrashes",
        timeline=f"{SCRATCH}/timeline.jsonl",
        crash_at_read=7 * READS_PER_STEP + 3,  # in step 8, after the step-5 checkpoint
        reads_per_step=READS_PER_STEP,
        crashes=crashes,
    )
    config = patched(
        BASE_CONFIG,
        {"data": data, "checkpoint": {"dir": f"{SCRATCH}/checkpoints", "everySteps": 5}, "outputDir": f"{SCRATCH}/out"},
    )
    spec = base_job(
        nodes=2,
        training=config,
        volumes=[{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}],
        volumeMounts=[{"name": "scratch", "mountPath": SCRATCH}],
        env=[{"name": key, "value": value} for key, value in TRAINER_ENV.items()],
        maxRestarts=crashes,
        maxRestartsWithoutProgress=crashes + 1,  # the same step each time: no crash loop to stop here
        restartStrategy=strategy,
        restartBackoff={"initialSeconds": 0},
    )
    spec["metadata"] = {"name": name}
    return spec


def restarts(timeline: Path) -> list[dict]:
    """Each restart's figures, from rank 1's timeline."""
    events = [json.loads(line) for line in timeline.read_text().splitlines()]
    at = {(event["generation"], event["event"]): event["at"] for event in events}
    found = []
    for generation in sorted({event["generation"] for event in events}):
        crashed, started = at.get((generation, "crashed")), at.get((generation + 1, "started"))
        done = at.get((generation + 1, "first step done"))
        if crashed is None or started is None or done is None:
            continue
        found.append({"recovery": done - crashed, "toNewProcess": started - crashed, "floor": done - started})
    return found


def one_run(strategy: str, crashes: int, scratch: Path, number: int) -> list[dict]:
    name = f"recovery-{strategy.lower()}-{number}"
    workdir = scratch / name
    workdir.mkdir()
    path = workdir / "job.yaml"
    path.write_text(yaml.safe_dump(job(name, strategy, crashes)))
    command = [sys.executable, "-m", "scaletrain_operator.cli", "run-local", str(path), "--workdir", str(workdir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{name} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    found = restarts(workdir / "volumes" / "default" / "scratch" / "timeline.jsonl")
    if len(found) != crashes:
        raise SystemExit(f"{name}: {len(found)} restarts timed, not {crashes}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--crashes", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {strategy: [] for strategy in STRATEGIES}
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.rounds):  # interleaved: the machine's noise falls on both alike
            for strategy in STRATEGIES:
                runs[strategy] += one_run(strategy, args.crashes, Path(scratch), number)
    medians = {
        strategy: {key: statistics.median(restart[key] for restart in found) for key in found[0]}
        for strategy, found in runs.items()
    }
    in_place = medians["InPlace"]
    report = {
        "rounds": args.rounds,
        "crashes": args.crashes,
        "medians": medians,
        "inPlaceAboveFloorSeconds": in_place["recovery"] - in_place["floor"],
        "targetAboveFloorSeconds": TARGET_ABOVE_FLOOR_S,
        "restarts": runs,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "recovery.json").write_text(json.dumps(report, indent=2) + "\n")
    count = len(runs["InPlace"])
    print(f"| seconds, medians of {count} restarts each | in place | recreate |\n| --- | --- | --- |")
    for key, label in (
        ("recovery", "from the crash to the first resumed step"),
        ("toNewProcess", "to a new trainer (its launcher started)"),
        ("floor", "process start to first resumed step (the floor)"),
    ):
        print(f"| {label} | {medians['InPlace'][key]:.2f} | {medians['Recreate'][key]:.2f} |")
    print(f"| above the floor | {report['inPlaceAboveFloorSeconds']:.2f} | "
          f"{medians['Recreate']['recovery'] - medians['Recreate']['floor']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
