"""LoRA (`model.lora`) in the trainer, end to end: only the adapters train, at world sizes 1 and 2 and under FSDP2
alike; checkpoints hold the adapters and their optimizer state alone, and a resume from one is exact; on a Hugging
Face model the first step's loss is the pretrained model's (the adapters start as a zero update)."""

from __future__ import annotations

import functools
import shutil

import pytest
import torch.distributed.checkpoint as dcp

from scaletrain_testing.hf_models import (
    assert_exports_give_the_trained_logits,
    instruction_records,
    mean_token_loss,
    save_tiny_llama,
    save_tiny_tokenizer,
    synthetic_options,
    tiny_llama_model,
    write_jsonl,
)
from scaletrain_testing.trainer_runs import BASE_CONFIG, FP32_EXACT, SharedRuns, config_for, run_trainer
from scaletrain_trainer.export import EXIT_CANNOT_EXPORT
from scaletrain_trainer.export import main as export_main

pytestmark = pytest.mark.integration

LORA = {"rank": 4, "alpha": 8.0}
# Constant LR, so that a run resumed at step 15 follows the straight run's schedule.
STRAIGHT = {
    "maxSteps": 20,
    "scheduler": {"name": "constant", "warmupSteps": 1},
    "model": BASE_CONFIG["model"] | {"lora": LORA},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return functools.partial(SharedRuns(tmp_path_factory.mktemp("lora-runs"), STRAIGHT), checkpoints=True)


def _ok(run):
    assert run.returncode == 0, run.output[-3000:]
    return run


def test_adapters_train_alike_at_world_sizes_1_and_2_and_under_fsdp(runs):
    one, two = _ok(runs("w1", nproc=1)), _ok(runs("w2"))
    fsdp = _ok(runs("fsdp-w2", {"strategy": "fsdp"}))
    assert two.losses() == pytest.approx(one.losses(), **FP32_EXACT)
    assert fsdp.losses() == pytest.approx(two.losses(), **FP32_EXACT)
    assert two.losses()[-1] < two.losses()[0] - 0.03  # the adapters learn
    assert "parameters (1536 trained)" in two.output  # 2 blocks × (qkv + proj) × rank 4 × (in + out)


def test_a_checkpoint_holds_the_adapters_and_their_optimizer_state_alone(runs):
    saved = dcp.FileSystemReader(runs("w2").directory / "checkpoints" / "step-00000020").read_metadata()
    model_keys = [key for key in saved.state_dict_metadata if key.startswith("model.")]
    optimizer_keys = [key for key in saved.state_dict_metadata if key.startswith("optimizer.state.")]
    assert model_keys and all(".lora_" in key for key in model_keys)
    assert optimizer_keys and all(".lora_" in key for key in optimizer_keys)


def test_a_run_resumed_from_an_adapter_checkpoint_continues_exactly(runs, tmp_path):
    straight = runs("w2")
    shutil.copytree(straight.directory / "checkpoints", tmp_path / "checkpoints")
    shutil.rmtree(tmp_path / "checkpoints" / "step-00000020")  # resume from step 15
    resumed = _ok(run_trainer(tmp_path, config_for(tmp_path, STRAIGHT, checkpoints=True), nproc=2))
    assert "step-00000015 at step 15" in resumed.output
    assert resumed.losses() == straight.losses()[15:]


def test_lora_on_a_hugging_face_model_starts_from_the_pretrained_loss(tmp_path):
    saved = save_tiny_llama(tmp_path / "pretrained")
    overrides = {
        "maxSteps": 5,
        "model": tiny_llama_model(pretrained=str(tmp_path / "pretrained")) | {"lora": LORA},
        "data": {"source": "synthetic", "syntheticSamples": synthetic_options()["samples"]},
        "optimizer": {"lr": 0.05},
    }
    run = _ok(run_trainer(tmp_path / "run", config_for(tmp_path / "run", overrides), nproc=2))
    assert run.losses()[0] == pytest.approx(mean_token_loss(saved), **FP32_EXACT)  # B = 0: the model unchanged
    assert run.losses()[-1] < run.losses()[0]
    # Llama's attention projections by default, rank 4 × (in + out) each: q and o 64 → 64, k and v 64 → 32 (2 KV
    # heads), in 2 layers.
    assert "parameters (3584 trained)" in run.output


@pytest.fixture(scope="module")
def instruction_model(tmp_path_factory):
    """The tiny Llama with its tokenizer, and instruction records to train on and to hold out."""
    directory = tmp_path_factory.mktemp("instructions")
    save_tiny_llama(directory / "model")
    save_tiny_tokenizer(directory / "model")
    train = write_jsonl(directory / "train.jsonl", instruction_records(256, seed=1))
    held_out = write_jsonl(directory / "held-out.jsonl", instruction_records(64, seed=2))
    return directory / "model", train, held_out


# Packed, about 4 records share a sample of 64 tokens, each attending to itself alone.
@pytest.mark.parametrize(("packing", "context"), [(False, 16), (True, 64)], ids=["a-record-a-sample", "packed"])
def test_lora_on_instructions_trains_alike_at_world_sizes_1_and_2_and_the_held_out_loss_falls(
    instruction_model, tmp_path, packing, context
):
    model, train, held_out = instruction_model
    overrides = {
        "maxSteps": 30,
        "model": tiny_llama_model(pretrained=str(model)) | {"lora": LORA, "contextLength": context},
        "data": {"source": "instructions", "path": str(train), "packing": packing},
        "eval": {"path": str(held_out), "everySteps": 15, "steps": 2},
        "optimizer": {"lr": 0.02},
    }
    runs = {
        nproc: _ok(run_trainer(tmp_path / f"w{nproc}", config_for(tmp_path / f"w{nproc}", overrides), nproc=nproc))
        for nproc in (1, 2)
    }
    assert runs[2].losses() == pytest.approx(runs[1].losses(), **FP32_EXACT)  # masked tokens counted exactly
    held_out_losses = [record["evalLoss"] for record in runs[2].metrics() if "evalLoss" in record]
    assert len(held_out_losses) == 2 and held_out_losses[-1] < held_out_losses[0]


def test_an_export_merged_or_as_an_adapter_loads_with_the_trained_logits(instruction_model, tmp_path):
    model, train, _ = instruction_model
    overrides = {
        "maxSteps": 10,
        "model": tiny_llama_model(pretrained=str(model)) | {"lora": LORA},
        "data": {"source": "instructions", "path": str(train)},
        "optimizer": {"lr": 0.02},
    }
    run = _ok(run_trainer(tmp_path / "run", config_for(tmp_path / "run", overrides, checkpoints=True), nproc=2))
    assert_exports_give_the_trained_logits(run.directory / "checkpoints" / "step-00000010", model, LORA, tmp_path)


def test_exporting_the_built_in_gpts_adapters_is_refused_with_the_reason(runs, capsys, tmp_path):
    checkpoint = _ok(runs("w2")).directory / "checkpoints" / "step-00000020"
    assert export_main([str(checkpoint), str(tmp_path / "out"), "--adapter"]) == EXIT_CANNOT_EXPORT
    assert "holds model 'gpt'" in capsys.readouterr().err
