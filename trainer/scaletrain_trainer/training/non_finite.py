"""Non-finite steps: the check across ranks that stops a diverged run before anything is saved, and
onNonFinite: skip's streak of dropped updates."""

from __future__ import annotations

import logging
import math

import torch
import torch.distributed as dist

from ..contract.exit_codes import NonFinite

log = logging.getLogger(__name__)


class NonFiniteStreak:
    """onNonFinite: skip. The steps in a row whose update loop.train_step dropped (their loss or global gradient norm
    was not finite, the same on every rank): `limit` of them are a divergence, a loss that stays NaN whatever
    the batch. A dropped step is no progress, so no checkpoint is saved while a streak lasts: a save due
    meanwhile waits for the next applied update (a stop signal's save still saves: a disruption is no crash,
    and dropped updates left the weights finite). A gang that diverges again from the last checkpoint then
    leaves nothing newer than it started from, which the operator's crash-loop guard sees. Host-side and
    pure: train_step already synced on the norm."""

    def __init__(self, limit: int):
        self.limit = limit
        self.first: int | None = None  # the streak's first step; None while updates are applied
        self.length = 0
        self.save_owed = False  # a save fell due during the streak

    def count(self, step: int, dropped: bool) -> None:
        """Note whether `step`'s update was dropped; raise NonFinite, naming the streak's first step, at the limit."""
        if not dropped:
            self.first, self.length = None, 0
            return
        self.first = step if self.first is None else self.first
        self.length += 1
        log.warning(
            "step %d: the loss or the gradients were not finite; update dropped (%d in a row, %d stop the run)",
            step,
            self.length,
            self.limit,
        )
        if self.length >= self.limit:
            raise NonFinite(self.first)

    def saves_now(self, due: bool) -> bool:
        """Whether to save at this step: a save due now, or one owed since the streak, once updates apply again."""
        self.save_owed = self.save_owed or due
        if self.save_owed and self.first is None:
            self.save_owed = False
            return True
        return False

    def check_final_loss(self, loss: float, step: int) -> None:
        """A run never ends on a non-finite loss, whatever the policy: it raises NonFinite naming the streak's
        first step (fp16, whose loss scaler skips steps itself, keeps no streak: the last step)."""
        if not math.isfinite(loss):
            raise NonFinite(self.first if self.first is not None else step)


def stop_if_non_finite(first_non_finite: torch.Tensor) -> None:
    """Raise NonFinite if any rank saw a non-finite step (one small collective, at a log step or a save)."""
    seen = first_non_finite.clone()
    seen[seen < 0] = torch.iinfo(torch.int64).max
    dist.all_reduce(seen, op=dist.ReduceOp.MIN)
    if int(seen) != torch.iinfo(torch.int64).max:
        raise NonFinite(int(seen))
