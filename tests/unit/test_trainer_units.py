"""Trainer components in one process: data order, loss normalization, precision, schedule,
checkpoint files, the progress endpoint, and the entry points' config errors."""

from __future__ import annotations

import errno
import json
import math
import urllib.request
from datetime import datetime, timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from scaletrain_testing.plugins.losses import second_half_cross_entropy
from scaletrain_testing.trainer_runs import free_port
from scaletrain_trainer.contract.config import (
    CheckpointConfig,
    DataConfig,
    ModelConfig,
    SchedulerConfig,
    parse_training_config,
)
from scaletrain_trainer.contract.exit_codes import NonFinite, write_error_cause
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.models.flops import ModelFlops, peak_flops
from scaletrain_trainer.models.model import GPT, build_model, flops_per_token
from scaletrain_trainer.reporting.metrics import MetricsReporter, write_termination_message
from scaletrain_trainer.reporting.watchdog import Watchdog
from scaletrain_trainer.training.checkpoint import CheckpointManager, TrainState, check_data_position
from scaletrain_trainer.training.data import (
    IGNORE_INDEX,
    GlobalBatches,
    build_dataset,
    check_holds_a_global_batch,
    collate,
    resolve_workers,
    step_loader,
)
from scaletrain_trainer.training.distributed import Runtime
from scaletrain_trainer.training.evaluation import Evaluator, split_off_eval
from scaletrain_trainer.training.loop import NonFiniteStreak, build_scheduler, train_step
from scaletrain_trainer.training.losses import resolve_loss
from scaletrain_trainer.training.precision import resolve_precision

CPU = torch.device("cpu")
RUNTIME = Runtime(rank=0, local_rank=0, world_size=1, device=CPU, backend="gloo")


