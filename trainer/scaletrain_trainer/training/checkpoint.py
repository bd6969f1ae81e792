"""Distributed checkpoints (torch.distributed.checkpoint) with atomic writes and automatic resume.

A checkpoint holds everything needed to continue exactly: model and optimizer (through DCP's
state-dict helpers, so it reshards across world sizes and between DDP and FSDP), LR scheduler,
loss scaler, step, data position and RNG state. It is written to `step-N.partial` and renamed to
`step-N` only once every rank has finished, so a crash mid-write never hides the last good one.

Each checkpoint verifies itself: before the rename, a manifest records every file's size and CRC-32,
read back right after writing (the ranks share the files out, so no rank reads them all). Resuming
checks the newest against its manifest first; a damaged one (a lost, truncated or overwritten file,
no manifest at all) is moved aside to `step-N.corrupt` with a warning, and the one before it is
tried. A checkpoint written from non-finite state never exists (non_finite.stop_if_non_finite runs first).

checkpoint.dir may be an object-store URL (s3://bucket/prefix): there the manifest, written last, is what
makes a checkpoint complete (storage/checkpoint_stores.py has both commit protocols), and the store must
accept a write at start (CheckpointStorageError otherwise, before any training).

Resuming refuses, as a config error, a checkpoint written by a different model or optimizer, and a
checkpoint directory that some ranks cannot see (node-local storage in a multi-node job).

With `checkpoint.async`, a save only copies the state to host memory (staging.HostCopy: buffers allocated
once, pinned on GPUs) and returns; a background thread writes that copy (dcp.save), verifies it and renames
it into place, over a gloo process group of its own, so that none of its collectives
interleave with the training loop's on the default group. The next save waits for it first, so saves
never overlap, and the same rename keeps a crash meanwhile from leaving anything but `step-N.partial`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from ..contract.config import CheckpointConfig
from ..contract.exit_codes import WriteError, write_error_cause
from ..contract.storage_urls import is_object_url
from ..contract.validation import Problem, ProblemsError
from ..storage import objects
from ..storage.checkpoint_stores import (
    CHECKPOINT_NAME,
    MANIFEST,
    CheckpointStore,
    Checksum,
    checkpoint_store,
    step_name,
)
from .distributed import Runtime, agree
from .staging import HostCopy

log = logging.getLogger(__name__)
T = TypeVar("T")

# The training config the checkpoint was written with: what `python -m scaletrain_trainer.export` builds
# the model from.
TRAINING_CONFIG_FILE = "training-config.json"
# How long the loop waits for an asynchronous save still in progress, in distributed timeouts: as long as its
# progress promise allows a save (loop.SAVE_COLLECTIVES). The save's collectives each have that timeout; its
# file writes have none.
PENDING_SAVE_TIMEOUTS = 3


# A checkpoint holds the parameters that train: with LoRA (model.lora) the adapters alone, the frozen base coming
# from `pretrained` (or the seed) again; without it every parameter.
TRAINED_ONLY = StateDictOptions(ignore_frozen_params=True)
# Loading leaves the frozen parameters as built (a strict load would ask for them); the trainable ones are all there:
# restore_latest compared them with the checkpoint's first (_check_same_model).
LOAD_TRAINED = StateDictOptions(ignore_frozen_params=True, strict=False)

# Parts of the state that may be absent from a checkpoint: the CUDA RNG (saved on CPU) and the loss
# scaler (saved without fp16). Everything else must match, or resuming would silently diverge.
OPTIONAL_STATE = ("rng_cuda", "scaler")


class TrainState:
    """What a checkpoint saves and restores."""

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, scaler: torch.amp.GradScaler
    ):
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.step = 0
        self.data_position = (0, 0)  # (epoch, offset) where the next step starts

    def state_dict(self) -> dict[str, Any]:
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer, options=TRAINED_ONLY)
        state = {
            "model": model_state,
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "data_position": list(self.data_position),
            # Every rank has the same seed and draws the same random numbers, so one copy is enough.
            "rng_cpu": torch.get_rng_state(),
        }
        if torch.cuda.is_available():
            state["rng_cuda"] = torch.cuda.get_rng_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=LOAD_TRAINED,
        )
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step = int(state["step"])
        self.data_position = tuple(state["data_position"])
        torch.set_rng_state(state["rng_cpu"])
        if "rng_cuda" in state:
            torch.cuda.set_rng_state(state["rng_cuda"])


class PendingSave:
    """An asynchronous save being written, verified and renamed by `work` in a thread of its own. A daemon
    thread: one stuck in a file write must not keep a failed process from exiting."""

    def __init__(self, step: int, work: Callable[[], None]):
        self.step = step
        self.error: BaseException | None = None  # what ended `work`, for whoever waits on it
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(work,), name=f"checkpoint-step-{step}", daemon=True).start()

    def _run(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as error:
            self.error = error
        finally:
            self._done.set()

    def wait(self, timeout_seconds: float) -> bool:
        """Whether the save ended (well or not) within `timeout_seconds`."""
        return self._done.wait(timeout_seconds)


class CheckpointManager:
    def __init__(
        self,
        config: CheckpointConfig,
        runtime: Runtime,
        training_config_json: str,
        timeout_seconds: float = dist.default_pg_timeout.total_seconds(),
    ):
        """`timeout_seconds`: distributedTimeoutSeconds, for the asynchronous saves' process group and for
        waiting on a pending save. With checkpoint.async, constructing one is a collective."""
        self.config, self.runtime = config, runtime
        self.training_config_json = training_config_json
        self.timeout_seconds = timeout_seconds
        self.store = checkpoint_store(config.dir) if config.dir else None
        self.last_saved_step: int | None = None  # the same on every rank, unlike a file-system check
        self.set_aside: list[str] = []  # damaged checkpoints moved aside while resuming (rank 0)
        self._pending: PendingSave | None = None
        self._stager: HostCopy | None = None
        self._group: dist.ProcessGroup | None = None  # None: the default group
        if self.asynchronous:
            self._group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_seconds))
            # Reuses its host buffers from save to save: one copy of the state, held for the run.
            self._stager = HostCopy(self._group, pinned=runtime.device.type == "cuda")

    @property
    def enabled(self) -> bool:
        return self.store is not None

    @property
    def asynchronous(self) -> bool:
        return self.enabled and self.config.asynchronous

    def due(self, step: int) -> bool:
        return self.enabled and step % self.config.every_steps == 0

    def completed(self) -> list[str]:
        """Finished checkpoints' names, oldest first."""
        return self.store.completed() if self.store is not None else []

    def restore_latest(self, state: TrainState) -> str | None:
        """Load the newest checkpoint that verifies, if any, and return where it is (a path, or a URL); damaged
        ones are moved aside on the way."""
        name = self._newest_verified() if self.enabled else None
        if name is None:
            return None
        assert self.store is not None
        location = self.store.location(name)
        saved = self.store.reader(location).read_metadata().state_dict_metadata
        wanted = state.state_dict()
        _check_same_model(wanted["model"], saved, location)
        _check_same_optimizer(wanted["optimizer"], saved, location)
        for key in OPTIONAL_STATE:
            if not any(entry == key or entry.startswith(f"{key}.") for entry in saved):
                wanted.pop(key, None)
        dcp.load(wanted, storage_reader=self.store.reader(location))
        state.load_state_dict(wanted)
        self.last_saved_step = state.step
        log.info("resumed from %s at step %d", location, state.step)
        return location

    def save(self, state: TrainState, on_commit: Callable[[int], None] = lambda step: None) -> None:
        """Save `state` as step-N, and call `on_commit(N)` once step-N is complete (committed, so loadable).
        Synchronous: before returning. Asynchronous: this waits for the save before it (finish), copies the
        state to host memory and returns; the background thread writes the copy and calls `on_commit` from
        there. A failure of the background work is raised by the next finish, on every rank.

        A write error inside DCP's writes (raised on every rank alike, so they retry together: a full disk, an
        object store whose retries were spent) is retried once, from the same state (the host copy, when
        asynchronous), after the half-written one is removed (it may be what filled the disk); a second one is
        a WriteError. Rank 0's own steps (removing what a failed save left, the listing, the commit, pruning)
        fail on every rank alike too, and are tried again the same way; a read-back failing on one rank alone is
        a WriteError at once."""
        assert self.store is not None
        self.finish()
        if state.step == self.last_saved_step:
            return
        step, started = state.step, time.perf_counter()
        if self._stager is None:
            self._save_retrying(state.state_dict(), step, started)
            on_commit(step)
            return
        staged = self._stager.stage(state.state_dict())  # from here on, training may change the state

        def write_and_commit() -> None:
            self._save_retrying(staged, step, started)
            on_commit(step)

        self._pending = PendingSave(step, write_and_commit)
        if self.runtime.is_main:
            log.info(
                "checkpoint of step %d copied to host memory in %.3f s; writing it in the background",
                step,
                time.perf_counter() - started,
            )

    def finish(self) -> None:
        """Wait for the asynchronous save in progress, if any, to be complete, and raise what failed it (a
        WriteError, as from a synchronous save). Bounded: PENDING_SAVE_TIMEOUTS distributed timeouts."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        seconds = PENDING_SAVE_TIMEOUTS * self.timeout_seconds
        if not pending.wait(seconds):
            raise TimeoutError(f"the checkpoint of step {pending.step} was still being written after {seconds:.0f} s")
        if pending.error is not None:
            raise pending.error

    def close(self) -> None:
        """At the end of the run, successful or not: wait for a save still in progress, and release the host
        copy. Its failure is only logged: the run has ended (or is ending with an error of its own) already."""
        try:
            self.finish()
        except Exception as error:  # whatever failed the save, the run's own outcome stands
            log.warning("the checkpoint being written when the run ended was not saved: %s", error)
        self._stager = None  # its host buffers go with it

    def _save_retrying(self, state_dict: dict[str, Any], step: int, started: float) -> None:
        for attempt in (1, 2):
            try:
                return self._save(state_dict, step, started)
            except (CheckpointException, SharedWriteFailure) as error:  # every rank's alike: they try again together
                if (cause := _write_failure(error)) is None:
                    raise
                if attempt == 1:
                    log.warning("saving the checkpoint at step %d failed: %s; trying once more", step, cause)
                    continue
            except Exception as error:  # this rank's alone (a read-back): the others are not trying again with it
                if (cause := _write_failure(error)) is None:
                    raise
            raise WriteError(f"cannot save the checkpoint at step {step} in {self.store}: {cause}") from None

    def _save(self, state_dict: dict[str, Any], step: int, started: float) -> None:
        """Write, verify and commit; in the background thread over the checkpoint group when asynchronous, else
        in the training loop over the default group."""
        assert self.store is not None
        group, name = self._group, step_name(step)
        store, location = self.store, self.store.writing_location(name)

        def start() -> None:
            store.start_writing(name)  # removes what a crash mid-write, or a failed try, left
            store.write_text(location, TRAINING_CONFIG_FILE, self.training_config_json)

        self._main_does(start, group)
        dcp.save(state_dict, storage_writer=store.writer(location), process_group=group)
        dist.barrier(group=group)
        # Read back right after writing (from the page cache, mostly, on a disk): the manifest vouches for the
        # bytes that reached the storage, not for what the writer meant to send.
        names = self._main_does(lambda: store.files(location), group)
        files = self._shared_checksums(location, names, group)
        self._main_does(lambda: store.commit(name, json.dumps({"step": step, "files": files})), group)
        self._require_visible(name, group)
        self.last_saved_step = step
        self._main_does(lambda: _prune(store, self.config.keep), group)
        log.info("saved checkpoint %s in %.2f s", self.store.location(name), time.perf_counter() - started)

    def _main_does(self, work: Callable[[], T], group: dist.ProcessGroup | None) -> T:
        """Rank 0's part of a save (the storage's bookkeeping), its result on every rank. A write failure of it
        is raised on every rank (SharedWriteFailure), so that they try again or fail together, rather than wait
        for rank 0 at their next collective until its timeout. A collective, like the barrier it replaces."""
        result, cause = None, None
        if self.runtime.is_main:
            try:
                result = work()
            except Exception as error:
                if (cause := _write_failure(error)) is None:
                    raise
        result, cause = agree((result, cause), group)
        if cause is not None:
            raise SharedWriteFailure(cause)
        return result

    def _newest_verified(self) -> str | None:
        """The newest checkpoint whose files match its manifest. Rank 0 picks each candidate, so every rank
        checks and loads the same one; a damaged one is moved aside, never deleted, and the next is tried."""
        assert self.store is not None
        while (name := agree(self._newest_on_main())) is not None:
            self._require_visible(name)
            damage = self._damage(name)
            if damage is None:
                return name
            if self.runtime.is_main:
                aside = self.store.set_aside(name)
                log.warning(
                    "checkpoint %s is damaged (%s): moved aside to %s; trying the one before it",
                    self.store.location(name),
                    damage,
                    aside,
                )
                self.set_aside.append(aside)
        return None

    def _newest_on_main(self) -> str | None:
        newest = self.completed()[-1:] if self.runtime.is_main else []
        return newest[0] if newest else None

    def _damage(self, name: str) -> str | None:
        """What is wrong with the checkpoint `name`, by its manifest, or None when it is sound."""
        assert self.store is not None
        location = self.store.location(name)
        manifest = agree(_read_manifest(self.store, name) if self.runtime.is_main else None)
        if isinstance(manifest, str):
            return manifest
        found = self._shared_checksums(location, sorted(manifest["files"]))
        wrong = [
            problem
            for file_name, expected in manifest["files"].items()
            if (problem := _describe_mismatch(file_name, found[file_name], expected))
        ]
        if not wrong:
            return None
        return "; ".join(wrong[:3]) + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")

    def _shared_checksums(
        self, location: str, names: list[str], group: dist.ProcessGroup | None = None
    ) -> dict[str, Checksum | None]:
        """Size and CRC-32 of each named file at `location` (None: missing), every rank reading its share."""
        assert self.store is not None
        my_share = names[self.runtime.rank :: self.runtime.world_size]
        mine = {name: self.store.checksum(location, name) for name in my_share}
        shares: list[dict[str, Checksum | None]] = [{} for _ in range(self.runtime.world_size)]
        dist.all_gather_object(shares, mine, group=group)
        return {name: found for share in shares for name, found in share.items()}

    def _require_visible(self, name: str, group: dist.ProcessGroup | None = None) -> None:
        """Every rank must see the same checkpoint; node-local storage would break resuming."""
        assert self.store is not None
        dist.barrier(group=group)  # rank 0 may have just committed it
        device = self.runtime.device if group is None else torch.device("cpu")  # the checkpoint group is gloo's
        visible = torch.tensor(int(self.store.visible(name)), device=device)
        dist.all_reduce(visible, op=dist.ReduceOp.MIN, group=group)
        if not visible:
            raise ProblemsError(
                [
                    Problem(
                        ("checkpoint", "dir"),
                        f"{self.store.location(name)} is not visible from every rank: with several nodes, "
                        "checkpoint.dir must be on shared storage (an object store, or a ReadWriteMany "
                        "PersistentVolumeClaim mounted on every pod)",
                    )
                ]
            )


class SharedWriteFailure(Exception):
    """A write failure of rank 0's part of a save, raised on every rank alike (CheckpointManager._main_does)."""


