"""A stopped pod keeps its work: on SIGTERM (the kubelet's, for a preemption, an eviction or a suspension)
every rank finishes its step, saves a checkpoint at it and exits EXIT_PREEMPTED, and the pod (the launcher
over torchrun, 2 workers on gloo) exits 80 too, with the step in its termination message. A rerun resumes
exactly there. So does a SIGTERM to one worker alone, at any moment after its start-up and before the last
step, with every core of the machine busy beside it; after the last step, the run ends as it would have."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from scaletrain_testing.cpu_load import cpu_load
from scaletrain_testing.process_tree import descendants, survivors
from scaletrain_testing.timeouts import LOADED_POD_STOP_S, TRAINER_STEPS_S
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

    def started(directory: Path, overrides: dict | None = None, env: dict[str, str] | None = None) -> PodRun:
        pods.append(start_pod(directory, config_for(directory, PACED | (overrides or {}), checkpoints=True), env=env))
        return pods[-1]

    yield started
    for pod in pods:
        pod.kill()


def _wait_while_running(pod: PodRun, ready, what: str):
    """The first truthy value of `ready()`; fails at once, with the pod's log, if the pod exits first."""

    def ready_while_running():
        if value := ready():
            return value
        assert pod.process.poll() is None, f"the pod exited:\n{_log_tail(pod)}"
        return None

    return wait_until(ready_while_running, TRAINER_STEPS_S, what, interval_s=0.02, details=lambda: _log_tail(pod))


def _log_tail(pod: PodRun) -> str:
    return pod.log.read_text()[-3000:]


def _logged_steps(directory: Path) -> int:
    metrics = directory / "out" / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.exists() else 0


def _stop(pod: PodRun, pid: int, within_s: float = EXIT_WITHIN_S) -> Run:
    """SIGTERM to `pid`, one of the pod's processes; the pod's run, once every process of it is gone
    (within `within_s` seconds)."""
    processes = descendants(pod.process.pid) | {pod.process.pid}
    signalled = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    run = pod.wait(within_s)
    left, _ = survivors(processes, str(pod.directory), within_s - (time.monotonic() - signalled))
    assert not left, f"still running {time.monotonic() - signalled:.1f} s after SIGTERM: {left}"
    return run


def _worker(pod: PodRun, rank: int) -> int:
    """The pid of the pod's worker of `rank`."""
    pid = _worker_if_started(pod, rank)
    assert pid is not None, f"no worker of rank {rank} under the pod"
    return pid


