"""Runs that must stop rather than go on: one whose loss or gradients go non-finite stops at the first
host read after it (a log step or a save), exits EXIT_NON_FINITE naming the step, and never
checkpoints the poisoned state; one that would resume another optimizer's checkpoint is refused."""

from __future__ import annotations

import json

from scaletrain_testing.trainer_runs import GPT_OPTIONS, config_for, run_trainer
from scaletrain_trainer.exit_codes import EXIT_CONFIG_ERROR, EXIT_NON_FINITE, EXIT_WRITE_ERROR

# SGD at lr 10 without clipping: the loss explodes and is NaN within about ten steps.
DIVERGING = {"optimizer": {"name": "sgd", "lr": 10}, "gradClipNorm": 0, "maxSteps": 30, "logEverySteps": 1}


def _termination_message(directory):
    return json.loads((directory / "termination-log").read_text())


def _run(directory, overrides, nproc=1):
    directory.mkdir(parents=True)
    (directory / "termination-log").touch()
    config = config_for(directory, overrides, checkpoints=True)
    return run_trainer(directory, config, nproc, env={"SCALETRAIN_TERMINATION_LOG": str(directory / "termination-log")})


def test_a_diverging_run_stops_within_a_step_and_keeps_only_finite_checkpoints(tmp_path):
    run = _run(tmp_path / "sgd", DIVERGING | {"checkpoint": {"everySteps": 2, "keep": 30}})
    assert run.returncode == EXIT_NON_FINITE, run.output[-2000:]
    message = _termination_message(run.directory)
    first_bad = message["firstNonFiniteStep"]
    assert message["result"] == "NonFinite" and 1 < first_bad < 30
    assert f"not finite at step {first_bad}: the run diverged" in run.output
    logged = [record["step"] for record in run.metrics()]
    assert logged == list(range(1, first_bad))  # every step before it logged, with a finite loss; none after
    saved = sorted(int(p.name.removeprefix("step-")) for p in (run.directory / "checkpoints").glob("step-*"))
    assert saved and max(saved) < first_bad and all(step % 2 == 0 for step in saved)


def test_every_rank_stops_at_the_same_step(tmp_path):
    run = _run(tmp_path / "sgd-w2", DIVERGING | {"globalBatchSize": 8, "microBatchSize": 2}, nproc=2)
    assert f"exitcode  : {EXIT_NON_FINITE}" in run.output and run.returncode != 0
    stops = [line for line in run.output.splitlines() if "the run diverged" in line and "scaletrain:" in line]
    assert len(stops) == 2 and len({line.split("step ")[1] for line in stops}) == 1


def test_fp16_whose_loss_scale_collapses_stops_instead_of_skipping_forever(tmp_path):
    poison = {"poison_step": 1, "poison_until": 40, "poison_rank": 0, "micro_steps": 4, "record_dir": str(tmp_path)}
    model = {"name": "scaletrain_testing.plugins.faults:PoisonedGPT", "options": GPT_OPTIONS | poison}
    run = _run(tmp_path / "fp16", {"precision": "fp16", "model": model, "maxSteps": 40, "logEverySteps": 1})
    assert run.returncode == EXIT_NON_FINITE, run.output[-2000:]
    records = run.metrics()
    assert all(record["skipped"] for record in records) and records[-1]["lossScale"] >= 1
    # 65536 halves once per skipped step: below 1 at the 17th.
    assert _termination_message(run.directory)["firstNonFiniteStep"] == 17


def test_resuming_another_optimizers_checkpoint_is_refused_with_the_field_named(tmp_path):
    directory = tmp_path / "switch"
    first = _run(directory, {"maxSteps": 4, "checkpoint": {"everySteps": 2}})
    assert first.returncode == 0, first.output[-2000:]
    (directory / "termination-log").write_text("")
    config = config_for(directory, {"maxSteps": 6, "optimizer": {"name": "sgd"}}, checkpoints=True)
    env = {"SCALETRAIN_TERMINATION_LOG": str(directory / "termination-log")}
    second = run_trainer(directory, config, env=env)
    assert second.returncode == EXIT_CONFIG_ERROR, second.output[-2000:]
    assert "optimizer.name: " in second.output and "was written with another optimizer" in second.output
    assert "exp_avg" in second.output and "momentum_buffer" in second.output


def test_a_checkpoint_the_disk_cannot_take_is_retried_once_then_a_one_line_write_error(tmp_path):
    """A file size limit (RLIMIT_FSIZE) below a shard's size makes every save fail with EFBIG, as a full
    disk fails with ENOSPC."""
    directory = tmp_path / "efbig"
    directory.mkdir()
    (directory / "termination-log").touch()
    config = config_for(directory, {"maxSteps": 4, "checkpoint": {"everySteps": 2}}, checkpoints=True)
    env = {"SCALETRAIN_TERMINATION_LOG": str(directory / "termination-log")}
    run = run_trainer(directory, config, nproc=2, env=env, prefix=("prlimit", f"--fsize={64 * 1024}", "--"))
    assert f"exitcode  : {EXIT_WRITE_ERROR}" in run.output, run.output[-3000:]
    assert "saving the checkpoint at step 2 failed: file too large (EFBIG)" in run.output
    assert "trying once more" in run.output and "Traceback" not in run.output.split("trying once more")[1]
    message = _termination_message(directory)
    assert message["result"] == "WriteError"
    checkpoints = directory / "checkpoints"
    assert message["cause"] == f"cannot save the checkpoint at step 2 in {checkpoints}: file too large (EFBIG)"
    assert not list(checkpoints.glob("step-*[0-9]"))


def _poisoned(record_dir, first, last):
    """A GPT whose gradients are infinite in steps first..last (1-based)."""
    poison = {"poison_step": first, "poison_until": last, "poison_rank": 0, "micro_steps": 4}
    return {
        "name": "scaletrain_testing.plugins.faults:PoisonedGPT",
        "options": GPT_OPTIONS | poison | {"record_dir": record_dir},
    }


def test_on_non_finite_skip_drops_the_poisoned_updates_and_trains_on(tmp_path):
    run = _run(tmp_path / "skip", {"onNonFinite": "skip", "model": _poisoned(str(tmp_path), 3, 4), "maxSteps": 8})
    assert run.returncode == 0, run.output[-2000:]
    assert [record["step"] for record in run.metrics() if record.get("skipped")] == [3, 4]
    assert "step 4: the gradients were not finite; update dropped (2 in a row)" in run.output
    # Each line: this rank's parameters as a step starts (0-based). Steps 3 and 4 changed nothing.
    weights = [json.loads(line)["checksum"] for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert weights[2] == weights[3] == weights[4] != weights[5]
    assert weights[1] != weights[2]


def test_on_non_finite_skip_gives_up_after_ten_dropped_updates_in_a_row(tmp_path):
    run = _run(tmp_path / "skip", {"onNonFinite": "skip", "model": _poisoned(str(tmp_path), 3, 40), "maxSteps": 20})
    assert run.returncode == EXIT_NON_FINITE, run.output[-2000:]
    assert _termination_message(run.directory)["firstNonFiniteStep"] == 3
    saved = sorted(p.name for p in (run.directory / "checkpoints").glob("step-*"))
    assert saved == ["step-00000005", "step-00000010"]  # the weights stayed finite: dropped updates are harmless
