"""`scaletrain run-local FILE`: run a ScaleTrainJob on this machine, the way the cluster runs it.

Each node is the job's rendered pod (pods.py): one torchrun per node with the pod's env, gloo on
CPU, nccl with a slice of this machine's GPUs per node. The gang policy (api/gang_policy.py) judges
the pods exactly as the operator does: a failed node stops the others and the gang restarts from
the last checkpoint, up to maxRestarts; exit code 78 (an invalid training config) and a passed
activeDeadlineSeconds (per gang, as each generation is a new Job) are final. Every process is stopped
on the way out, also on Ctrl-C, SIGTERM or SIGHUP, and a second interrupt cannot cut the stopping
short. Volumes are directories under the workdir.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaletrain_trainer.config import CONFIG_ENV, TrainingConfig
from scaletrain_trainer.validation import Problem, ProblemsError

from ..api.gang_policy import DEADLINE_EXCEEDED, Action, GangLimits, Verdict, judge
from ..api.models import ScaleTrainJob
from ..api.progress import read_progress
from ..api.render import render_job
from .pods import (
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
from .report import RunResult, metrics_records, summary
from .view import ProgressView

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


class Gang:
    """One generation of the job's pods, started together and stopped together."""

    def __init__(self, job: ScaleTrainJob, generation: int, workdir: Path, gpus: list[str]):
        pods = indexed_pods(render_job(job, generation))
        mounts = volume_paths(trainer_container(pods[0]), workdir / "volumes")
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

    def judge(self, limits: GangLimits, restarts: int, deadline_passed: bool) -> Verdict:
        """The gang policy on these pods; run-local's deadline timer speaks for the Job controller."""
        outcomes = [pod.outcome() for pod in self.pods]
        return judge(outcomes, limits, restarts, job_failure=DEADLINE_EXCEEDED if deadline_passed else None)

    def stop(self) -> None:
        with signals_deferred():  # a second Ctrl-C must not leave half the processes running
            stop_pods(self.pods)


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
    spec, limits = job.spec, GangLimits.of(job.spec)
    started, restarts = time.monotonic(), 0
    with ProgressView(job) as view:
        view.say(
            f"{job.name}: {spec.nodes} node(s) × {spec.resolved_procs_per_node} process(es), "
            f"backend {spec.resolved_backend}; logs and volumes in {workdir}"
        )
        gang = Gang(job, restarts, workdir, gpus)
        metrics_path = Path(gang.config.output_dir) / "metrics.jsonl"
        offset = metrics_path.stat().st_size if metrics_path.exists() else 0  # earlier runs' records
        while (verdict := _run_gang(gang, view, limits, restarts)).action is Action.RESTART:
            restarts += 1
            view.say(verdict.message)
            gang = Gang(job, restarts, workdir, gpus)
    result = RunResult(
        job,
        verdict,
        gang.pods,
        restarts,
        time.monotonic() - started,
        metrics_records(metrics_path, offset),
        metrics_path,
        gang.config.checkpoint.dir,
        workdir,
    )
    print(summary(result))
    return verdict.exit_code


def _run_gang(gang: Gang, view: ProgressView, limits: GangLimits, restarts: int) -> Verdict:
    deadline = time.monotonic() + limits.active_deadline_seconds if limits.active_deadline_seconds else None
    try:
        gang.start()
        while True:
            passed = deadline is not None and time.monotonic() > deadline
            if (verdict := gang.judge(limits, restarts, passed)).action is not Action.KEEP_RUNNING:
                return verdict
            if (progress := read_progress(gang.progress_url, timeout_seconds=POLL_SECONDS)) is not None:
                view.update(progress)
            time.sleep(POLL_SECONDS)
    finally:
        gang.stop()


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
