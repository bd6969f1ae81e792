"""Runs that must stop rather than go on: one whose loss or gradients go non-finite stops at the first
host read after it (a log step or a save), exits EXIT_NON_FINITE naming the step and the last finite
checkpoint, and never checkpoints the poisoned state; with onNonFinite skip, one whose updates are dropped
maxNonFiniteSteps times in a row, or that ends on a non-finite loss, does the same, and saves nothing while
updates are dropped. One that would resume another optimizer's checkpoint is refused."""

from __future__ import annotations

import json
import math
import re

from scaletrain_testing.trainer_runs import GPT_OPTIONS, config_for, run_trainer
from scaletrain_trainer.contract.exit_codes import EXIT_CONFIG_ERROR, EXIT_NON_FINITE, EXIT_WRITE_ERROR

# SGD at lr 10 without clipping: the loss explodes and is NaN within about ten steps.
DIVERGING = {"optimizer": {"name": "sgd", "lr": 10}, "gradClipNorm": 0, "maxSteps": 30, "logEverySteps": 1}


def _termination_message(directory):
    return json.loads((directory / "termination-log").read_text())


def _env(directory):
    return {"SCALETRAIN_TERMINATION_LOG": str(directory / "termination-log")}


def _run(directory, overrides, nproc=1):
    directory.mkdir(parents=True)
    (directory / "termination-log").touch()
    return run_trainer(directory, config_for(directory, overrides, checkpoints=True), nproc, env=_env(directory))


def test_a_diverging_run_stops_within_a_step_and_keeps_only_finite_checkpoints(tmp_path):
    run = _run(tmp_path / "sgd", DIVERGING | {"checkpoint": {"everySteps": 2, "keep": 30}})
    assert run.returncode == EXIT_NON_FINITE, run.output[-2000:]
    message = _termination_message(run.directory)
    first_bad = message["firstNonFiniteStep"]
    assert message["result"] == "NonFinite" and 1 < first_bad < 30
    assert f"not finite at step {first_bad}: the run diverged" in run.output
    logged = [record["step"] for record in run.metrics()]
    assert logged == list(range(1, first_bad))  # every step before it logged, with a finite loss; none after
    saved = _saved(run.directory)
    assert saved and max(saved) < first_bad and all(step % 2 == 0 for step in saved)


def test_every_rank_stops_at_the_same_step(tmp_path):
    run = _run(tmp_path / "sgd-w2", DIVERGING | {"globalBatchSize": 8, "microBatchSize": 2}, nproc=2)
    assert f"exitcode  : {EXIT_NON_FINITE}" in run.output and run.returncode != 0
    # Searched in the whole output, not line by line: the two ranks write to one pipe, and their lines may meet.
    stops = re.findall(
        r"scaletrain: the loss or the gradients were not finite at step (\d+): the run diverged", run.output
    )
    assert len(stops) == 2 and len(set(stops)) == 1, stops


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
    second = run_trainer(directory, config, env=_env(directory))
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
    prefix = ("prlimit", f"--fsize={64 * 1024}", "--")
    run = run_trainer(directory, config, nproc=2, env=_env(directory), prefix=prefix)
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


