"""`scaletrain run-local FILE`: run a ScaleTrainJob on this machine, the way the cluster runs it.

Each node is the job's rendered pod (local.py): one torchrun per node with the pod's env, gloo on
CPU, nccl with a slice of this machine's GPUs per node. The gang behaves as under the operator: a
failed node stops the others and the gang restarts from the last checkpoint, up to maxRestarts;
exit code 78 (an invalid training config) and a passed activeDeadlineSeconds (per gang, as each
generation is a new Job) are final. Every process is stopped on the way out, also on Ctrl-C, SIGTERM
or SIGHUP, and a second interrupt cannot cut the stopping short. Volumes are directories under the
workdir.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaletrain_trainer.config import CONFIG_ENV, TrainingConfig
from scaletrain_trainer.validation import Problem, ProblemsError

from .api import ScaleTrainJob
from .local import (
    LOCALHOST,
    LocalPod,
    free_port,
    indexed_pods,
    localize,
    resolve_env,
    stop_pods,
    trainer_container,
    volume_paths,
)
from .progress import read_progress
from .reconcile import CONFIG_ERROR_EXIT_CODE
from .render import render_job

POLL_SECONDS = 0.25
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill, a closed terminal
WORKDIR_PARTS = ("logs", "volumes")  # what run-local writes under the workdir (and --fresh removes)


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM


def count_gpus() -> int:
    import torch  # only here: the rest of the command line needs no torch

    return torch.cuda.device_count()


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else all of them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device for device in visible.split(",") if device.strip()]
    return [str(index) for index in range(count_gpus())]


def check_fits_this_machine(job: ScaleTrainJob, gpus_here: int) -> None:
    spec = job.spec
    if not spec.gpus_per_node:
        return
    needed = spec.nodes * spec.gpus_per_node
    if gpus_here == 0:
        message = (
            f"{spec.gpus_per_node} GPU(s) per node, but this machine has no GPU; "
            "run a CPU job here (gpusPerNode: 0, e.g. examples/cpu-gloo.yaml)"
        )
        raise ProblemsError([Problem(("spec", "gpusPerNode"), message)])
    if needed > gpus_here:
        message = f"{spec.nodes} nodes × {spec.gpus_per_node} GPUs need {needed} GPUs; this machine has {gpus_here}"
        raise ProblemsError([Problem(("spec", "nodes"), message + ": lower nodes or gpusPerNode")])


@dataclass
class Outcome:
    exit_code: int
    pod: str | None = None  # the pod that decided it: the failed one (the lowest index), or the last one
    reason: str = ""
    final: bool = False  # no gang restart helps: a config error or a passed deadline


class Gang:
    """One generation of the job's pods, started together and stopped together."""

    def __init__(self, job: ScaleTrainJob, generation: int, workdir: Path, gpus: list[str]):
        pods = indexed_pods(render_job(job, generation))
        container = trainer_container(pods[0])
        mounts = volume_paths(container, workdir / "volumes")
        for directory in mounts.values():
            directory.mkdir(parents=True, exist_ok=True)
        master_port, self.metrics_port = free_port(), free_port()
        per_node = job.spec.gpus_per_node
        self.pods = []
        for index, pod in enumerate(pods):
            env = localize(
                resolve_env(pod, trainer_container(pod)),
                master_port=master_port,
                mounts=mounts,
                metrics_port=self.metrics_port,
            )
            if per_node:  # this node's slice of the GPUs run-local may use
                env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[index * per_node : (index + 1) * per_node])
            self.pods.append(LocalPod.from_pod(pod, env, workdir / "logs"))
        self.config = TrainingConfig.model_validate(json.loads(self.pods[0].env[CONFIG_ENV]))

    @property
    def progress_url(self) -> str:
        return f"http://{LOCALHOST}:{self.metrics_port}/progress"

    def start(self) -> None:
        for pod in self.pods:
            pod.start()

    def poll(self) -> Outcome | None:
        """A failure, success once every pod succeeded, or None while the gang runs."""
        codes = [(pod, pod.poll()) for pod in self.pods]
        failed = [(pod, code) for pod, code in codes if code not in (None, 0)]
        if failed:
            pod, code = failed[0]
            final = code == CONFIG_ERROR_EXIT_CODE
            return Outcome(code, pod.name, f"pod {pod.name} failed (exit code {code})", final)
        if all(code == 0 for _, code in codes):
            return Outcome(0, self.pods[-1].name, f"all {len(self.pods)} nodes finished")
        return None

    def stop(self) -> None:
        with signals_deferred():  # a second Ctrl-C must not leave half the processes running
            stop_pods(self.pods)


class ProgressView:
    """A live bar (step/maxSteps, loss, samples/s, ETA) on a terminal; a line per logged step otherwise."""

    def __init__(self, job: ScaleTrainJob):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = Console(stderr=True, highlight=False)
        self.live = self.console.is_terminal
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  {task.fields[speed]} samples/s  ETA {task.fields[eta]}"),
            console=self.console,
            disable=not self.live,
        )
        self.task = self.bar.add_task(job.name, total=job.spec.training.max_steps, loss="-", speed="-", eta="-")
        self.last_step = -1

    def __enter__(self) -> ProgressView:
        self.bar.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.bar.stop()

    def update(self, progress: dict[str, Any]) -> None:
        step = progress.get("step", 0)
        fields = {
            "loss": f"{progress['loss']:.4f}" if "loss" in progress else "-",
            "speed": f"{progress['samplesPerSecond']:.0f}" if "samplesPerSecond" in progress else "-",
            "eta": _duration(progress["etaSeconds"]) if "etaSeconds" in progress else "-",
        }
        self.bar.update(self.task, completed=step, **fields)
        if not self.live and step != self.last_step and "loss" in progress:
            total = progress.get("maxSteps", "?")
            self.console.print(
                f"step {step}/{total}  loss {fields['loss']}  {fields['speed']} samples/s  ETA {fields['eta']}"
            )
        self.last_step = step

    def say(self, message: str) -> None:
        self.console.print(message, soft_wrap=True)


