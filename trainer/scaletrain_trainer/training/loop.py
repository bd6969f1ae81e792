"""The training loop: set-up, then one optimizer step per global batch, logging and checkpoints."""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from ..contract.config import TrainingConfig
from ..contract.exit_codes import NonFinite
from ..models.flops import ModelFlops, peak_flops
from ..models.model import count_parameters, flops_per_token, trainable_parameters
from ..reporting.metrics import MetricsReporter, record_completed_step
from ..reporting.preemption import Preempted, received, signal_named
from ..reporting.tracking import start_trackers
from ..reporting.watchdog import Watchdog
from ..storage.checkpoint_stores import step_name
from .checkpoint import CheckpointManager, TrainState, check_data_position, check_storage
from .data import (
    GlobalBatches,
    MicroBatch,
    build_dataset,
    check_holds_a_global_batch,
    resolve_workers,
    step_loader,
    to_device,
)
from .distributed import HostMax, Runtime, agree, all_reduce_sum, seed_everything
from .evaluation import Evaluator, split_off_eval
from .losses import TOKEN_CROSS_ENTROPY, Loss, resolve_loss
from .non_finite import NonFiniteStreak, stop_if_non_finite
from .optimizer import build_optimizer, build_scheduler
from .parallel import autocast_enabled, build_parallel_model, gradient_sync, unwrapped
from .precision import Precision, resolve_precision

log = logging.getLogger(__name__)

SAVE_COLLECTIVES = 3  # a save's barriers and gathers, each bounded by distributedTimeoutSeconds
MIN_LOSS_SCALE = 1.0  # fp16: a scale the scaler had to halve below this means every step overflows


def train(config: TrainingConfig, runtime: Runtime) -> dict[str, Any]:
    """Train to config.max_steps, resuming from the latest checkpoint; returns a summary."""
    run = set_up(config, runtime)
    resumed_from = resume(run)
    # After the restore: the loader starts at the resumed step. Before the reporter's and watchdog's
    # threads start: workers are forked from this process.
    steps = iter(
        step_loader(
            run.dataset, run.batches, range(run.state.step, config.max_steps), config.data, config.seed, runtime.device
        )
    )
    reporter = start_reporter(run)
    largest_over_ranks = HostMax(runtime.backend, config.distributed_timeout_seconds)
    dist.barrier()

    started = time.perf_counter()
    watchdog = Watchdog(config.hang_timeout_seconds, config.output_dir, runtime.rank).start()
    diverged: NonFinite | None = None
    try:
        StepLoop(run, reporter, watchdog, largest_over_ranks, started).run_to_max_steps(steps)
        if run.checkpoints.enabled:
            save(run.checkpoints, run.state, watchdog, reporter, config, wait=True)
    except NonFinite as stop:
        diverged = stop
        raise
    finally:
        finish(run.checkpoints, watchdog, reporter, diverged)
    return summary(run, reporter, resumed_from, started)


@dataclass
class Run:
    """What set_up builds: the model and its training state, the data, the loss, evaluation and checkpoints."""

    config: TrainingConfig
    runtime: Runtime
    model: nn.Module
    precision: Precision
    state: TrainState
    model_flops: ModelFlops
    loss: Loss
    dataset: Dataset
    batches: GlobalBatches
    evaluator: Evaluator | None
    checkpoints: CheckpointManager