def check_storage(config: CheckpointConfig) -> None:
    """Before any training: an object store that would refuse the checkpoints fails the run now, with a
    CheckpointStorageError naming the URL and what was refused, rather than at the first save."""
    if config.dir is not None and is_object_url(config.dir):
        objects.check_writable(config.dir)


def _prune(store: CheckpointStore, keep: int) -> None:
    """All but the newest `keep` complete checkpoints go; set-aside and partial ones are no checkpoints here."""
    for old in store.completed()[:-keep]:
        store.remove(old)


def _write_failure(error: BaseException) -> str | None:
    """One line for a failed write: a disk's (full, read-only, ...) or an object store's."""
    if isinstance(error, SharedWriteFailure):
        return str(error)
    return write_error_cause(error) or objects.store_failure(error)


def _read_manifest(store: CheckpointStore, name: str) -> dict[str, Any] | str:
    """The manifest of the checkpoint `name`, or what is wrong with it."""
    try:
        manifest = json.loads(store.read_text(store.location(name), MANIFEST))
    except FileNotFoundError:
        return f"no {MANIFEST}: it is empty, or was not written by this trainer"
    except (OSError, ValueError) as error:
        return f"its {MANIFEST} is unreadable ({error})"
    step = CHECKPOINT_NAME.match(name)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return f"its {MANIFEST} lists no files"
    if step and manifest.get("step") != int(step.group(1)):
        return f"its {MANIFEST} is step {manifest.get('step')}'s"
    return manifest


