"""The trainer end to end: real torch.distributed (gloo, CPU), 1 and 2 processes under torchrun.

Each run goes through `python -m scaletrain_trainer`; losses come from its metrics.jsonl.
"""

from __future__ import annotations

import json
import shutil

import pytest

from scaletrain_testing.trainer_runs import (
    BASE_CONFIG,
    FP32_EXACT,
    GPT_OPTIONS,
    SharedRuns,
    config_for,
    free_port,
    plugin_data,
    run_trainer,
)
from scaletrain_trainer.models.model import GPT


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs shared by several tests, made once."""
    return SharedRuns(tmp_path_factory.mktemp("runs"))


def _ok(run):
    assert run.returncode == 0, run.output[-3000:]
    return run


def test_ddp_two_processes_match_one_process(runs):
    two = _ok(runs("ddp-w2", checkpoints=True))
    one = _ok(runs("ddp-w1", nproc=1))
    assert len(two.losses()) == 20
    assert two.losses() == pytest.approx(one.losses(), **FP32_EXACT)
    assert two.losses()[-1] < two.losses()[0] - 0.5  # it learns


def test_accumulation_4x2_matches_1x8(runs):
    four_by_two = _ok(runs("ddp-w2-micro2", {"microBatchSize": 2}))
    one_by_eight = _ok(runs("ddp-w2-micro8", {"microBatchSize": 8}))
    assert four_by_two.losses() == pytest.approx(one_by_eight.losses(), **FP32_EXACT)
    assert four_by_two.losses() == pytest.approx(_ok(runs("ddp-w2", checkpoints=True)).losses(), **FP32_EXACT)


def test_fsdp_matches_ddp(runs):
    fsdp = _ok(runs("fsdp-w2", {"strategy": "fsdp"}))
    ddp = _ok(runs("ddp-w2", checkpoints=True))
    assert fsdp.losses() == pytest.approx(ddp.losses(), **FP32_EXACT)
    # Clipping uses the true global norm, not the norm of this rank's shard.
    assert [r["gradNorm"] for r in fsdp.metrics()] == pytest.approx([r["gradNorm"] for r in ddp.metrics()], rel=1e-5)
    assert "fsdp" in fsdp.output


def test_ignored_tokens_are_normalized_by_the_global_count(runs):
    """Uneven valid-token counts per sample, micro-batch and rank: 2 ranks still match 1."""
    masked = {"data": plugin_data("MaskedSynthetic")}
    two, one = _ok(runs("masked-w2", masked)), _ok(runs("masked-w1", masked, nproc=1))
    assert two.losses() == pytest.approx(one.losses(), **FP32_EXACT)


def test_fsdp_with_activation_checkpointing_and_bf16_runs(runs):
    run = _ok(runs("fsdp-bf16-ac", {"strategy": "fsdp", "precision": "bf16", "activationCheckpointing": True}))
    baseline = runs("ddp-w2", checkpoints=True).losses()
    assert run.losses() == pytest.approx(baseline, rel=5e-2)


def test_bf16_autocast_tracks_fp32_loosely(runs):
    bf16 = _ok(runs("ddp-bf16", {"precision": "bf16"}))
    fp32 = runs("ddp-w2", checkpoints=True).losses()
    assert bf16.losses() == pytest.approx(fp32, rel=5e-2)
    assert bf16.losses() != pytest.approx(fp32, rel=1e-7)  # it really ran in bf16


@pytest.fixture(scope="module")
def crashed_run(runs):
    """A 2-process run whose rank 1 dies (exit 13) during step 11, after the step-10 checkpoint."""
    overrides = {"data": plugin_data("CrashingSynthetic", crash_at_read=8 * 10 + 3, crash_rank=1)}
    return runs("crash-w2", overrides, checkpoints=True)


def test_a_dead_peer_fails_the_run_instead_of_hanging(crashed_run):
    assert crashed_run.returncode != 0
    assert "exitcode  : 13" in crashed_run.output
    assert [r["step"] for r in crashed_run.metrics()] == list(range(1, 11))


def _resume(runs, crashed_run, name, nproc, overrides=None):
    directory = crashed_run.directory.parent / name
    directory.mkdir()
    shutil.copytree(crashed_run.directory / "checkpoints", directory / "checkpoints")
    shutil.copytree(crashed_run.directory / "out", directory / "out")
    run = run_trainer(directory, config_for(directory, overrides, checkpoints=True), nproc)
    return _ok(run)


def test_resume_is_exact(runs, crashed_run):
    assert sorted(p.name for p in (crashed_run.directory / "checkpoints").iterdir()) == [
        "step-00000005",
        "step-00000010",
    ]
    resumed = _resume(runs, crashed_run, "resume-w2", nproc=2)
    straight = runs("ddp-w2", checkpoints=True).metrics()
    records = resumed.metrics()
    assert [r["step"] for r in records] == list(range(1, 21))  # 1-10 before the crash, 11-20 after
    assert "resumed from" in resumed.output and "step-00000010" in resumed.output
    assert [r["loss"] for r in records] == pytest.approx([r["loss"] for r in straight], rel=1e-6, abs=1e-7)
    assert records[-1]["loss"] == straight[-1]["loss"]
    kept = sorted(p.name for p in (resumed.directory / "checkpoints").iterdir())
    assert kept == ["step-00000015", "step-00000020"]  # keep: 2


def test_resume_a_ddp_checkpoint_with_fsdp(runs, crashed_run):
    resumed = _resume(runs, crashed_run, "resume-fsdp", nproc=2, overrides={"strategy": "fsdp"})
    straight = runs("ddp-w2", checkpoints=True).losses()
    assert resumed.losses()[10:] == pytest.approx(straight[10:], **FP32_EXACT)


@pytest.mark.parametrize("nproc", [1, 4], ids=["smaller", "larger"])
def test_resume_at_another_world_size(runs, crashed_run, nproc):
    """A gang that shrinks after a loss (2 ranks to 1) or grows back (to 4): the same losses from the checkpoint on."""
    resumed = _resume(runs, crashed_run, f"resume-w{nproc}", nproc=nproc)
    straight = runs("ddp-w2", checkpoints=True).losses()
    assert [r["step"] for r in resumed.metrics()] == list(range(1, 21))
    assert resumed.losses()[10:] == pytest.approx(straight[10:], **FP32_EXACT)


def test_data_workers_change_nothing_and_resume_exactly(runs, crashed_run):
    """Two loader processes per rank: the same samples in the same order, straight and after a resume."""
    workers = {"data": {"workers": 2}}
    straight = runs("ddp-w2", checkpoints=True).losses()
    assert _ok(runs("ddp-w2-workers", workers)).losses() == straight
    assert _resume(runs, crashed_run, "resume-w2-workers", nproc=2, overrides=workers).losses() == straight


def test_compiled_training_resumes_exactly_and_matches_eager(runs):
    """torch.compile per block (inductor on CPU, DDP, fp32). A compiled run that dies after its step-10
    checkpoint, resumed compiled: the eager run's losses (steps 1-10 from before the crash, 11-20 after).
    Each compiled run spends most of its time compiling: 50-60 s for this test on 2 CPUs with an empty
    inductor cache, half that with a warm one."""
    crashing = {"compile": True, "data": plugin_data("CrashingSynthetic", crash_at_read=8 * 10 + 3, crash_rank=1)}
    crashed = runs("compile-crash-w2", crashing, checkpoints=True)
    assert crashed.returncode != 0 and len(crashed.metrics()) == 10
    resumed = _resume(runs, crashed, "compile-resume-w2", nproc=2, overrides={"compile": True})
    assert "step-00000010" in resumed.output
    assert resumed.losses() == pytest.approx(runs("ddp-w2", checkpoints=True).losses(), **FP32_EXACT)


def test_compile_with_fsdp_activation_checkpointing_and_bf16(runs):
    """The blocks compiled inside their checkpoint wrappers, then sharded; bf16 by FSDP's policy."""
    run = _ok(
        runs(
            "fsdp-bf16-ac-compile",
            {"strategy": "fsdp", "precision": "bf16", "activationCheckpointing": True, "compile": True},
        )
    )
    assert run.losses() == pytest.approx(runs("ddp-w2", checkpoints=True).losses(), rel=5e-2)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_fp16_skips_the_step_on_all_ranks_when_one_rank_sees_inf(runs, tmp_path, strategy):
    record_dir = tmp_path / "checksums"
    record_dir.mkdir()
    model = {
        "name": "scaletrain_testing.plugins.faults:PoisonedGPT",
        "options": GPT_OPTIONS | {"poison_step": 4, "poison_rank": 1, "micro_steps": 2, "record_dir": str(record_dir)},
    }
    run = _ok(runs(f"fp16-inf-{strategy}", {"precision": "fp16", "strategy": strategy, "model": model, "maxSteps": 6}))
    records = {r["step"]: r for r in run.metrics()}
    assert records[4]["skipped"] is True and records[4]["lossScale"] == records[3]["lossScale"] / 2
    assert not any(records[step]["skipped"] for step in (1, 2, 3, 5, 6))
    for rank in (0, 1):
        checksums = [
            json.loads(line)["checksum"] for line in (record_dir / f"rank{rank}.jsonl").read_text().splitlines()
        ]
        # checksums[s] = parameters as step s+1 starts: unchanged across the skipped step 4 only.
        changed = [checksums[s + 1] != checksums[s] for s in range(len(checksums) - 1)]
        assert changed == [True, True, True, False, True], (rank, checksums)