def set_up(config: TrainingConfig, runtime: Runtime) -> Run:
    """The model in its parallelism and precision, its optimizer and schedule, the training data with the
    held-out share split off, and the checkpoints; logs what it built."""
    accumulation = config.accumulation_steps(runtime.world_size)
    check_storage(config.checkpoint)  # a store that refuses the checkpoints fails the run before anything is built
    precision = agree(resolve_precision(config.precision, runtime.device))
    model, strategy = build_parallel_model(config, precision, runtime)
    seed_everything(config.seed)  # the training stream of random numbers: the same on every rank
    log.info(
        "%s: %d parameters (%d trained), %s, %s%s, world size %d, micro-batch %d × %d accumulation steps = global "
        "batch %d, %d data workers",
        config.model.name,
        count_parameters(model),
        trainable_parameters(model),
        strategy,
        precision.name,
        ", compiled" if config.compile else "",
        runtime.world_size,
        config.micro_batch_size,
        accumulation,
        config.global_batch_size,
        resolve_workers(config.data.workers, runtime.device),
    )
    optimizer = build_optimizer(model, config.optimizer, runtime.device)
    scheduler = build_scheduler(optimizer, config.scheduler, config.max_steps)
    state = TrainState(model, optimizer, scheduler, precision.grad_scaler())
    model_flops = ModelFlops(
        flops_per_token(unwrapped(model), config.model.context_length),
        runtime.world_size,
        peak_flops(device_name(runtime.device)),  # rank 0's: it computes the MFU
    )
    loss = resolve_loss(config.loss)
    dataset, held_out = split_off_eval(build_dataset(config.data, config.model, config.seed), config)
    check_holds_a_global_batch(dataset, config.global_batch_size, config.data)
    evaluator = Evaluator(held_out, config, runtime, loss) if held_out is not None else None
    batches = GlobalBatches(
        len(dataset), config.global_batch_size, config.micro_batch_size, runtime.world_size, runtime.rank, config.seed
    )
    checkpoints = CheckpointManager(config.checkpoint, runtime, config.to_json(), config.distributed_timeout_seconds)
    return Run(config, runtime, model, precision, state, model_flops, loss, dataset, batches, evaluator, checkpoints)


def resume(run: Run) -> str | None:
    """Restore the newest checkpoint that verifies, if any, into run.state (its data position checked
    against this run's global batches); returns where it is."""
    resumed_from = run.checkpoints.restore_latest(run.state)
    if resumed_from is not None:
        check_data_position(run.state, run.batches.position(run.state.step))
    record_completed_step(run.state.step)
    return resumed_from


def start_reporter(run: Run) -> MetricsReporter:
    """The metrics log, progress endpoint and trackers (rank 0's; on the other ranks it records nothing),
    told the step the run starts from and the checkpoints the restore set aside."""
    config, is_main = run.config, run.runtime.is_main
    trackers = start_trackers(config) if is_main else ()
    return MetricsReporter(
        config.output_dir,
        config.metrics_port,
        config.max_steps,
        enabled=is_main,
        trackers=trackers,
        resumed_from_step=run.state.step,  # 0: a fresh start
        set_aside=run.checkpoints.set_aside,
    )


