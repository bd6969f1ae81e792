"""The sizes an elastic spec allows, and what it must hold for each: the global batch divides among the nodes of every
size. spec.elastic's validation (api/spec.py) and the operator's choices of size (policy/elastic.py) read these."""

from __future__ import annotations

from collections.abc import Sequence
from math import lcm
from typing import Any, Protocol

from scaletrain_trainer.contract.config import TrainingConfig
from scaletrain_trainer.contract.validation import Problem

MAX_SIZES_NAMED = 12  # sizes a message lists before "…"


class ElasticSpec(Protocol):
    """What the policy reads of a spec (spec.ScaleTrainJobSpec, which checks its range with `problems`)."""

    nodes: int
    elastic: Any  # spec.Elastic | None
    training: TrainingConfig | None

    @property
    def resolved_procs_per_node(self) -> int: ...


def sizes(spec: ElasticSpec) -> list[int]:
    """The gang sizes the job may run at, smallest first: spec.nodes alone without spec.elastic, else each
    size from elastic.minNodes to nodes at which the global batch stays exact."""
    if spec.elastic is None:
        return [spec.nodes]
    return [size for size in range(spec.elastic.min_nodes, spec.nodes + 1) if keeps_batch(spec, size)]


def keeps_batch(spec: ElasticSpec, size: int) -> bool:
    """Whether a gang of `size` nodes splits the global batch evenly (always, for a script of one's own)."""
    if spec.training is None:
        return True
    per_micro_step = spec.training.micro_batch_size * spec.resolved_procs_per_node * size
    return spec.training.global_batch_size % per_micro_step == 0


def problems(spec: ElasticSpec) -> list[Problem]:
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
