"""What a gang restart costs, in place against recreated: on this machine with `scaletrain run-local` (its pod
executor runs pods as a kubelet would), or with --node on the real node (`make cluster`'s, or one started for the
run: the images in containers on a real kubelet and containerd, under the operator the chart installs). A 2-node
tiny GPT with the built-in trainer checkpoints every 5 steps; rank 1 dies (like a lost node) during step 8 of each
of its first --crashes generations. Each run is one strategy (spec.restartStrategy), and the runs alternate for
--rounds rounds. From each restart, from rank 1's own timeline (its data set notes it):

- **recovery**: from the crash until rank 1's first resumed step is done;
- split: **to a new process** (from the crash until the next generation's trainer started, its launcher: the
  failure seen, the verdict, the pods stopped and restarted or made anew, the barrier) and **process to first
  step** (from there: torchrun, imports, the rendezvous, the model, the checkpoint loaded, one step);
- **floor**: a fresh trainer's time from its start to its first resumed step, which is the second part; so a
  restart adds recovery - floor.

    python bench/recovery.py [--rounds 2] [--crashes 3] [--node]   # writes bench/results/recovery[-node].json
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from scaletrain_testing.jobs import base_job, patched
from scaletrain_testing.kube import Kube
from scaletrain_testing.local_cluster import LocalCluster, state_dir
from scaletrain_testing.node_jobs import PACKAGE, paced_training_job, plugins_config_map
from scaletrain_testing.operator_harness import Team
from scaletrain_testing.trainer_runs import BASE_CONFIG, TRAINER_ENV, plugin_data

RESULTS = Path(__file__).resolve().parent / "results"
STRATEGIES = ("InPlace", "Recreate")
SCRATCH = "/scratch"
READS_PER_STEP = 8  # globalBatchSize 16 on 2 ranks
TARGET_ABOVE_FLOOR_S = 1.5
NODE_RUN_S = 600  # a run's deadline on the real node


def training(scratch: str, crashes: int, package: str | None = None) -> dict:
    """The training block: TimedCrashes (from the tests' plugins, or from `package` where they are mounted so)
    writing its timeline, checkpoints and metrics under `scratch`."""
    data = plugin_data(
        "TimedCrashes",
        timeline=f"{scratch}/timeline.jsonl",
        crash_at_read=7 * READS_PER_STEP + 3,  # in step 8, after the step-5 checkpoint
        reads_per_step=READS_PER_STEP,
        crashes=crashes,
    )
    if package is not None:
        data["source"] = f"{package}.faults:TimedCrashes"
    checkpoints = {"dir": f"{scratch}/checkpoints", "everySteps": 5}
    return patched(BASE_CONFIG, {"data": data, "checkpoint": checkpoints, "outputDir": f"{scratch}/out"})


def restarting(strategy: str, crashes: int) -> dict:
    """What each run's spec says of restarts: the strategy, enough of them, and no backoff to wait out."""
    return {
        "maxRestarts": crashes,
        "maxRestartsWithoutProgress": crashes + 1,  # the same step each time: no crash loop to stop here
        "restartStrategy": strategy,
        "restartBackoff": {"initialSeconds": 0},
    }


def job(name: str, strategy: str, crashes: int) -> dict:
    spec = base_job(
        nodes=2,
        training=training(SCRATCH, crashes),
        volumes=[{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}],
        volumeMounts=[{"name": "scratch", "mountPath": SCRATCH}],
        env=[{"name": key, "value": value} for key, value in TRAINER_ENV.items()],
        **restarting(strategy, crashes),
    )
    spec["metadata"] = {"name": name}
    return spec


def restarts(timeline: str) -> list[dict]:
    """Each restart's figures, from rank 1's timeline (its text)."""
    events = [json.loads(line) for line in timeline.splitlines()]
    at = {(event["generation"], event["event"]): event["at"] for event in events}
    found = []
    for generation in sorted({event["generation"] for event in events}):
        crashed, started = at.get((generation, "crashed")), at.get((generation + 1, "started"))
        done = at.get((generation + 1, "first step done"))
        if crashed is None or started is None or done is None:
            continue
        found.append({"recovery": done - crashed, "toNewProcess": started - crashed, "floor": done - started})
    return found


def timed(name: str, timeline: str, crashes: int) -> list[dict]:
    found = restarts(timeline)
    if len(found) != crashes:
        raise SystemExit(f"{name}: {len(found)} restarts timed, not {crashes}")
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
    return timed(name, (workdir / "volumes" / "default" / "scratch" / "timeline.jsonl").read_text(), crashes)


class OnTheNode:
    """Runs on the real node: the cluster `make cluster` left up, else one started here and taken down after."""

    def __enter__(self) -> OnTheNode:
        self.cluster = LocalCluster(detached=False)
        running = state_dir() / "cluster.json"
        self.owned = not (running.exists() and self.cluster.attach())
        if self.owned:
            self.cluster.up()
        self.images = json.loads(running.read_text())["images"]
        self.namespace = self.cluster.control_plane.create_namespace(f"recovery-{secrets.token_hex(3)}")
        self.volume = self.cluster.provide_claim(self.namespace, "checkpoints")
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(plugins_config_map(self.namespace)))
        self.team = Team(Kube(self.cluster.control_plane.api_client()), self.namespace)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cluster.control_plane.delete_namespace(self.namespace)
        if self.owned:
            self.cluster.down()

    def run(self, strategy: str, crashes: int, number: int) -> list[dict]:
        name = f"recovery-{strategy.lower()}-{number}"
        document = paced_training_job(name, self.namespace, self.images["TRAINER_IMAGE"], "checkpoints", 0.0)
        document["spec"] |= {"training": training(f"/checkpoints/{name}", crashes, PACKAGE)}
        document["spec"] |= restarting(strategy, crashes)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(document))
        self.team.wait_phase(name, "Succeeded", NODE_RUN_S)
        return timed(name, self.cluster.node_run("cat", f"{self.volume}/{name}/timeline.jsonl"), crashes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--crashes", type=int, default=3)
    parser.add_argument("--node", action="store_true", help="on the real node, not with run-local")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {strategy: [] for strategy in STRATEGIES}
    with OnTheNode() if args.node else tempfile.TemporaryDirectory() as where:
        for number in range(args.rounds):  # interleaved: the machine's noise falls on both alike
            for strategy in STRATEGIES:
                if args.node:
                    runs[strategy] += where.run(strategy, args.crashes, number)
                else:
                    runs[strategy] += one_run(strategy, args.crashes, Path(where), number)
    medians = {
        strategy: {key: statistics.median(restart[key] for restart in found) for key in found[0]}
        for strategy, found in runs.items()
    }
    in_place = medians["InPlace"]
    report = {
        "where": "the real node (make cluster)" if args.node else "run-local",
        "rounds": args.rounds,
        "crashes": args.crashes,
        "medians": medians,
        "inPlaceAboveFloorSeconds": in_place["recovery"] - in_place["floor"],
        "targetAboveFloorSeconds": TARGET_ABOVE_FLOOR_S,
        "restarts": runs,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / f"recovery{'-node' if args.node else ''}.json").write_text(json.dumps(report, indent=2) + "\n")
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