class StepLoop:
    """One optimizer step per global batch up to max_steps, with the log lines, evaluations and saves that
    fall due. Between steps it keeps the samples and tokens since the last log line (its throughput) and the
    first step that was not finite."""

    def __init__(
        self, run: Run, reporter: MetricsReporter, watchdog: Watchdog, largest_over_ranks: HostMax, started: float
    ):
        self.run, self.reporter, self.watchdog, self.largest_over_ranks = run, reporter, watchdog, largest_over_ranks
        self.start_step, self.started, self.last_log = run.state.step, started, started
        self.samples = self.tokens = 0
        # The first step whose loss or gradients were not finite, or -1: kept on the device, so that
        # checking it costs no host sync; read at the syncs that log steps and saves make anyway.
        self.first_non_finite = torch.full((), -1, dtype=torch.int64, device=run.runtime.device)
        self.streak = NonFiniteStreak(run.config.max_non_finite_steps)

    def run_to_max_steps(self, steps: Iterator[list[MicroBatch]]) -> None:
        """Raises NonFinite where the run diverged, and Preempted, after its save, where the ranks agreed to stop."""
        config, state, checkpoints, watchdog = self.run.config, self.run.state, self.run.checkpoints, self.watchdog
        while state.step < config.max_steps:
            micro_batches, result = self._step(steps)
            saving = self.streak.saves_now(checkpoints.due(state.step))
            due_to_save = saving or (checkpoints.enabled and state.step == config.max_steps)
            due_to_log = state.step % config.log_every_steps == 0 or state.step == config.max_steps
            with watchdog.phase(f"logging step {state.step} (a reduction across ranks)", waits_on_peers=True):
                if due_to_log or due_to_save:
                    stop_if_non_finite(self.first_non_finite)
                if due_to_log:
                    self._log(result, is_lm=micro_batches[0].targets.dim() > 1)
            if self.run.evaluator is not None and self.run.evaluator.due(state.step):
                self._evaluate(self.run.evaluator)
            if saving:
                save(checkpoints, state, watchdog, self.reporter, config)
            watchdog.step_done(state.step)
            # At max_steps the run ends anyway, with its final save.
            if state.step < config.max_steps and (
                stop_signal := agreed_stop(self.largest_over_ranks, watchdog, state.step)
            ):
                stop_if_non_finite(self.first_non_finite)  # a diverged state is never saved, preempted or not
                raise preempt(stop_signal, checkpoints, state, watchdog, self.reporter, config)

    def _step(self, steps: Iterator[list[MicroBatch]]) -> tuple[list[MicroBatch], StepResult]:
        """Load and train the step after state.step, and count it done."""
        run, state = self.run, self.run.state
        with self.watchdog.phase(f"loading the data of step {state.step + 1}", waits_on_peers=False):
            micro_batches = to_device(next(steps), run.runtime.device)
        with step_phase(self.watchdog, state.step + 1, compiling=run.config.compile and state.step == self.start_step):
            result = train_step(
                run.model,
                micro_batches,
                state,
                run.precision,
                run.config.grad_clip_norm,
                run.runtime.world_size,
                skip_non_finite=run.config.on_non_finite == "skip",
                loss=run.loss,
            )
        self.samples += run.batches.samples_in(state.step)
        self.tokens += result.tokens
        state.step += 1
        state.data_position = run.batches.position(state.step)
        record_completed_step(state.step)
        self.streak.count(state.step, result.dropped)
        unseen = (self.first_non_finite < 0) & ~result.finite
        self.first_non_finite = torch.where(unseen, state.step, self.first_non_finite)
        return micro_batches, result

    def _log(self, result: StepResult, is_lm: bool) -> None:
        """A log line: the loss over all ranks and the throughput since the last line. The run's last loss must
        be finite."""
        config, state = self.run.config, self.run.state
        now = time.perf_counter()
        record = _step_record(
            state, result, self.samples, int(self.tokens), now - self.last_log, is_lm, self.run.model_flops
        )
        if state.step == config.max_steps:
            self.streak.check_final_loss(record["loss"], state.step)
        steps_done = state.step - self.start_step
        eta = (now - self.started) / steps_done * (config.max_steps - state.step)
        self.reporter.log(record, eta_seconds=eta, next_report_within=next_report_within(config, self.watchdog))
        if self.run.runtime.is_main:
            log.info("step %d/%d loss %.4f", state.step, config.max_steps, record["loss"])
        self.samples, self.tokens, self.last_log = 0, 0, now

    def _evaluate(self, evaluator: Evaluator) -> None:
        step = self.run.state.step
        with self.watchdog.phase(f"evaluating after step {step}", waits_on_peers=True):
            evaluating = time.perf_counter()
            self.reporter.log_eval(step, evaluator(self.run.model, self.run.precision))
            self.last_log += time.perf_counter() - evaluating  # throughput counts the training's time only


def finish(
    checkpoints: CheckpointManager, watchdog: Watchdog, reporter: MetricsReporter, diverged: NonFinite | None
) -> None:
    """However the run ended: the pending save completes, a divergence learns the newest checkpoint, and the
    watchdog's and reporter's threads stop."""
    with watchdog.paused_for("waiting for the checkpoint being written in the background"):
        checkpoints.close()  # a failed run's pending save still completes, if it can
    if diverged is not None:  # the newest checkpoint, the pending one included: nothing non-finite is saved
        diverged.last_checkpoint_step = checkpoints.last_saved_step or 0
    watchdog.close()
    reporter.close()


def summary(run: Run, reporter: MetricsReporter, resumed_from: str | None, started: float) -> dict[str, Any]:
    """What train returns: where the run ended and the loss there, where it resumed from, and how long it took."""
    return {
        "step": run.state.step,
        "maxSteps": run.config.max_steps,
        "loss": reporter.progress().get("loss"),
        **({"evalLoss": reporter.progress()["evalLoss"]} if run.evaluator is not None and run.runtime.is_main else {}),
        "resumedFrom": resumed_from,
        "checkpointsSetAside": run.checkpoints.set_aside,
        "seconds": round(time.perf_counter() - started, 3),
    }


