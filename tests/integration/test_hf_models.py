"""Hugging Face causal LMs (`model.name: hf`) in the trainer, end to end: a tiny Llama (2 layers, width 64,
vocabulary 256) trained from weights saved in the test, under DDP and FSDP at world sizes 1 and 2, resumed
after a crash, and exported to a Hugging Face directory; plus its config errors, FLOPs and autocast, in
process. Losses come from each run's metrics.jsonl.
"""

from __future__ import annotations

import functools
import json
import shutil

import pytest
import torch

from scaletrain_testing.hf_models import (
    TINY_LLAMA,
    checkpoint_weights,
    mean_token_loss,
    save_tiny_llama,
    synthetic_options,
    tiny_llama_model,
)
from scaletrain_testing.trainer_runs import FP32_EXACT, SharedRuns
from scaletrain_trainer.contract.config import ModelConfig
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.export import EXIT_CANNOT_EXPORT
from scaletrain_trainer.export import main as export_main
from scaletrain_trainer.models.model import build_model

pytestmark = pytest.mark.integration

STEPS = 10  # a checkpoint every 5 (config_for), so the crashed run below has one to resume from
FSDP_WITH_CHECKPOINTING = {"strategy": "fsdp", "activationCheckpointing": True}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny Llama saved with save_pretrained: the weights every run below starts from."""
    directory = tmp_path_factory.mktemp("pretrained")
    return directory, save_tiny_llama(directory)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, pretrained):
    """Runs shared by several tests, made once: the tiny Llama from `pretrained`, on its synthetic data."""
    directory_of_weights, _ = pretrained
    base = {
        "maxSteps": STEPS,
        "model": tiny_llama_model(pretrained=str(directory_of_weights)),
        "data": {"source": "synthetic", "syntheticSamples": synthetic_options()["samples"]},
    }
    # Each run checkpoints: a test resumes from a copy of one.
    return functools.partial(SharedRuns(tmp_path_factory.mktemp("hf-runs"), base), checkpoints=True)


def _ok(run):
    assert run.returncode == 0, run.output[-3000:]
    return run


def test_training_starts_from_the_pretrained_weights_and_learns(runs, pretrained):
    """Step 1 trains on the whole data set (one global batch), so its loss is the saved model's mean loss;
    under FSDP rank 0 alone reads the weights, and the other rank gets them (rotary tables too) from it."""
    _, saved = pretrained
    expected = mean_token_loss(saved)
    fsdp = _ok(runs("fsdp-w2-ac", FSDP_WITH_CHECKPOINTING))
    assert len(fsdp.losses()) == STEPS and fsdp.losses()[0] == pytest.approx(expected, **FP32_EXACT)
    assert fsdp.losses()[-1] < fsdp.losses()[0] - 0.5  # it learns


def test_fsdp_with_activation_checkpointing_matches_ddp(runs):
    fsdp, ddp = _ok(runs("fsdp-w2-ac", FSDP_WITH_CHECKPOINTING)), _ok(runs("ddp-w2"))
    assert fsdp.losses() == pytest.approx(ddp.losses(), **FP32_EXACT)
    assert [r["gradNorm"] for r in fsdp.metrics()] == pytest.approx([r["gradNorm"] for r in ddp.metrics()], rel=1e-5)
    assert "fsdp" in fsdp.output


def test_resumed_at_world_size_1_from_a_world_size_2_checkpoint_it_equals_the_straight_run(runs):
    """The straight 2-rank run, cut back to its step-5 checkpoint and resumed by one process, trains steps
    6-10 as the 2 ranks did: exact resume, and world size 1 == 2 (fp32 sums in another order only). (A crash
    before the resume is tested with the GPT, test_trainer_distributed.py.)"""
    straight = _ok(runs("ddp-w2"))
    cut_back = straight.directory.parent / "resume-w1"
    shutil.copytree(straight.directory, cut_back)
    shutil.rmtree(cut_back / "checkpoints" / f"step-{STEPS:08d}")
    metrics = cut_back / "out" / "metrics.jsonl"
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:5]))
    resumed = _ok(runs("resume-w1", nproc=1))
    assert "resumed from" in resumed.output and "step-00000005 at step 5" in resumed.output
    records = resumed.metrics()
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))  # 1-5 from the cut-back run, 6-10 resumed
    assert [r["loss"] for r in records] == pytest.approx(straight.losses(), **FP32_EXACT)


def test_export_reloads_with_the_trained_logits(runs, pretrained, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    checkpoint = _ok(runs("ddp-w2")).directory / "checkpoints" / f"step-{STEPS:08d}"
    output = tmp_path / "exported"
    assert export_main([str(checkpoint), str(output)]) == 0  # what `python -m scaletrain_trainer.export` runs
    assert {"config.json", "model.safetensors"} <= {p.name for p in output.iterdir()}

    reloaded = AutoModelForCausalLM.from_pretrained(output, local_files_only=True).eval()
    from_checkpoint = AutoModelForCausalLM.from_config(AutoConfig.for_model(**TINY_LLAMA)).eval()
    from_checkpoint.load_state_dict(checkpoint_weights(checkpoint, tmp_path))  # strict: the same names
    inputs = torch.arange(TINY_LLAMA["vocab_size"]).view(16, 16)
    with torch.no_grad():
        expected = from_checkpoint(input_ids=inputs).logits
        assert torch.equal(reloaded(input_ids=inputs).logits, expected)
        _, saved = pretrained
        assert not torch.allclose(saved(input_ids=inputs).logits, expected)  # the weights were trained


def test_export_refuses_what_is_no_hf_checkpoint(tmp_path, capsys):
    assert export_main([str(tmp_path), str(tmp_path / "out")]) == EXIT_CANNOT_EXPORT
    assert "is not a checkpoint: it has no training-config.json" in capsys.readouterr().err
    gpt = {"globalBatchSize": 8, "microBatchSize": 2}
    (tmp_path / "training-config.json").write_text(json.dumps(gpt))
    assert export_main([str(tmp_path), str(tmp_path / "out")]) == EXIT_CANNOT_EXPORT
    assert "holds model 'gpt'; export writes Hugging Face models (model.name: hf) only" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _model_config(**overrides):
    return ModelConfig.model_validate(tiny_llama_model(config=TINY_LLAMA) | overrides)


@pytest.mark.parametrize(
    "overrides, field, fragment",
    [
        ({"options": {"config": TINY_LLAMA | {"model_type": "lama"}}}, "model.options.config", "did you mean llama"),
        ({"options": {"config": TINY_LLAMA | {"hidden_size": "wide"}}}, "model.options.config", "hidden_size"),
        ({"options": {"config": "/no/such/dir"}}, "model.options.config", "is not a directory here"),
        ({"options": {"config": TINY_LLAMA, "pretrained": "/no/such/dir"}}, "model.options.pretrained", "directory"),
        ({"vocabSize": 300}, "model.vocabSize", "set model.vocabSize: 256"),
        ({"contextLength": 128}, "model.contextLength", "set model.contextLength to at most 64"),
    ],
)
def test_unusable_hf_options_are_config_errors_naming_the_field(overrides, field, fragment):
    with pytest.raises(ProblemsError) as error:
        build_model(_model_config(**overrides))
    (problem,) = error.value.problems
    assert str(problem).startswith(f"{field}: ") and fragment in str(problem)


def test_pretrained_weights_that_do_not_fit_the_config_are_refused(pretrained):
    directory, _ = pretrained
    wider = TINY_LLAMA | {"intermediate_size": 256}
    with pytest.raises(ProblemsError) as error:
        build_model(_model_config(options={"config": wider, "pretrained": str(directory)}))
    assert str(error.value).startswith("model.options.pretrained: ")


def test_pretrained_weights_missing_from_the_directory_are_refused(pretrained, tmp_path):
    """transformers would initialize a missing weight at random, and only say so."""
    from safetensors.torch import load_file, save_file

    directory, _ = pretrained
    partial = tmp_path / "partial"
    shutil.copytree(directory, partial)
    weights = load_file(partial / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, partial / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ProblemsError) as error:
        build_model(_model_config(options={"pretrained": str(partial)}))
    assert str(error.value) == (
        f"model.options.pretrained: {partial} lacks weights for 1 parameters of this config "
        "(model.layers.1.mlp.up_proj.weight)"
    )


def test_flops_per_token_are_6n_plus_attention_without_the_embedding_table():
    model = build_model(_model_config())
    everything = sum(p.numel() for p in model.parameters())
    embedding = TINY_LLAMA["vocab_size"] * TINY_LLAMA["hidden_size"]  # the untied head is a matmul: counted
    assert model.flops_per_token(16) == 6 * (everything - embedding) + 12 * 2 * 64 * 16  # 12·layers·width·context


def test_attention_runs_under_autocast(monkeypatch):
    """The model's own attention is torch's sdpa, which autocast runs in bf16 (its inputs may come in fp32: the
    rotary embedding multiplies the queries and keys by fp32 tables)."""
    model = build_model(_model_config())
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording_sdpa(*args, **kwargs):
        attended = sdpa(*args, **kwargs)
        seen.append(attended.dtype)
        return attended

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    tokens = torch.arange(32).view(2, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens)
    assert seen == [torch.bfloat16] * TINY_LLAMA["num_hidden_layers"]
    assert logits.dtype == torch.bfloat16 and logits.shape == (2, 16, TINY_LLAMA["vocab_size"])