@pytest.fixture(scope="module", autouse=True)
def process_group():
    """A process group of one, as the standalone trainer uses."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# --- data order ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset_size", [200, 64])
def test_global_batches_are_the_same_at_every_world_size(dataset_size):
    for step in range(30):  # two epochs, each ending in a short window (200 samples) or not (64)
        reference = None
        for world in (1, 2, 4):
            per_rank = [
                GlobalBatches(dataset_size, 16, 2, world, rank, seed=3).micro_batches(step) for rank in range(world)
            ]
            assert len({len(micro) for micro in per_rank}) == 1  # same number of micro-steps on every rank
            samples = sorted(i for micro in per_rank for batch in micro for i in batch if i is not None)
            reference = reference or samples
            assert samples == reference
            assert samples == sorted(GlobalBatches(dataset_size, 16, 2, world, 0, seed=3).global_batch(step))


def test_epochs_are_reshuffled_and_the_last_window_is_short():
    batches = GlobalBatches(200, 16, 4, world_size=2, rank=1, seed=0)
    assert batches.steps_per_epoch == 13
    assert len(batches.global_batch(12)) == 8  # 200 - 12 × 16
    assert batches.micro_batches(12) == [batches.global_batch(12)[1::2]]  # one micro-step of 4, not two
    assert batches.position(13) == (1, 0)
    first_epoch = [i for s in range(13) for i in batches.global_batch(s)]
    second_epoch = [i for s in range(13, 26) for i in batches.global_batch(s)]
    assert sorted(first_epoch) == sorted(second_epoch) == list(range(200)) and first_epoch != second_epoch


def test_padding_positions_ignore_their_targets():
    dataset = build_dataset(DataConfig(), ModelConfig(context_length=8, vocab_size=32), seed=0)
    inputs, targets = collate(dataset, [5, None])
    assert torch.equal(inputs[0], inputs[1])
    assert (targets[1] == IGNORE_INDEX).all() and (targets[0] != IGNORE_INDEX).all()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_step_loader_yields_every_steps_micro_batches_in_order(workers):
    """From a resumed step, across a short window (step 12) and an epoch boundary, with or without workers."""
    dataset = build_dataset(DataConfig(synthetic_samples=200), ModelConfig(context_length=8, vocab_size=32), seed=0)
    batches = GlobalBatches(len(dataset), 16, 4, world_size=2, rank=1, seed=0)
    steps = range(10, 16)
    loaded = list(step_loader(dataset, batches, steps, DataConfig(workers=workers), seed=0, device=CPU))
    expected = [[collate(dataset, ids) for ids in batches.micro_batches(step)] for step in steps]
    assert [len(micro) for micro in loaded] == [2, 2, 1, 2, 2, 2]
    assert _as_lists(loaded) == _as_lists(expected)
    assert batches.samples_in(12) == len(batches.global_batch(12)) == 8


def _as_lists(steps):
    return [[(inputs.tolist(), targets.tolist()) for inputs, targets in micro] for micro in steps]


def test_data_workers_unset_are_two_on_gpus_and_none_on_cpu():
    assert resolve_workers(None, torch.device("cuda", 0)) == 2
    assert resolve_workers(None, CPU) == 0
    assert resolve_workers(3, CPU) == 3 and resolve_workers(0, torch.device("cuda", 0)) == 0


def test_the_step_loader_leaves_the_training_random_stream_alone():
    """Resuming restores the global RNG; a loader drawing from it would shift dropout after a resume."""
    dataset = build_dataset(DataConfig(), ModelConfig(context_length=8, vocab_size=32), seed=0)
    batches = GlobalBatches(len(dataset), 4, 2, world_size=1, rank=0, seed=0)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    next(iter(step_loader(dataset, batches, range(3), DataConfig(), seed=0, device=CPU)))
    assert torch.equal(torch.rand(3), expected)


# --- loss normalization --------------------------------------------------------------------------


def _state(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return TrainState(model, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False))


def _tokens_with_ignored(seed: int):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, 16, (8, 6), generator=generator)
    targets = torch.randint(0, 16, (8, 6), generator=generator)
    targets[torch.rand(8, 6, generator=generator) < 0.4] = IGNORE_INDEX  # uneven valid counts per sample
    targets[6:] = IGNORE_INDEX  # two padding samples, as in a short window
    return inputs, targets


class Bigram(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(16, 16)

    def forward(self, tokens):
        return self.embedding(tokens)


@pytest.mark.parametrize("micro_batch", [1, 2, 4, 8])
def test_accumulated_update_equals_the_full_batch_update(micro_batch):
    inputs, targets = _tokens_with_ignored(seed=1)
    reference = Bigram()
    loss = nn.functional.cross_entropy(
        reference(inputs).reshape(-1, 16), targets.reshape(-1), ignore_index=IGNORE_INDEX
    )
    loss.backward()
    expected = reference.embedding.weight.detach() - reference.embedding.weight.grad

    model = nn.parallel.DistributedDataParallel(Bigram())
    windows = [(inputs[i : i + micro_batch], targets[i : i + micro_batch]) for i in range(0, 8, micro_batch)]
    result = train_step(model, windows, _state(model), resolve_precision("fp32", CPU), grad_clip_norm=0, world_size=1)
    assert int(result.tokens) == int((targets != IGNORE_INDEX).sum())
    torch.testing.assert_close(model.module.embedding.weight.detach(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("micro_batch", [1, 2, 8])
def test_with_a_custom_loss_the_accumulated_update_equals_the_full_batch_update(micro_batch):
    """training.loss reports its own token count, known only after the forward pass: the gradients are divided
    by the global count after the last micro-batch, which must give the same update."""
    inputs, targets = _tokens_with_ignored(seed=2)
    reference = Bigram()
    summed, count = second_half_cross_entropy(reference(inputs), targets)
    (summed / count).backward()
    expected = reference.embedding.weight.detach() - reference.embedding.weight.grad
    assert int(count) != int((targets != IGNORE_INDEX).sum())  # not cross-entropy's count

    model = nn.parallel.DistributedDataParallel(Bigram())
    windows = [(inputs[i : i + micro_batch], targets[i : i + micro_batch]) for i in range(0, 8, micro_batch)]
    loss = resolve_loss("scaletrain_testing.plugins.losses:second_half_cross_entropy")
    result = train_step(model, windows, _state(model), resolve_precision("fp32", CPU), 0, 1, loss=loss)
    assert float(result.tokens) == float(count)
    torch.testing.assert_close(model.module.embedding.weight.detach(), expected, rtol=1e-6, atol=1e-7)


def test_a_loss_that_does_not_return_a_sum_and_a_count_is_a_config_error():
    model = nn.parallel.DistributedDataParallel(Bigram())
    inputs, targets = _tokens_with_ignored(seed=1)
    loss = resolve_loss("scaletrain_testing.plugins.losses:not_a_pair")
    with pytest.raises(
        ProblemsError, match=r"loss: scaletrain_testing.plugins.losses:not_a_pair returned Tensor, not \(summed"
    ):
        train_step(model, [(inputs, targets)], _state(model), resolve_precision("fp32", CPU), 0, 1, loss=loss)
    with pytest.raises(ProblemsError, match="loss: cannot import scaletrain_testing.plugins.losses:missing"):
        resolve_loss("scaletrain_testing.plugins.losses:missing")


def test_the_held_out_share_is_chosen_by_seed_and_never_trained_on():
    config = parse_training_config(
        {"globalBatchSize": 8, "microBatchSize": 2, "eval": {"fraction": 0.2}, "data": {"syntheticSamples": 200}}
    )
    dataset = build_dataset(config.data, config.model, config.seed)
    train, held_out = split_off_eval(dataset, config)
    trained, evaluated = set(train.indices.tolist()), set(held_out.indices.tolist())
    assert len(evaluated) == 40 and not trained & evaluated and trained | evaluated == set(range(200))
    assert torch.equal(held_out[3][0], dataset[int(held_out.indices[3])][0])
    assert split_off_eval(dataset, config)[1].indices.tolist() == held_out.indices.tolist()
    other_seed = split_off_eval(dataset, config.model_copy(update={"seed": 8}))[1]
    assert other_seed.indices.tolist() != held_out.indices.tolist()
    assert split_off_eval(dataset, config.model_copy(update={"eval": None})) == (dataset, None)


def test_a_held_out_set_smaller_than_a_global_batch_is_a_config_error():
    config = parse_training_config(
        {"globalBatchSize": 64, "microBatchSize": 2, "eval": {"fraction": 0.1}, "data": {"syntheticSamples": 200}}
    )
    _, held_out = split_off_eval(build_dataset(config.data, config.model, config.seed), config)
    with pytest.raises(ProblemsError, match=r"eval.fraction: the held-out set holds 20 samples, fewer than one global"):
        Evaluator(held_out, config, RUNTIME, resolve_loss(None))


def test_per_micro_batch_mean_would_be_wrong():
    """The reference above can tell: averaging per-micro-batch means weights tokens unequally."""
    inputs, targets = _tokens_with_ignored(seed=1)
    torch.set_grad_enabled(False)
    full = nn.functional.cross_entropy(Bigram()(inputs).reshape(-1, 16), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    means = [
        nn.functional.cross_entropy(Bigram()(x).reshape(-1, 16), y.reshape(-1), ignore_index=IGNORE_INDEX)
        for x, y in zip(inputs.split(2), targets.split(2), strict=True)
        if (y != IGNORE_INDEX).any()
    ]
    torch.set_grad_enabled(True)
    assert float(sum(means) / len(means)) != pytest.approx(float(full), rel=1e-3)


# --- precision and schedule ----------------------------------------------------------------------


def test_precision_auto_is_fp32_on_cpu_and_autocast_follows_the_device():
    assert resolve_precision("auto", CPU).name == "fp32"
    bf16 = resolve_precision("bf16", CPU)
    assert not bf16.needs_scaler and resolve_precision("fp16", CPU).needs_scaler
    with bf16.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with resolve_precision("fp32", CPU).autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_warmup_then_cosine_to_min_lr():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_scheduler(optimizer, SchedulerConfig(warmup_steps=4, min_lr_ratio=0.1), max_steps=20)
    lrs = []
    for _ in range(21):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4] == pytest.approx(1.0) and lrs[20] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))


# --- non-finite steps (onNonFinite: skip) -------------------------------------------------------


def test_a_streak_of_dropped_updates_at_the_limit_stops_naming_its_first_step():
    streak = NonFiniteStreak(limit=3)
    for step, dropped in [(1, False), (2, True), (3, True), (4, False), (5, True), (6, True)]:
        streak.count(step, dropped)  # two in a row, then applied, then two again: under the limit
    with pytest.raises(NonFinite) as stopped:
        streak.count(7, dropped=True)
    assert stopped.value.step == 5
    stopped.value.last_checkpoint_step = 4
    assert str(stopped.value).endswith("not finite at step 5: the run diverged (the last finite checkpoint: step 4)")


def test_a_save_due_during_a_streak_waits_for_the_next_applied_update():
    streak = NonFiniteStreak(limit=10)
    saves = []
    for step, dropped in [(1, False), (2, False), (3, True), (4, True), (5, False), (6, False)]:
        streak.count(step, dropped)
        if streak.saves_now(due=step % 2 == 0):
            saves.append(step)
    assert saves == [2, 5, 6]  # step 4's save waited for step 5, the first applied after it


def test_a_final_loss_that_is_not_finite_stops_the_run_naming_where_it_turned():
    streak = NonFiniteStreak(limit=10)
    streak.check_final_loss(2.5, step=9)
    streak.count(8, dropped=True)
    streak.count(9, dropped=True)
    with pytest.raises(NonFinite) as in_a_streak:
        streak.check_final_loss(math.nan, step=9)
    assert in_a_streak.value.step == 8
    with pytest.raises(NonFinite) as without_a_streak:  # fp16: its scaler skips steps itself
        NonFiniteStreak(limit=10).check_final_loss(math.inf, step=9)
    assert without_a_streak.value.step == 9


def test_max_non_finite_steps_is_at_least_one_and_three_by_default():
    minimal = {"globalBatchSize": 8, "microBatchSize": 8}
    assert parse_training_config(minimal).max_non_finite_steps == 3
    with pytest.raises(ProblemsError, match="maxNonFiniteSteps: "):
        parse_training_config(minimal | {"onNonFinite": "skip", "maxNonFiniteSteps": 0})


# --- checkpoints ---------------------------------------------------------------------------------


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), every_steps=1, keep=2), RUNTIME, "{}")
    model = nn.parallel.DistributedDataParallel(Bigram())
    state = _state(model)
    for step in (1, 2, 3):
        state.step = step
        manager.save(state)
    (tmp_path / "step-00000009.partial").mkdir()  # a save that crashed mid-write
    assert [p.name for p in manager.completed()] == ["step-00000002", "step-00000003"]
    with torch.no_grad():
        model.module.embedding.weight.zero_()
    restored = _state(model)
    assert manager.restore_latest(restored).name == "step-00000003"
    assert restored.step == 3 and model.module.embedding.weight.abs().sum() > 0
    state.step = 4
    manager.save(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003", "step-00000004"]


def test_resume_refuses_a_changed_global_batch():
    state = _state(nn.parallel.DistributedDataParallel(Bigram()))
    state.step, state.data_position = 10, (0, 160)
    check_data_position(state, GlobalBatches(1000, 16, 4, 1, 0, 0).position(10))
    with pytest.raises(ProblemsError, match="keep globalBatchSize"):
        check_data_position(state, GlobalBatches(1000, 32, 4, 1, 0, 0).position(10))


# --- data sources --------------------------------------------------------------------------------


def test_text_and_token_files(tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("hello world, " * 20)
    dataset = build_dataset(DataConfig(source="text", path=str(text)), ModelConfig(context_length=8), seed=0)
    assert len(dataset) == (260 - 1) // 8
    x, y = dataset[1]
    assert bytes(x.tolist()) == text.read_bytes()[8:16] and torch.equal(x[1:], y[:-1])

    tokens = tmp_path / "train.bin"
    np.arange(1000, dtype=np.uint32).tofile(tokens)
    data = DataConfig(source="tokens", path=str(tokens), token_dtype="uint32")
    x, y = build_dataset(data, ModelConfig(context_length=10, vocab_size=1000), seed=0)[3]
    assert x.tolist() == list(range(30, 40)) and y.tolist() == list(range(31, 41))


def test_data_that_cannot_be_trained_on_is_a_config_error_naming_the_field(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ProblemsError, match=r"data\.path: .*empty\.txt has fewer than contextLength \+ 1 tokens"):
        build_dataset(DataConfig(source="text", path=str(empty)), ModelConfig(), seed=0)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")
    with pytest.raises(
        ProblemsError, match=r"data\.tokenDtype: .*odd\.bin holds 3 bytes, not a whole number of uint16"
    ):
        build_dataset(DataConfig(source="tokens", path=str(odd)), ModelConfig(), seed=0)
    large = tmp_path / "large-ids.bin"
    np.array([1, 2, 300] * 100, dtype=np.uint16).tofile(large)
    with pytest.raises(ProblemsError, match=r"model\.vocabSize: .* holds token id 300, but model\.vocabSize is 256"):
        build_dataset(DataConfig(source="tokens", path=str(large)), ModelConfig(context_length=8), seed=0)
    small = tmp_path / "six-samples.bin"
    np.arange(6 * 8 + 1, dtype=np.uint16).tofile(small)
    data = DataConfig(source="tokens", path=str(small))
    dataset = build_dataset(data, ModelConfig(context_length=8), seed=0)
    with pytest.raises(
        ProblemsError, match=r"data\.path: the data set holds 6 samples, fewer than one global batch \(16\)"
    ):
        check_holds_a_global_batch(dataset, 16, data)


def test_missing_data_file_and_bad_import_path_are_config_errors(tmp_path):
    with pytest.raises(ProblemsError, match=r"data\.path: .* is not a readable file"):
        build_dataset(DataConfig(source="text", path=str(tmp_path / "missing.txt")), ModelConfig(), seed=0)
    with pytest.raises(ProblemsError, match=r"data\.source: cannot import nowhere.module:make"):
        build_dataset(DataConfig(source="nowhere.module:make"), ModelConfig(), seed=0)


def test_a_plugin_of_the_wrong_type_is_a_config_error_naming_the_field():
    with pytest.raises(ProblemsError, match=r"data\.source: collections:OrderedDict returned OrderedDict, not a"):
        build_dataset(DataConfig(source="collections:OrderedDict"), ModelConfig(), seed=0)
    with pytest.raises(ProblemsError, match=r"model\.name: collections:OrderedDict returned OrderedDict, not a"):
        build_model(ModelConfig(name="collections:OrderedDict"))
    with pytest.raises(ProblemsError, match=r"data\.source: collections:namedtuple\(\*\*options\) failed"):
        build_dataset(DataConfig(source="collections:namedtuple"), ModelConfig(), seed=0)


# --- FLOPs and MFU ------------------------------------------------------------------------------


def test_gpt_flops_per_token_are_6n_without_the_embeddings_plus_attention():
    model = GPT(vocab_size=16, context_length=8, layers=2, heads=2, width=8)
    # By hand, width 8: a block has 2 norms (2 × 16), qkv (8·24 + 24), proj (8·8 + 8), the MLP (8·32 + 32
    # and 32·8 + 8): 872 parameters. Two blocks, the final norm (16) and the untied head (8·16): 1888
    # matmul parameters; the embedding tables (16·8 and 8·8) are lookups. Attention: 12 · 2 · 8 · context.
    assert flops_per_token(model, 8) == 6 * 1888 + 12 * 2 * 8 * 8 == 12864
    assert flops_per_token(model, 4) == 6 * 1888 + 12 * 2 * 8 * 4


def test_a_custom_model_counts_6n_unless_it_says_its_own_flops():
    assert flops_per_token(nn.Linear(4, 3), 8) == 6 * 15

    class Counted(nn.Linear):
        def flops_per_token(self, context: int) -> int:
            return 1000 * context

    assert flops_per_token(Counted(4, 3), 8) == 8000


def test_peak_flops_by_the_device_name_cuda_reports():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == peak_flops("NVIDIA A100 80GB PCIe") == 312e12
    assert (peak_flops("NVIDIA L4"), peak_flops("NVIDIA L40S")) == (121e12, 362e12)  # whole words: L4 is not L40S
    assert peak_flops("Tesla V100-PCIE-16GB") == 112e12 and peak_flops("Tesla V100-SXM2-32GB") == 125e12
    assert peak_flops("NVIDIA GeForce GTX 1080") is None and peak_flops("cpu") is None


def test_tflops_are_per_device_and_mfu_is_absent_without_a_peak():
    assert ModelFlops(6 * 10**9, 4, 312e12).utilization(1e5) == pytest.approx(
        {"tflopsPerDevice": 150.0, "mfu": 150e12 / 312e12}
    )
    assert ModelFlops(6 * 10**9, 4, None).utilization(1e5) == pytest.approx({"tflopsPerDevice": 150.0})


# --- progress endpoint and termination message ---------------------------------------------------


def test_progress_endpoint_serves_json_and_prometheus(tmp_path):
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    try:
        reporter.log(
            {
                "step": 10,
                "loss": 2.5,
                "samplesPerSecond": 40.0,
                "tokensPerSecond": 640.0,
                "tflopsPerDevice": 0.5,
                "mfu": 0.25,
            },
            eta_seconds=9.0,
            next_report_within=30.0,
        )
        progress = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
        assert progress | {"updatedAt": None, "staleAfter": None} == {
            "step": 10,
            "maxSteps": 100,
            "loss": 2.5,
            "samplesPerSecond": 40.0,
            "tokensPerSecond": 640.0,
            "tflopsPerDevice": 0.5,
            "mfu": 0.25,
            "etaSeconds": 9.0,
            "updatedAt": None,
            "staleAfter": None,
        }
        # The next report is promised 30 s on (rounded up, plus a second: the timestamps are whole seconds).
        promised = datetime.fromisoformat(progress["staleAfter"]) - datetime.fromisoformat(progress["updatedAt"])
        assert promised == timedelta(seconds=31)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "scaletrain_step 10\n" in metrics and "# TYPE scaletrain_loss gauge" in metrics
        assert "scaletrain_tflops_per_device 0.5\n" in metrics and "scaletrain_mfu 0.25\n" in metrics
    finally:
        reporter.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["loss"] == 2.5


def test_an_evaluation_is_a_record_of_its_own_and_served_as_eval_loss(tmp_path):
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    try:
        reporter.log({"step": 10, "loss": 2.5}, eta_seconds=9.0, next_report_within=30.0)
        reporter.log_eval(10, 2.75)
        progress = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
        assert progress["evalLoss"] == 2.75 and progress["loss"] == 2.5
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "scaletrain_eval_loss 2.75\n" in metrics
    finally:
        reporter.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[1] == {"step": 10, "evalLoss": 2.75}


def test_a_diverged_loss_is_served_as_strict_json_null_and_flagged(tmp_path):
    port = free_port()
    reporter = MetricsReporter(str(tmp_path), port, max_steps=100, enabled=True)
    try:
        reporter.log(
            {"step": 10, "loss": float("nan"), "samplesPerSecond": float("inf")},
            eta_seconds=9.0,
            next_report_within=30.0,
        )
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10).read().decode()
        progress = json.loads(body, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
        assert progress["loss"] is None and progress["lossFinite"] is False and progress["samplesPerSecond"] is None
    finally:
        reporter.close()


def test_a_busy_port_does_not_stop_training(tmp_path):
    port = free_port()
    first = MetricsReporter(str(tmp_path / "a"), port, max_steps=10, enabled=True)
    second = MetricsReporter(str(tmp_path / "b"), port, max_steps=20, enabled=True)
    try:
        second.log({"step": 1, "loss": 1.0}, eta_seconds=1.0, next_report_within=30.0)
        assert json.loads((tmp_path / "b" / "metrics.jsonl").read_text())["step"] == 1
        served = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10))
        assert served["maxSteps"] == 10  # the port still belongs to the first
    finally:
        first.close()
        second.close()


def test_termination_message_only_where_the_file_exists(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    monkeypatch.setenv("SCALETRAIN_TERMINATION_LOG", str(path))
    write_termination_message({"result": "Succeeded"})
    assert not path.exists()
    path.touch()
    write_termination_message({"result": "Succeeded", "blob": "x" * 10000})
    assert len(path.read_text()) == 4096


def test_activation_checkpointing_wraps_every_block():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from scaletrain_trainer.models.model import build_model
    from scaletrain_trainer.training.parallel import apply_parallelism

    config = parse_training_config({"globalBatchSize": 2, "microBatchSize": 1, "activationCheckpointing": True})
    model = apply_parallelism(build_model(config.model), "ddp", resolve_precision("fp32", CPU), RUNTIME, config)
    blocks = model.module.blocks
    assert len(blocks) == config.model.layers and all(isinstance(b, CheckpointWrapper) for b in blocks)


def test_compile_compiles_every_block_in_place_keeping_parameter_names():
    from scaletrain_trainer.training.parallel import apply_parallelism

    def parallel_model(**overrides):
        config = parse_training_config({"globalBatchSize": 2, "microBatchSize": 1} | overrides)
        torch.manual_seed(0)
        return apply_parallelism(build_model(config.model), "ddp", resolve_precision("fp32", CPU), RUNTIME, config)

    compiled = parallel_model(compile=True, activationCheckpointing=True)
    # Compiled lazily, at the first call: nothing is compiled here.
    assert all(block._compiled_call_impl is not None for block in compiled.module.blocks)
    assert compiled.module._compiled_call_impl is None  # per block, not the whole model as well
    plain = parallel_model(activationCheckpointing=True)
    assert compiled.state_dict().keys() == plain.state_dict().keys()  # checkpoints move between on and off


def test_compile_without_a_cpp_compiler_is_a_config_error_naming_the_field(monkeypatch):
    import torch._inductor.config as inductor_config

    from scaletrain_trainer.training.parallel import compile_in_place

    monkeypatch.setattr(inductor_config.cpp, "cxx", ("/nonexistent/g++",))
    with pytest.raises(ProblemsError) as error:
        compile_in_place(Bigram(), CPU)
    assert str(error.value) == (
        "compile: torch.compile on cpu needs a C++ compiler (g++, or $CXX): add it to the image, or set compile: false"
    )


def test_resume_refuses_a_different_model(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path), every_steps=1), RUNTIME, "{}")
    state = _state(nn.parallel.DistributedDataParallel(Bigram()))
    state.step = 5
    manager.save(state)
    wider = nn.Module()
    wider.embedding, wider.extra = nn.Embedding(16, 32), nn.Linear(2, 2)
    with pytest.raises(ProblemsError, match=r"different model \(not in the checkpoint: model\.extra\.bias"):
        manager.restore_latest(_state(nn.parallel.DistributedDataParallel(wider)))


def test_checkpoint_not_visible_to_every_rank_is_a_config_error(tmp_path):
    manager = CheckpointManager(CheckpointConfig(dir=str(tmp_path)), RUNTIME, "{}")
    with pytest.raises(ProblemsError, match="must be on shared storage"):
        manager._require_visible(tmp_path / "step-00000001")


def test_the_hang_timeout_is_the_configured_one_else_ten_median_steps_but_at_least_five_minutes(tmp_path):
    assert Watchdog(4, str(tmp_path), rank=0).timeout == 4
    automatic = Watchdog(None, str(tmp_path), rank=0)
    assert automatic.timeout == 300  # no steps yet
    automatic.step_seconds = [500.0, 90.0, 80.0] + [20.0, 40.0, 50.0]  # the first (warm-up) steps do not count
    assert automatic.timeout == 400
    automatic.step_seconds = [1.0] * 10
    assert automatic.timeout == 300


def test_the_step_that_compiles_is_not_watched_for_hangs(tmp_path):
    from scaletrain_trainer.training.loop import step_phase

    watchdog = Watchdog(4, str(tmp_path), rank=0)
    with step_phase(watchdog, 1, compiling=True):
        assert watchdog.paused and "torch.compile" in watchdog.doing
    with step_phase(watchdog, 2, compiling=False):
        assert not watchdog.paused and watchdog.waits_on_peers


def test_write_errors_are_named_in_one_line_even_inside_a_distributed_checkpoint_failure():
    full = OSError(errno.ENOSPC, "No space left on device", "/ckpt/step-10.partial/__0_0.distcp")
    assert write_error_cause(full) == "disk full (ENOSPC) writing /ckpt/step-10.partial/__0_0.distcp"
    wrapped = CheckpointException("write", {1: (OSError(errno.EROFS, "Read-only file system"), None)})
    assert write_error_cause(wrapped) == "read-only file system (EROFS)"
    assert write_error_cause(OSError(errno.ENOENT, "No such file")) is None
    assert write_error_cause(RuntimeError("boom")) is None
