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

from ..validation.elastic_sizes import ElasticSpec, sizes


def gang_size(spec: ElasticSpec, running: int | None, planned: int | None) -> int:
    """The size of the job's current gang: the one a resize that is under way goes to (`planned`, or the
    largest allowed size below it, should the spec have changed since), else the running gang's (a restart
    after a failure keeps it; a probe grows it back) while the spec allows it; else spec.nodes (a first
    gang, or a spec that no longer allows it)."""
    if planned is not None and (size := largest_fitting(spec, planned)) is not None:
        return size
    if running is not None and running in sizes(spec):
        return running
    return spec.nodes


def largest_fitting(spec: ElasticSpec, nodes: int) -> int | None:
    """The largest size the job may run at with at most `nodes` nodes; None if even the smallest needs more."""
    fitting = [allowed for allowed in sizes(spec) if allowed <= nodes]
    return max(fitting) if fitting else None


def smaller(spec: ElasticSpec, size: int, placed: int) -> int | None:
    """The size to shrink a gang of `size` to when the scheduler placed only `placed` of its pods: the largest
    allowed size that fits in them, else the next smaller one (with gang placement the scheduler places no
    pod of a gang that does not fit whole, so it says nothing of how many would); None at the smallest."""
    below = largest_fitting(spec, size - 1)
    if below is None:
        return None
    return largest_fitting(spec, min(placed, below)) or below


def larger(spec: ElasticSpec, size: int, room: int) -> int | None:
    """The size to grow a gang of `size` to when room for `room` more pods was found: the largest allowed
    size that fits, if it is larger."""
    fitting = [allowed for allowed in sizes(spec) if size < allowed <= size + room]
    return max(fitting) if fitting else None
