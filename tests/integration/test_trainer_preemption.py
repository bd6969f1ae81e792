"""A stopped pod keeps its work: on SIGTERM (the kubelet's, for a preemption, an eviction or a suspension)
every rank finishes its step, saves a checkpoint at it and exits EXIT_PREEMPTED, and the pod (the launcher
over torchrun, 2 workers on gloo) exits 80 too, with the step in its termination message. A rerun resumes
exactly there."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from scaletrain_testing.process_tree import descendants, survivors
from scaletrain_testing.timeouts import TRAINER_STEPS_S
from scaletrain_testing.trainer_runs import GPT_OPTIONS, PodRun, Run, config_for, plugin_data, run_trainer, start_pod
from scaletrain_testing.waiting import wait_until
from scaletrain_trainer.contract.exit_codes import EXIT_PREEMPTED

MAX_STEPS = 60
EXIT_WITHIN_S = 15  # from the SIGTERM until every process of the pod is gone
# 8 reads of 20 ms per rank and step: about 0.2 s a step, so a test can signal the run mid-training.
PACED = {
    "maxSteps": MAX_STEPS,
    "data": plugin_data("SlowSynthetic", seconds_per_read=0.02),
    "checkpoint": {"everySteps": 1000},
}
STRAIGHT = {"maxSteps": MAX_STEPS, "checkpoint": {"everySteps": 1000}}  # the same run, unpaced


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run: SlowSynthetic's samples are the built-in synthetic data set's."""
    directory = tmp_path_factory.mktemp("straight")
    run = run_trainer(directory, config_for(directory, STRAIGHT, checkpoints=True), nproc=2)
    assert run.returncode == 0, run.output[-3000:]
    return run.metrics()


@pytest.fixture
def start():
    """Start a paced pod; what a failing test leaves of it is killed afterwards."""
    pods = []

    def started(directory: Path, overrides: dict | None = None) -> PodRun:
        pods.append(start_pod(directory, config_for(directory, PACED | (overrides or {}), checkpoints=True)))
        return pods[-1]

    yield started
    for pod in pods:
        pod.kill()


def _wait_while_running(pod: PodRun, ready, what: str) -> None:
    """Until `ready()`; fails at once, with the pod's log, if the pod exits first."""

    def ready_while_running() -> bool:
        if ready():
            return True
        assert pod.process.poll() is None, f"the pod exited:\n{_log_tail(pod)}"
        return False

    wait_until(ready_while_running, TRAINER_STEPS_S, what, interval_s=0.02, details=lambda: _log_tail(pod))


def _log_tail(pod: PodRun) -> str:
    return pod.log.read_text()[-3000:]


def _logged_steps(directory: Path) -> int:
    metrics = directory / "out" / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.exists() else 0


def _stop(pod: PodRun, pid: int) -> Run:
    """SIGTERM to `pid`, one of the pod's processes; the pod's run, once every process of it is gone
    (within EXIT_WITHIN_S seconds)."""
    processes = descendants(pod.process.pid) | {pod.process.pid}
    signalled = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    run = pod.wait(EXIT_WITHIN_S)
    left, _ = survivors(processes, str(pod.directory), EXIT_WITHIN_S - (time.monotonic() - signalled))
    assert not left, f"still running {time.monotonic() - signalled:.1f} s after SIGTERM: {left}"
    return run


def _worker(pod: PodRun, rank: int) -> int:
    """The pid of the pod's worker of `rank` (torchrun sets RANK in its workers' environment)."""
    for pid in descendants(pod.process.pid):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ and b"scaletrain_trainer" in cmdline:
            return pid
    raise AssertionError(f"no worker of rank {rank} under the pod")


def _termination_message(directory: Path) -> dict:
    return json.loads((directory / "termination-log").read_text())


def _checkpoints(directory: Path) -> list[str]:
    return sorted(path.name for path in (directory / "checkpoints").iterdir())


