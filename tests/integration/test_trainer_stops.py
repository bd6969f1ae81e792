"""Runs that must stop rather than go on: one whose loss or gradients go non-finite stops at the first
host read after it (a log step or a save), exits EXIT_NON_FINITE naming the step, and never
checkpoints the poisoned state; one that would resume another optimizer's checkpoint is refused."""

from __future__ import annotations

import json

from scaletrain_trainer.exit_codes import EXIT_CONFIG_ERROR, EXIT_NON_FINITE
from support.trainer_runs import GPT_OPTIONS, config_for, run_trainer

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
    model = {"name": "support.plugins.faults:PoisonedGPT", "options": GPT_OPTIONS | poison}
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