def test_on_non_finite_skip_drops_the_poisoned_updates_and_saves_once_an_update_applies(tmp_path):
    overrides = {"onNonFinite": "skip", "model": _poisoned(str(tmp_path), 4, 5), "maxSteps": 8}
    run = _run(tmp_path / "skip", overrides | {"checkpoint": {"everySteps": 4, "keep": 10}})
    assert run.returncode == 0, run.output[-2000:]
    assert [record["step"] for record in run.metrics() if record.get("skipped")] == [4, 5]
    dropped = "step 5: the loss or the gradients were not finite; update dropped (2 in a row, 3 stop the run)"
    assert dropped in run.output
    # Each line: this rank's parameters as a step starts (0-based). Steps 4 and 5 changed nothing.
    weights = [json.loads(line)["checksum"] for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert weights[3] == weights[4] == weights[5] != weights[6]
    assert weights[2] != weights[3]
    # The save due at step 4, a dropped one, waited for step 6, the next whose update applied.
    assert _saved(run.directory) == [6, 8]


def test_on_non_finite_skip_gives_up_after_max_non_finite_steps_dropped_updates_in_a_row(tmp_path):
    overrides = {"onNonFinite": "skip", "model": _poisoned(str(tmp_path), 3, 40), "maxSteps": 20}
    run = _run(tmp_path / "skip", overrides | {"checkpoint": {"everySteps": 2}})
    assert run.returncode == EXIT_NON_FINITE, run.output[-2000:]
    message = _termination_message(run.directory)
    assert message == {"result": "NonFinite", "firstNonFiniteStep": 3, "lastFiniteCheckpointStep": 2, "step": 5}
    assert _saved(run.directory) == [2]  # none at step 4: its update was dropped


def test_on_non_finite_skip_stops_a_loss_that_stays_nan_and_keeps_the_last_finite_checkpoint(tmp_path):
    """The loss is NaN from step 9 on, whatever the batch. The run stops at the third NaN step, and neither it
    nor a gang restarted from its checkpoint leaves one past step 5: the crash-loop guard's no progress."""
    directory = tmp_path / "nan"
    overrides = {"onNonFinite": "skip", "model": _diverging(9), "maxSteps": 40}
    run = _run(directory, overrides | {"checkpoint": {"everySteps": 5, "keep": 2}})
    assert run.returncode == EXIT_NON_FINITE, run.output[-2000:]
    message = _termination_message(directory)
    assert message == {"result": "NonFinite", "firstNonFiniteStep": 9, "lastFiniteCheckpointStep": 5, "step": 11}
    assert "not finite at step 9: the run diverged (the last finite checkpoint: step 5)" in run.output
    assert _saved(directory) == [5]  # step 10's save: its update was dropped; keep: 2 pruned nothing
    losses = {record["step"]: record["loss"] for record in run.metrics()}
    assert all(math.isfinite(losses[step]) for step in range(1, 9)) and math.isnan(losses[9])
    assert max(losses) == 10  # the third NaN step stopped the run before its log

    (directory / "termination-log").write_text("")
    config = config_for(directory, overrides | {"checkpoint": {"everySteps": 5, "keep": 2}}, checkpoints=True)
    again = run_trainer(directory, config, env=_env(directory))
    assert again.returncode == EXIT_NON_FINITE, again.output[-2000:]
    assert "resumed from" in again.output and _termination_message(directory)["lastFiniteCheckpointStep"] == 5
    assert _saved(directory) == [5]


def test_a_run_whose_last_loss_is_not_finite_does_not_succeed(tmp_path):
    """Steps 9 and 10 of 10 NaN: fewer than maxNonFiniteSteps, but the run ends on them."""
    overrides = {"onNonFinite": "skip", "maxNonFiniteSteps": 5, "model": _diverging(9), "maxSteps": 10}
    run = _run(tmp_path / "nan-end", overrides | {"checkpoint": {"everySteps": 5}})
    assert run.returncode == EXIT_NON_FINITE, run.output[-2000:]
    message = _termination_message(run.directory)
    assert message == {"result": "NonFinite", "firstNonFiniteStep": 9, "lastFiniteCheckpointStep": 5, "step": 10}
    assert _saved(run.directory) == [5]  # no final save


def _diverging(nan_from_step):
    """A GPT whose loss is NaN from `nan_from_step` (1-based) on."""
    options = {"nan_from_step": nan_from_step, "micro_steps": 4}
    return {"name": "scaletrain_testing.plugins.faults:DivergingGPT", "options": GPT_OPTIONS | options}


def _saved(directory):
    """The steps of the complete checkpoints in directory/checkpoints."""
    return sorted(int(path.name.removeprefix("step-")) for path in (directory / "checkpoints").glob("step-*[0-9]"))