def test_metrics_and_termination_message(runs, tmp_path):
    termination_log = tmp_path / "termination-log"
    termination_log.touch()
    run = _ok(runs("ddp-w2-termlog", {"maxSteps": 4}, env={"SCALETRAIN_TERMINATION_LOG": str(termination_log)}))
    shape = BASE_CONFIG["model"]
    model = GPT(shape["vocabSize"], shape["contextLength"], shape["layers"], shape["heads"], shape["width"])
    for record in run.metrics():
        logged = {"step", "loss", "lr", "gradNorm", "samplesPerSecond", "tokensPerSecond", "tflopsPerDevice"}
        assert logged <= set(record)
        assert record["samplesPerSecond"] > 0 and record["tokensPerSecond"] == pytest.approx(
            record["samplesPerSecond"] * 16
        )
        # Per device: the model's FLOPs per token over the two processes. No MFU: a CPU has no peak in the table.
        per_device = record["tokensPerSecond"] * model.flops_per_token(shape["contextLength"]) / 2
        assert record["tflopsPerDevice"] == pytest.approx(per_device / 1e12) and "mfu" not in record
    summary = json.loads(termination_log.read_text())
    assert summary["result"] == "Succeeded" and summary["step"] == 4 and summary["maxSteps"] == 4
    assert summary["loss"] == run.losses()[-1]


def test_config_error_fails_fast_on_every_rank(runs):
    run = runs("bad-accumulation", {"globalBatchSize": 20})  # 20 is not divisible by 4 × 2
    assert run.returncode != 0
    message = "globalBatchSize: 20 is not divisible by microBatchSize × world size (4 × 2 = 8)"
    assert run.output.count(message) == 2  # both ranks
    assert "exitcode  : 78" in run.output


def test_custom_model_and_data_example_runs_with_fsdp_and_checkpointing(tmp_path):
    import yaml

    from scaletrain_testing.jobs import REPO

    job = yaml.safe_load((REPO / "examples" / "custom-model.yaml").read_text())
    config = job["spec"]["training"] | {"strategy": "fsdp", "activationCheckpointing": True, "maxSteps": 20}
    config |= {"outputDir": str(tmp_path / "out"), "metricsPort": free_port()}
    run = run_trainer(tmp_path, config, nproc=2, env={"PYTHONPATH": str(REPO / "examples" / "custom")})
    assert run.returncode == 0, run.output[-3000:]
    losses = run.losses()
    assert len(losses) == 2 and losses[-1] < losses[0]
    assert not {"tokensPerSecond", "tflopsPerDevice"} & set(run.metrics()[0])  # a classifier, not a language model