def _preempted_line(step: int) -> str:
    return f"preempted by SIGTERM at step {step}: checkpoint step-{step:08d} saved, exiting {EXIT_PREEMPTED}"


def test_a_sigterm_to_the_pod_saves_the_step_exits_80_and_a_rerun_resumes_exactly(tmp_path, straight, start):
    pod = start(tmp_path)
    _wait_while_running(pod, lambda: _logged_steps(tmp_path) >= 20, "20 steps logged")
    run = _stop(pod, pod.process.pid)  # the pod's main process, as the kubelet signals it
    assert run.returncode == EXIT_PREEMPTED, run.output[-3000:]
    message = _termination_message(tmp_path)
    step = message["step"]
    assert message == {"result": "Preempted", "step": step, "signal": "SIGTERM", "checkpoint": f"step-{step:08d}"}
    assert step >= run.metrics()[-1]["step"] >= 20
    assert _checkpoints(tmp_path) == [f"step-{step:08d}"]  # complete (renamed from .partial), and the only one
    assert (tmp_path / "checkpoints" / f"step-{step:08d}" / "manifest.json").is_file()
    assert run.output.count(_preempted_line(step)) == 2  # both ranks

    rerun = run_trainer(tmp_path, config_for(tmp_path, STRAIGHT, checkpoints=True), nproc=2)
    assert rerun.returncode == 0, rerun.output[-3000:]
    assert f"resumed from {tmp_path / 'checkpoints' / f'step-{step:08d}'} at step {step}" in rerun.output
    records = rerun.metrics()  # the preempted run's steps, then the rerun's from step + 1
    assert [record["step"] for record in records] == list(range(1, MAX_STEPS + 1))
    assert [r["loss"] for r in records] == pytest.approx([r["loss"] for r in straight], rel=1e-6, abs=1e-7)
    assert records[-1]["loss"] == straight[-1]["loss"]


def test_a_sigterm_to_one_rank_stops_every_rank_after_the_same_step(tmp_path, start):
    pod = start(tmp_path)
    _wait_while_running(pod, lambda: _logged_steps(tmp_path) >= 10, "10 steps logged")
    run = _stop(pod, _worker(pod, rank=1))
    assert run.returncode == EXIT_PREEMPTED, run.output[-3000:]
    assert f"exitcode  : {EXIT_PREEMPTED}" in run.output  # torchrun saw the workers' own exit code
    step = _termination_message(tmp_path)["step"]
    assert run.output.count(_preempted_line(step)) == 2
    assert _checkpoints(tmp_path) == [f"step-{step:08d}"]


def test_a_sigterm_during_a_save_lets_it_finish_and_stops_at_its_step(tmp_path, start):
    """The save of step 10 takes 3 s longer (SlowSavingGPT); the SIGTERM comes during it. The save is
    neither cut short nor repeated, and the newest checkpoint loads."""
    model = {"name": "scaletrain_testing.plugins.faults:SlowSavingGPT", "options": GPT_OPTIONS | {"save_seconds": 3}}
    model["options"] |= {"record_dir": str(tmp_path)}
    pod = start(tmp_path, {"model": model, "checkpoint": {"everySteps": 10}})
    _wait_while_running(pod, (tmp_path / "saving-0").exists, "rank 0 to start saving step 10")
    run = _stop(pod, pod.process.pid)
    assert run.returncode == EXIT_PREEMPTED, run.output[-3000:]
    assert _termination_message(tmp_path)["step"] == 10
    assert run.output.count("saved checkpoint") == 2  # once per rank: the preemption found step 10 saved
    assert _checkpoints(tmp_path) == ["step-00000010"]

    rerun = run_trainer(tmp_path, config_for(tmp_path, {"maxSteps": 12}, checkpoints=True))
    assert rerun.returncode == 0, rerun.output[-3000:]
    assert "step-00000010 at step 10" in rerun.output
