"""The elastic policy (spec.elastic): which gang sizes a job may run at, and when it changes size.

A gang shrinks when the scheduler cannot place all of it within scaleDownAfterSeconds, and grows back
when a capacity probe (a few placeholder pods with the gang's placement, controller/reconcile.py) shows
that room for more nodes returned. Every size it uses keeps the global batch exact: the trainer splits
globalBatchSize into microBatchSize × world size × accumulation steps, so the model trained is the same
at each size (the training block's order of samples does not depend on the world size either). A script
of one's own gets the rank env of each generation's size, and keeping its maths exact is its own job.

The operator (controller/reconcile.py) and `scaletrain run-local` (local/gang.py) both take sizes from
here, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import lcm
from typing import Any, Protocol

from scaletrain_trainer.contract.config import TrainingConfig
from scaletrain_trainer.contract.validation import Problem

MAX_SIZES_NAMED = 12  # sizes a message lists before "…"


class ScaleTrainJobSpec(Protocol):
    """What the policy reads of a spec (models.ScaleTrainJobSpec, which checks its range with `problems`)."""

    nodes: int
    elastic: Any  # models.Elastic | None
    training: TrainingConfig | None

    @property
    def resolved_procs_per_node(self) -> int: ...


def sizes(spec: ScaleTrainJobSpec) -> list[int]:
    """The gang sizes the job may run at, smallest first: spec.nodes alone without spec.elastic, else each
    size from elastic.minNodes to nodes at which the global batch stays exact."""
    if spec.elastic is None:
        return [spec.nodes]
    return [size for size in range(spec.elastic.min_nodes, spec.nodes + 1) if keeps_batch(spec, size)]


def keeps_batch(spec: ScaleTrainJobSpec, size: int) -> bool:
    """Whether a gang of `size` nodes splits the global batch evenly (always, for a script of one's own)."""
    if spec.training is None:
        return True
    per_micro_step = spec.training.micro_batch_size * spec.resolved_procs_per_node * size
    return spec.training.global_batch_size % per_micro_step == 0


def problems(spec: ScaleTrainJobSpec) -> list[Problem]:
    """A range that cannot be kept: minNodes above nodes, or a smallest gang that would change the global
    batch. The message names the sizes up to nodes that keep it, and a global batch that keeps it at every
    size of the range asked for. Sizes in between that cannot keep it are skipped (`sizes`)."""
    elastic = spec.elastic
    if elastic is None:
        return []
    where = ("elastic", "minNodes")
    if elastic.min_nodes > spec.nodes:
        return [Problem(where, f"{elastic.min_nodes} exceeds nodes ({spec.nodes}): the smallest gang is at most nodes")]
    if keeps_batch(spec, elastic.min_nodes) or spec.training is None:
        return []
    training = spec.training
    exact = [size for size in range(1, spec.nodes + 1) if keeps_batch(spec, size)]
    every_size = lcm(*range(elastic.min_nodes, spec.nodes + 1))
    batch = training.micro_batch_size * spec.resolved_procs_per_node * every_size
    message = (
        f"a gang of {elastic.min_nodes} nodes cannot keep training.globalBatchSize ({training.global_batch_size}) "
        f"exact: it must be divisible by microBatchSize × procsPerNode × nodes of the gang. The sizes up to "
        f"{spec.nodes} that keep it: {named(exact)}; set minNodes to one of them, or make globalBatchSize a "
        f"multiple of {batch} to keep it at every size from {elastic.min_nodes} to {spec.nodes}"
    )
    return [Problem(where, message)]


def named(numbers: Sequence[int]) -> str:
    shown = ", ".join(map(str, numbers[:MAX_SIZES_NAMED]))
    return shown + (", …" if len(numbers) > MAX_SIZES_NAMED else "")


def gang_size(spec: ScaleTrainJobSpec, running: int | None, planned: int | None) -> int:
    """The size of the job's current gang: the one a resize that is under way goes to (`planned`, or the
    largest allowed size below it, should the spec have changed since), else the running gang's (a restart
    after a failure keeps it; a probe grows it back) while the spec allows it; else spec.nodes (a first
    gang, or a spec that no longer allows it)."""
    if planned is not None and (size := largest_fitting(spec, planned)) is not None:
        return size
    if running is not None and running in sizes(spec):
        return running
    return spec.nodes


def largest_fitting(spec: ScaleTrainJobSpec, nodes: int) -> int | None:
    """The largest size the job may run at with at most `nodes` nodes; None if even the smallest needs more."""
    fitting = [allowed for allowed in sizes(spec) if allowed <= nodes]
    return max(fitting) if fitting else None


def smaller(spec: ScaleTrainJobSpec, size: int, placed: int) -> int | None:
    """The size to shrink a gang of `size` to when the scheduler placed only `placed` of its pods: the largest
    allowed size that fits in them, else the next smaller one (with gang placement the scheduler places no
    pod of a gang that does not fit whole, so it says nothing of how many would); None at the smallest."""
    below = largest_fitting(spec, size - 1)
    if below is None:
        return None
    return largest_fitting(spec, min(placed, below)) or below


def larger(spec: ScaleTrainJobSpec, size: int, room: int) -> int | None:
    """The size to grow a gang of `size` to when room for `room` more pods was found: the largest allowed
    size that fits, if it is larger."""
    fitting = [allowed for allowed in sizes(spec) if size < allowed <= size + room]
    return max(fitting) if fitting else None
