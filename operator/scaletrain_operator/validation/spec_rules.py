"""ScaleTrain's own cross-field rules of a spec, on its fields as plain values: what each model's `problems()`
reports beyond its fields' constraints (api/spec.py, api/job.py), each problem at its path under the model. The
CRD's CEL rules (api/cel.py) repeat the ones the API server can check cheaply."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from scaletrain_trainer.contract.config import TrainingConfig
from scaletrain_trainer.contract.validation import Problem

from . import kube_rules

TRAINING_REQUIRED = (
    "required: the built-in trainer needs it (e.g. {globalBatchSize: 16, microBatchSize: 4, maxSteps: 200}); "
    "only a job with a command or args of its own may leave it out"
)


def toleration_problems(
    *, key: str | None, operator: str, value: str | None, effect: str | None, toleration_seconds: int | None
) -> Iterator[Problem]:
    if key is None and operator == "Equal":
        yield Problem(("key",), "required unless operator is Exists (an empty key with Exists matches every taint)")
    if operator == "Exists" and value:
        yield Problem(("value",), "must be empty when operator is Exists")
    if toleration_seconds is not None and effect != "NoExecute":
        yield Problem(("tolerationSeconds",), "only applies to effect NoExecute")


def env_var_problems(*, value: str | None, value_from: dict[str, Any] | None) -> Iterator[Problem]:
    if value is not None and value_from is not None:
        yield Problem(("valueFrom",), "set either value or valueFrom, not both")


def failure_policy_problems(rule_names: list[str]) -> Iterator[Problem]:
    for name in sorted({name for name in rule_names if rule_names.count(name) > 1}):
        yield Problem(("rules",), f"each rule's name must be unique: {name} is used twice or more")


def restart_backoff_problems(*, initial_seconds: int, max_seconds: int) -> Iterator[Problem]:
    if max_seconds < initial_seconds:
        yield Problem(("maxSeconds",), f"must be at least initialSeconds ({initial_seconds})")


def topology_problems(*, required: str | None, preferred: str | None) -> Iterator[Problem]:
    if (required is None) == (preferred is None):
        yield Problem(("required",), "give required or preferred, one of them: a node label such as a rack's")
    for key, label in (("required", required), ("preferred", preferred)):
        if label is not None and (problem := kube_rules.qualified_name(label)):
            yield Problem((key,), problem)


def training_problems(
    training: TrainingConfig | None,
    *,
    command: list[str] | None,
    args: list[str] | None,
    hang_after_seconds: int | None,
    world_size: int,
    gpus_per_node: int,
) -> Iterator[Problem]:
    if training is not None and hang_after_seconds is not None:
        message = "is for a script of one's own; the built-in trainer's hang timeout is training.hangTimeoutSeconds"
        yield Problem(("statusReports", "hangAfterSeconds"), message)
    if training is None:
        if command is None and args is None:
            yield Problem(("training",), TRAINING_REQUIRED)
        return
    for problem in training.accumulation_problems(world_size):
        yield Problem(("training",) + problem.path, problem.message)
    if training.sync_batch_norm and gpus_per_node == 0:
        yield Problem(("training", "syncBatchNorm"), "SyncBatchNorm needs GPUs: set gpusPerNode > 0 or turn it off")


def gpu_problems(
    *,
    backend: str,
    gpus_per_node: int,
    procs_per_node: int | None,
    gpu_resource: str,
    resources: Mapping[str, Mapping[str, str]],
) -> Iterator[Problem]:
    """The backend and the processes per pod against the GPUs, and GPUs asked for where gpusPerNode belongs.
    `resources` are spec.resources' requests and limits by section."""
    if backend == "nccl" and gpus_per_node == 0:
        yield Problem(("backend",), "nccl needs GPUs: set gpusPerNode > 0, or use backend gloo (or auto) on CPU")
    if procs_per_node is not None and 0 < gpus_per_node < procs_per_node:
        yield Problem(
            ("procsPerNode",),
            f"{procs_per_node} exceeds gpusPerNode ({gpus_per_node}): each process drives one GPU",
        )
    for section, amounts in resources.items():
        if gpu_resource in amounts:
            yield Problem(("resources", section, gpu_resource), "set gpusPerNode instead of requesting GPUs here")


def master_port_problems(*, master_port: int, metrics_port: int, with_training: bool) -> Iterator[Problem]:
    if master_port == metrics_port:
        where = "training.metricsPort" if with_training else "the progress port"
        yield Problem(("masterPort",), f"{master_port} is {where} too; give them different ports")


def placement_problems(
    *, required: str | None, preferred: str | None, queue: str | None, gang: str, elastic: bool
) -> Iterator[Problem]:
    """A job's topology (placement.topology's `required` and `preferred`) that nothing would honour, and an
    elastic gang that could not keep its topology or its queue. Paths are the job's."""
    where = ("spec", "placement", "topology")
    # A topology needs Kueue (a queue) or, for a required one, gang placement (the Workload API).
    if queue is None and preferred is not None:
        message = "a preferred topology needs Kueue's Topology Aware Scheduling: set queueName, or use required"
        yield Problem((*where, "preferred"), message)
    if queue is None and required is not None and gang == "none":
        message = "a required topology needs queueName (Kueue) or gang placement: set scheduling.gang to auto"
        yield Problem((*where, "required"), message)
    if elastic and required is not None:
        message = (
            "an elastic gang cannot keep placement.topology.required: its capacity probe asks for room on any "
            "node, so the gang would grow into room outside the gang's domain and shrink again; remove elastic "
            "or the topology"
        )
        yield Problem(("spec", "elastic"), message)
    if elastic and queue is not None:
        message = (
            "an elastic gang cannot grow back through a Kueue queue yet (Kueue admits each Job at the size it "
            "asks for, and a probe outside the queue would pass its quota by): remove elastic, or the queue "
            "(queueName and the kueue.x-k8s.io/queue-name label)"
        )
        yield Problem(("spec", "elastic"), message)