def save(
    checkpoints: CheckpointManager,
    state: TrainState,
    watchdog: Watchdog,
    reporter: MetricsReporter,
    config: TrainingConfig,
    wait: bool = False,
) -> None:
    """A checkpoint save, unwatched by the hang watchdog (a large model's may outlast many steps). Its
    collectives keep their timeouts, a few of which the progress promise allows for. With checkpoint.async
    it waits for the save before it and returns once the state is copied; `wait` (the run's last save, a
    stop's) waits for this one to be complete too. /progress names a checkpoint only once it is complete."""
    saves = 2 if wait and checkpoints.asynchronous else 1  # the pending one, then this one
    promise = saves * SAVE_COLLECTIVES * config.distributed_timeout_seconds + watchdog.timeout
    reporter.promise_report_within(promise)
    with watchdog.paused_for(f"saving the checkpoint of step {state.step}"):
        checkpoints.save(state, on_commit=reporter.report_checkpoint)
        if wait:
            checkpoints.finish()
    reporter.promise_report_within(next_report_within(config, watchdog))  # back to the steps' pace


def agreed_stop(largest_over_ranks: HostMax, watchdog: Watchdog, step: int) -> signal.Signals | None:
    """The stop signal any rank received (preemption.py), the same on every rank, or None: one tiny
    host-side all-reduce at every step boundary."""
    with watchdog.phase(f"agreeing whether to stop after step {step} (a reduction across ranks)", waits_on_peers=True):
        return signal_named(largest_over_ranks(received()))


def preempt(
    stop_signal: signal.Signals,
    checkpoints: CheckpointManager,
    state: TrainState,
    watchdog: Watchdog,
    reporter: MetricsReporter,
    config: TrainingConfig,
) -> Preempted:
    """Save the checkpoint of the step every rank stopped after (skipped when the step's regular save just
    wrote it), wait until it is complete, and say so."""
    if not checkpoints.enabled:
        return Preempted(state.step, stop_signal, None)
    save(checkpoints, state, watchdog, reporter, config, wait=True)
    return Preempted(state.step, stop_signal, step_name(state.step))


def step_phase(watchdog: Watchdog, step: int, compiling: bool) -> contextlib.AbstractContextManager:
    """A step, watched for hangs; unwatched when it compiles (torch.compile compiles in the first step a
    process runs: minutes for a large model, which is no hang). Its collectives keep their timeouts."""
    if compiling:
        return watchdog.paused_for(f"compiling the model in step {step} (torch.compile)")
    return watchdog.phase(f"in step {step} (compute and its collectives)", waits_on_peers=True)


def next_report_within(config: TrainingConfig, watchdog: Watchdog) -> float:
    """Seconds until the next progress report is due: a logging interval at the typical step time, plus
    the hang timeout (a rank that hangs meanwhile is ended by its watchdog, or, stopped itself, goes
    silent, which the operator takes for a hang once this has passed)."""
    return config.log_every_steps * watchdog.typical_step_seconds + watchdog.timeout


@dataclass
class StepResult:
    """Tensors stay on the device; they are read (a host sync) only at log steps."""

    loss_sum: torch.Tensor  # this rank's summed token loss
    tokens: torch.Tensor  # valid target tokens in the global batch
    grad_norm: torch.Tensor  # global gradient norm before clipping
    loss_scale: float | None  # fp16 only
    skipped: bool  # fp16 only: the scaler found inf/nan and skipped the update
    finite: torch.Tensor  # whether the step was sound (fp16: a skipped step is; a scale below the floor is not)
    dropped: bool = False  # onNonFinite: skip dropped this update (known on the host: it costs a sync)


