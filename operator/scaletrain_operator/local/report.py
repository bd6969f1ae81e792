"""run-local's closing summary: the verdict, restarts, steps, first and last loss, median throughput,
where metrics, checkpoints and logs are, and the failed pod's last log lines."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..api.conditions import JobPhase
from ..api.job import ScaleTrainJob
from ..policy.gang_policy import Action, Verdict
from .executor import RunningPod


@dataclass(frozen=True)
class RunResult:
    job: ScaleTrainJob
    verdict: Verdict  # the gang policy's last word
    pods: list[RunningPod]  # of the last generation
    restarts: int
    disruptions: int
    seconds: float
    records: list[dict[str, Any]]  # this run's metrics.jsonl records
    metrics_path: Path | None  # None: a script of one's own, which writes no metrics.jsonl
    checkpoint_dir: Path | None
    workdir: Path


def summary(result: RunResult) -> str:
    job, verdict, records = result.job, result.verdict, result.records
    said = JobPhase.SUCCEEDED if verdict.action is Action.SUCCEED else f"{JobPhase.FAILED}: {verdict.message}"
    disrupted = f", {result.disruptions} disruption(s)" if result.disruptions else ""
    lines = [f"{job.name}: {said} in {result.seconds:.1f} s, {result.restarts} restart(s){disrupted}"]
    logged = [r for r in records if "loss" in r]  # the steps' records, not the evaluations'
    if logged:
        speeds = [r["samplesPerSecond"] for r in logged if "samplesPerSecond" in r]
        evaluations = [r for r in records if "evalLoss" in r]
        lines += [
            f"  steps       {logged[-1]['step']}/{job.spec.training.max_steps if job.spec.training else '?'}",
            f"  loss        {logged[0]['loss']:.4f} (step {logged[0]['step']}) -> {logged[-1]['loss']:.4f}",
            f"  eval loss   {evaluations[0]['evalLoss']:.4f} (step {evaluations[0]['step']}) -> "
            f"{evaluations[-1]['evalLoss']:.4f} (step {evaluations[-1]['step']})"
            if evaluations
            else "",
            f"  throughput  {statistics.median(speeds):.0f} samples/s (median)" if speeds else "",
            f"  metrics     {result.metrics_path}",
        ]
    if result.checkpoint_dir:
        lines.append(f"  checkpoints {result.checkpoint_dir}")
    lines.append(f"  logs        {result.workdir / 'logs'}")
    if verdict.root_cause is not None:
        failed = next(pod for pod in result.pods if pod.name == verdict.root_cause.name)
        lines += [f"  last lines of {failed.log_path}:", failed.tail()]
    return "\n".join(line for line in lines if line)


def metrics_records(path: Path | None, offset: int) -> list[dict[str, Any]]:
    """The metrics.jsonl records written by this run (the file also keeps earlier runs' records); a
    line cut short by a killed process is skipped."""
    if path is None:
        return []
    try:
        with path.open() as file:
            file.seek(offset)
            lines = file.readlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