def _worker_if_started(pod: PodRun, rank: int) -> int | None:
    """The pid of the pod's worker of `rank` (torchrun sets RANK in its workers' environment), None before
    torchrun started it."""
    for pid in descendants(pod.process.pid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile: one of the processes that start the pod's
            continue
        if f"RANK={rank}".encode() in environ and b"scaletrain_trainer" in cmdline:
            return pid
    return None


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


# Where a SIGTERM to one worker lands in the loaded test: right after the worker's start-up (as soon as it
# handles SIGTERM, before its set-up and its process group), mid-training, during a checkpoint save (the
# regular one of step 5, 2 s longer: SlowSavingGPT), in the evaluation after step 5, and after the run's last
# step, once the worker no longer handles SIGTERM: it is exiting, where a SIGTERM lands when torchrun sends one
# to every worker still running as soon as one has exited.
STOP_MOMENTS = ("after-start-up", "mid-training", "during-a-save", "during-an-evaluation", "while-exiting")
# Runs of the loaded test: the moments in turn, the signalled rank alternating so that 10 runs give each rank
# each moment. 5 by default (104 to 151 s on 2 CPU cores, 2026-12-07); SCALETRAIN_LOADED_STOP_RUNS=20 to soak.
LOADED_RUNS = [
    (STOP_MOMENTS[run % 5], (run % 5 + run // 5) % 2)
    for run in range(int(os.environ.get("SCALETRAIN_LOADED_STOP_RUNS", "5")))
]
LAST_STEP = 8  # the while-exiting run's maxSteps
# torchrun checks on its workers every 0.1 s; here every 0.01 s. When one worker exits (80 included), torchrun
# sends SIGTERM to the others: sooner, it more often finds one that has not exited yet, still finalizing.
QUICK_TORCHRUN = {"PET_MONITOR_INTERVAL": "0.01"}


@pytest.mark.parametrize(
    ("moment", "rank"),
    LOADED_RUNS,
    ids=[f"{run}-{moment}-rank{rank}" for run, (moment, rank) in enumerate(LOADED_RUNS)],
)
def test_under_cpu_load_a_sigterm_to_one_worker_ends_every_rank_alike(tmp_path, start, moment, rank):
    """Every core busy beside the pod. Before the last step, the signalled rank only notes the signal; at the
    next step boundary every rank learns of it, saves that step's checkpoint with the others and exits 80.
    After it, the run ends as it would have: every rank exits 0. None dies of the signal (nor of the SIGTERM
    torchrun sends the others once one has exited), and none aborts because a peer stopped."""
    overrides, reached = _loaded_stop_plan(moment, tmp_path, rank)
    with cpu_load(longest_s=TRAINER_STEPS_S + LOADED_POD_STOP_S):
        pod = start(tmp_path, overrides, env=QUICK_TORCHRUN)
        pid = _wait_while_running(pod, lambda: reached(pod), f"the moment {moment} on rank {rank}")
        run = _stop(pod, pid, within_s=LOADED_POD_STOP_S)
    if moment == "while-exiting":
        assert run.returncode == 0, run.output[-3000:]  # torchrun prints its table of failed workers otherwise
        assert _termination_message(tmp_path)["result"] == "Succeeded"
        assert _checkpoints(tmp_path) == [f"step-{LAST_STEP:08d}"]
        return
    assert _worker_exit_codes(run.output) == {0: EXIT_PREEMPTED, 1: EXIT_PREEMPTED}, run.output[-3000:]
    assert run.returncode == EXIT_PREEMPTED
    step = _termination_message(tmp_path)["step"]
    assert run.output.count(_preempted_line(step)) == 2
    assert _checkpoints(tmp_path) == [f"step-{step:08d}"]
    assert (tmp_path / "checkpoints" / f"step-{step:08d}" / "manifest.json").is_file()


def _loaded_stop_plan(moment: str, directory: Path, rank: int):
    """The paced run's overrides for `moment`, and what tells that the pod reached it: the pid of the worker
    of `rank` to signal then, else None."""
    if moment == "after-start-up":
        return {}, lambda pod: (pid := _worker_if_started(pod, rank)) and _handles_sigterm(pid) and pid
    if moment == "mid-training":
        return {}, lambda pod: _logged_steps(directory) >= 5 and _worker(pod, rank)
    if moment == "during-a-save":
        options = GPT_OPTIONS | {"save_seconds": 2, "record_dir": str(directory)}
        model = {"name": "scaletrain_testing.plugins.faults:SlowSavingGPT", "options": options}
        saving = directory / f"saving-{rank}"
        return {"model": model, "checkpoint": {"everySteps": 5}}, lambda pod: saving.exists() and _worker(pod, rank)
    if moment == "during-an-evaluation":
        # 48 held-out samples, 24 slow reads per rank: the evaluation after step 5 takes half a second or more.
        evaluation = {"eval": {"everySteps": 5, "steps": 3, "fraction": 0.3}}
        return evaluation, lambda pod: _logged_steps(directory) >= 5 and _worker(pod, rank)
    # The last step logged, the worker's handlers gone: it is past its final save, exiting (its SIGTERM
    # handler is in from its start-up until then).
    return (
        {"maxSteps": LAST_STEP},
        lambda pod: (
            _logged_steps(directory) >= LAST_STEP
            and (pid := _worker(pod, rank))
            and _handles_sigterm(pid) is False
            and pid
        ),
    )


def _handles_sigterm(pid: int) -> bool | None:
    """Whether the process `pid` handles SIGTERM (SigCgt in /proc), None once it is gone: a worker does from the
    end of its start-up until its exit code is decided."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def _worker_exit_codes(output: str) -> dict[int, int]:
    """Each failed worker's exit code by rank, from the table torchrun prints when a worker exits non-zero."""
    entries = re.findall(r"rank\s+: (\d+) \(local_rank: \d+\)\s+exitcode\s+: (-?\d+)", output)
    return {int(rank): int(code) for rank, code in entries}