def train_step(
    model: nn.Module,
    micro_batches: Sequence[MicroBatch],
    state: TrainState,
    precision: Precision,
    grad_clip_norm: float,
    world_size: int,
    skip_non_finite: bool = False,
    loss: Loss = TOKEN_CROSS_ENTROPY,
) -> StepResult:
    """One optimizer step over an accumulation window of micro-batches.

    Each micro-batch contributes sum(token losses) / (tokens in the whole global batch), so the
    update equals the full-batch update exactly: with ignored or padded tokens, with uneven token
    counts across micro-batches and ranks, and in a short final window. The factor world_size undoes
    the gradient averaging of DDP/FSDP. Where the targets alone give the count (cross-entropy's valid
    targets), it is summed up front and each backward normalized at once; a custom loss reports its
    count with its value, so the summed gradients are divided by the global count after the last
    micro-batch instead: the same update.

    With `skip_non_finite`, an update whose global gradient norm is not finite is dropped, as the fp16
    scaler drops one: the norm is the same on every rank (the gradients were all-reduced), so every
    rank drops it alike.
    """
    counted_up_front = loss.count_from_targets is not None
    if counted_up_front:
        global_count = all_reduce_sum(sum(loss.count_from_targets(batch.targets) for batch in micro_batches))
        normalizer = global_count.clamp(min=1)
    loss_sum = torch.zeros((), device=micro_batches[0].inputs.device)
    count_sum = torch.zeros((), dtype=torch.float64, device=loss_sum.device)  # a custom loss's count may be a float
    for index, batch in enumerate(micro_batches):
        with gradient_sync(model, sync=index == len(micro_batches) - 1):
            with precision.autocast(enabled=autocast_enabled(model)):
                logits = batch.logits(model)
            summed, count = loss(logits, batch.targets)
            state.scaler.scale(summed * world_size / (normalizer if counted_up_front else 1)).backward()
        loss_sum += summed.detach()
        if not counted_up_front:  # cross-entropy's count is already summed
            count_sum += count.detach()
    state.scaler.unscale_(state.optimizer)
    if not counted_up_front:
        global_count = all_reduce_sum(count_sum)
        normalizer = global_count.clamp(min=1)
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter.grad.div_(normalizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip_norm or math.inf)
    scale_before = state.scaler.get_scale() if state.scaler.is_enabled() else None
    dropped = skip_non_finite and not state.scaler.is_enabled() and not bool(torch.isfinite(grad_norm))
    if not dropped:
        state.scaler.step(state.optimizer)
    state.scaler.update()
    state.optimizer.zero_grad(set_to_none=True)
    state.scheduler.step()
    scale_after = state.scaler.get_scale() if state.scaler.is_enabled() else None
    grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    if dropped:  # nothing non-finite reached the weights
        finite = torch.tensor(True, device=loss_sum.device)
    elif scale_after is None:  # a NaN loss on any rank makes the all-reduced gradients, so the norm, NaN
        finite = torch.isfinite(grad_norm) & torch.isfinite(loss_sum)
    else:  # fp16: the scaler skips overflowing steps itself; giving up on every step is the failure
        finite = torch.tensor(scale_after >= MIN_LOSS_SCALE, device=loss_sum.device)
    return StepResult(
        loss_sum=loss_sum,
        tokens=normalizer,
        grad_norm=grad_norm,
        loss_scale=scale_after,
        skipped=dropped or (scale_before is not None and scale_after < scale_before),
        finite=finite,
        dropped=dropped,
    )


def device_name(device: torch.device) -> str:
    """What the peak table (flops.py) is looked up by: a GPU's name as CUDA reports it, else "cpu"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _step_record(
    state: TrainState,
    result: StepResult,
    samples: int,
    tokens: int,
    seconds: float,
    is_lm: bool,
    model_flops: ModelFlops,
):
    global_loss = float(all_reduce_sum(result.loss_sum) / result.tokens)
    record = {
        "step": state.step,
        "loss": global_loss,
        "lr": state.optimizer.param_groups[0]["lr"],
        "gradNorm": float(result.grad_norm),
        "samplesPerSecond": samples / seconds,
    }
    if is_lm:  # FLOPs are counted per token: a classifier gets no TFLOP/s either
        record["tokensPerSecond"] = tokens / seconds
        record |= model_flops.utilization(record["tokensPerSecond"])
    if (peak := peak_memory_since_last_log(result.loss_sum.device)) is not None:
        record["peakMemoryBytes"] = peak
    if result.loss_scale is not None:
        record |= {"lossScale": result.loss_scale}
    if result.loss_scale is not None or result.dropped:
        record["skipped"] = result.skipped
    return record


def peak_memory_since_last_log(device: torch.device) -> int | None:
    """The largest GPU memory allocated on any rank since the last call (a log step's, which syncs anyway: one
    small all-reduce), the counters then reset; None on a CPU."""
    if device.type != "cuda":
        return None
    peak = torch.tensor(torch.cuda.max_memory_allocated(device), dtype=torch.int64, device=device)
    if dist.get_world_size() > 1:
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    torch.cuda.reset_peak_memory_stats(device)
    return int(peak)