@dataclass
class RunResult:
    job: ScaleTrainJob
    gang: Gang  # the last generation
    outcome: Outcome
    restarts: int
    seconds: float
    records: list[dict[str, Any]]  # this run's metrics.jsonl records
    metrics_path: Path
    workdir: Path


def run_local(job: ScaleTrainJob, workdir: Path, *, fresh: bool = False) -> int:
    """Run `job` here until it succeeds or fails; the exit code is the job's (0 on success)."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    try:
        gpus = visible_gpus() if job.spec.gpus_per_node else []
        check_fits_this_machine(job, len(gpus))
        if fresh:
            for part in WORKDIR_PARTS:
                shutil.rmtree(workdir / part, ignore_errors=True)
        return _run(job, workdir, gpus)
    except Interrupted as interruption:
        print(f"{job.name}: interrupted ({interruption}); every process of the job is stopped")
        return interruption.exit_code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(job: ScaleTrainJob, workdir: Path, gpus: list[str]) -> int:
    spec = job.spec
    started, restarts = time.monotonic(), 0
    with ProgressView(job) as view:
        view.say(
            f"{job.name}: {spec.nodes} node(s) × {spec.procs} process(es), backend {spec.resolved_backend}; "
            f"logs and volumes in {workdir}"
        )
        gang = Gang(job, restarts, workdir, gpus)
        metrics_path = Path(gang.config.output_dir) / "metrics.jsonl"
        offset = metrics_path.stat().st_size if metrics_path.exists() else 0  # earlier runs' records
        while True:
            outcome = _run_gang(gang, view, spec.active_deadline_seconds)
            if outcome.exit_code == 0 or outcome.final or restarts >= spec.max_restarts:
                break
            restarts += 1
            view.say(f"{outcome.reason}; gang restart {restarts}/{spec.max_restarts} from the last checkpoint")
            gang = Gang(job, restarts, workdir, gpus)
    seconds = time.monotonic() - started
    records = _records(metrics_path, offset)
    print(summary(RunResult(job, gang, outcome, restarts, seconds, records, metrics_path, workdir)))
    return outcome.exit_code


def _run_gang(gang: Gang, view: ProgressView, deadline_seconds: int | None) -> Outcome:
    deadline = time.monotonic() + deadline_seconds if deadline_seconds else None
    try:
        gang.start()
        while (outcome := gang.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                return Outcome(1, None, f"activeDeadlineSeconds ({deadline_seconds}) passed", final=True)
            if (progress := read_progress(gang.progress_url, timeout_seconds=POLL_SECONDS)) is not None:
                view.update(progress)
            time.sleep(POLL_SECONDS)
        return outcome
    finally:
        gang.stop()


def summary(result: RunResult) -> str:
    job, outcome, records = result.job, result.outcome, result.records
    verdict = "Succeeded" if outcome.exit_code == 0 else f"Failed: {outcome.reason}"
    if outcome.exit_code == CONFIG_ERROR_EXIT_CODE:
        verdict += ": invalid training config, not retried"
    elif outcome.exit_code and not outcome.final and result.restarts >= job.spec.max_restarts:
        verdict += f"; maxRestarts ({job.spec.max_restarts}) reached"
    lines = [f"{job.name}: {verdict} in {result.seconds:.1f} s, {result.restarts} restart(s)"]
    if records:
        speeds = [r["samplesPerSecond"] for r in records if "samplesPerSecond" in r]
        lines += [
            f"  steps       {records[-1]['step']}/{job.spec.training.max_steps}",
            f"  loss        {records[0]['loss']:.4f} (step {records[0]['step']}) -> {records[-1]['loss']:.4f}",
            f"  throughput  {statistics.median(speeds):.0f} samples/s (median)" if speeds else "",
            f"  metrics     {result.metrics_path}",
        ]
    if result.gang.config.checkpoint.dir:
        lines.append(f"  checkpoints {result.gang.config.checkpoint.dir}")
    lines.append(f"  logs        {result.workdir / 'logs'}")
    if outcome.exit_code and outcome.pod:
        failed = next(pod for pod in result.gang.pods if pod.name == outcome.pod)
        lines += [f"  last lines of {failed.log_path}:", failed.tail()]
    return "\n".join(line for line in lines if line)


def _records(path: Path, offset: int) -> list[dict[str, Any]]:
    """The metrics.jsonl records written by this run (the file also keeps earlier runs' records); a
    line cut short by a killed process is skipped."""
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


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


@dataclass
class _SignalState:
    deferring: bool = False
    deferred: int | None = None  # a stop signal that came while deferring


_signals = _SignalState()


def _interrupt(signum: int, frame: Any) -> None:
    if _signals.deferring:
        _signals.deferred = signum
        return
    raise Interrupted(signum)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP that come during the block take effect when it is done. (A flag, not
    a blocked signal mask: the kernel may hand the signal to another thread, e.g. the progress bar's.)"""
    _signals.deferring, _signals.deferred = True, None
    try:
        yield
    finally:
        _signals.deferring = False
        if _signals.deferred is not None:
            raise Interrupted(_signals.deferred)