def _describe_mismatch(name: str, found: Checksum | None, expected: Any) -> str | None:
    if found == expected:
        return None
    if found is None:
        return f"{name} is missing"
    if not isinstance(expected, dict) or found["bytes"] != expected.get("bytes"):
        return f"{name} has {found['bytes']} bytes, not {expected.get('bytes') if isinstance(expected, dict) else '?'}"
    return f"{name} does not match its checksum"


def _check_same_optimizer(optimizer_state: dict[str, Any], saved: dict[str, Any], path: str) -> None:
    """Refuse to resume another optimizer's state (say, AdamW's moments into SGD), which DCP would report
    only as a missing key."""
    expected = {kind for per_parameter in (optimizer_state.get("state") or {}).values() for kind in per_parameter}
    found = {name.rsplit(".", 1)[-1] for name in saved if name.startswith("optimizer.state.")}
    if expected != found:
        message = (
            f"{path} was written with another optimizer (its state holds {', '.join(sorted(found)) or 'nothing'}; "
            f"this one's, {', '.join(sorted(expected)) or 'nothing'}); use a new checkpoint.dir, or restore the "
            "optimizer.name it was trained with"
        )
        raise ProblemsError([Problem(("optimizer", "name"), message)])


def _check_same_model(model_state: dict[str, Any], saved: dict[str, Any], path: str) -> None:
    """Refuse to resume a different model: a loose load would leave new layers freshly initialized."""
    expected = {f"model.{name}": tuple(tensor.shape) for name, tensor in model_state.items()}
    found = {
        name: tuple(meta.size) for name, meta in saved.items() if name.startswith("model.") and hasattr(meta, "size")
    }
    if expected == found:
        return
    details = [
        f"{label}: {', '.join(sorted(names)[:5])}"
        for label, names in (
            ("not in the checkpoint", expected.keys() - found.keys()),
            ("only in the checkpoint", found.keys() - expected.keys()),
            ("other shape", {n for n in expected.keys() & found.keys() if expected[n] != found[n]}),
        )
        if names
    ]
    raise ProblemsError(
        [
            Problem(
                ("checkpoint", "dir"),
                f"{path} was written by a different model ({'; '.join(details)}); use a new checkpoint.dir, "
                "or restore the model config it was trained with",
            )
        ]
    )


def check_data_position(state: TrainState, expected: tuple[int, int]) -> None:
    """A resumed run must continue the same sample stream; a changed globalBatchSize would not."""
    if state.data_position != expected:
        raise ProblemsError(
            [
                Problem(
                    ("globalBatchSize",),
                    f"the checkpoint at step {state.step} stopped at data position {state.data_position}, but this "
                    f"config puts step {state.step} at {expected}; keep globalBatchSize (and the data) unchanged "
                    "to resume",
                )
            ]
        )
