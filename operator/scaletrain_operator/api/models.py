"""The ScaleTrainJob API (scaletrain.io/v1alpha1): the single source of truth.

The CRD in crds/ is generated from these models (`scaletrain crd`), and the operator, the CLI and the
renderer all parse jobs through `parse_job`. Cross-field rules live in each model's `problems()`;
the ones cheap enough for the API server are mirrored as CEL `x-kubernetes-validations`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema

from scaletrain_trainer.config import TrainingConfig
from scaletrain_trainer.validation import (
    Problem,
    ProblemsError,
    SpecModel,
    cel_rule,
    problems_from_validation_error,
    with_cel_rules,
)

from . import naming

# Kubernetes' resource.Quantity, as its own OpenAPI schema spells it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _quantity(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not re.match(QUANTITY_PATTERN, value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity such as 2Gi, 500m or 4")
    return value


Quantity = Annotated[
    str,
    BeforeValidator(_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]

# A Kubernetes object this API passes through unchanged (affinity, volume sources, env valueFrom,
# podTemplate). The renderer's output is what gets checked against the Kubernetes schemas.
KubeObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

LabelValue = Annotated[str, Field(max_length=63)]


class Toleration(SpecModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def problems(self) -> Iterator[Problem]:
        if self.key is None and self.operator == "Equal":
            yield Problem(("key",), "required unless operator is Exists (an empty key with Exists matches every taint)")
        if self.operator == "Exists" and self.value:
            yield Problem(("value",), "must be empty when operator is Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            yield Problem(("tolerationSeconds",), "only applies to effect NoExecute")


class EnvVar(SpecModel):
    name: str = Field(min_length=1, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str | None = None
    value_from: KubeObject | None = Field(None, description="An EnvVarSource, e.g. secretKeyRef.")

    def problems(self) -> Iterator[Problem]:
        if self.value is not None and self.value_from is not None:
            yield Problem(("valueFrom",), "set either value or valueFrom, not both")


class Volume(BaseModel):
    """A pod volume: a name plus one volume source (persistentVolumeClaim, configMap, ...)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    name: str = Field(pattern=naming.DNS_1123_LABEL, max_length=63)


class VolumeMount(SpecModel):
    name: str = Field(min_length=1)
    mount_path: str = Field(pattern=r"^/")
    read_only: bool | None = None
    sub_path: str | None = None


class ResourceRequirements(SpecModel):
    """cpu/memory (and other non-GPU) requests and limits for each pod; GPUs come from gpusPerNode."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class PodSecurity(SpecModel):
    run_as_non_root: bool = Field(
        True, description="Refuse to start images that run as root; set false for images without a non-root user."
    )
    run_as_user: int | None = Field(None, ge=0)
    run_as_group: int | None = Field(None, ge=0)
    fs_group: int | None = Field(None, ge=0)


class ScaleTrainJobSpec(SpecModel):
    # Image and command
    image: str = Field(min_length=1, description="Trainer image; the default command runs the built-in trainer.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    command: list[str] | None = Field(
        None,
        description="Container command; default: the trainer's launcher, which checks the training config "
        "and then runs torchrun (its flags come from the rendered PET_* env).",
    )
    args: list[str] | None = Field(
        None,
        description="Container args; default: torchrun's, running the built-in trainer (none when command is set).",
    )
    # Size
    nodes: int = Field(1, ge=1, le=naming.MAX_NODES, description="Pods; each runs procsPerNode processes.")
    procs_per_node: int | None = Field(
        None, ge=1, le=256, description="Processes per pod; default gpusPerNode, or 1 on CPU."
    )
    gpus_per_node: int = Field(0, ge=0, le=64, description="GPUs per pod; 0 runs on CPU with gloo.")
    gpu_resource: str = Field("nvidia.com/gpu", pattern=r"^[a-z0-9.-]+/[a-zA-Z0-9._-]+$")
    # Networking
    backend: Literal["auto", "nccl", "gloo"] = Field("auto", description="auto: nccl with GPUs, gloo without.")
    # Placement and pod settings
    node_selector: dict[str, LabelValue] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    affinity: KubeObject | None = None
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    service_account_name: str | None = None
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    env: list[EnvVar] = Field(default_factory=list, max_length=512, description="Extra env; overrides NCCL_* defaults.")
    volumes: list[Volume] = Field(default_factory=list, max_length=64)
    volume_mounts: list[VolumeMount] = Field(default_factory=list, max_length=64)
    shm_size: Quantity = Field("2Gi", description="Size of the memory-backed /dev/shm (counts against pod memory).")
    security_context: PodSecurity = Field(default_factory=PodSecurity)
    pod_template: KubeObject | None = Field(
        None, description="A PodTemplateSpec merged under the rendered pod (sidecars, init containers, ...)."
    )
    # Training
    training: TrainingConfig
    # Lifecycle
    max_restarts: int = Field(3, ge=0, le=naming.MAX_RESTARTS, description="Gang restarts on failure.")
    suspend: bool = False
    queue_name: str | None = Field(None, min_length=1, max_length=63, description="Kueue LocalQueue.")
    active_deadline_seconds: int | None = Field(None, ge=1)
    ttl_seconds_after_finished: int | None = Field(None, ge=0)

    model_config = with_cel_rules(
        cel_rule(
            "self.training.globalBatchSize % (self.training.microBatchSize * self.nodes * "
            "(has(self.procsPerNode) ? self.procsPerNode : (self.gpusPerNode > 0 ? self.gpusPerNode : 1))) == 0",
            "training.globalBatchSize must be divisible by training.microBatchSize × nodes × procsPerNode",
            ".training.globalBatchSize",
        ),
        cel_rule(
            "self.backend != 'nccl' || self.gpusPerNode > 0",
            "backend nccl needs gpusPerNode > 0; use gloo (or auto) on CPU",
            ".backend",
        ),
        cel_rule(
            "!has(self.procsPerNode) || self.gpusPerNode == 0 || self.procsPerNode <= self.gpusPerNode",
            "procsPerNode must not exceed gpusPerNode: each process drives one GPU",
            ".procsPerNode",
        ),
        cel_rule(
            "!self.training.syncBatchNorm || self.gpusPerNode > 0",
            "training.syncBatchNorm needs GPUs",
            ".training.syncBatchNorm",
        ),
    )

    @property
    def resolved_procs_per_node(self) -> int:
        """Processes per pod."""
        if self.procs_per_node is not None:
            return self.procs_per_node
        return self.gpus_per_node or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.resolved_procs_per_node

    @property
    def resolved_backend(self) -> Literal["nccl", "gloo"]:
        if self.backend == "auto":
            return "nccl" if self.gpus_per_node > 0 else "gloo"
        return self.backend

    def problems(self) -> Iterator[Problem]:
        yield from (
            Problem(("training",) + p.path, p.message) for p in self.training.accumulation_problems(self.world_size)
        )
        if self.backend == "nccl" and self.gpus_per_node == 0:
            yield Problem(("backend",), "nccl needs GPUs: set gpusPerNode > 0, or use backend gloo (or auto) on CPU")
        if self.procs_per_node is not None and 0 < self.gpus_per_node < self.procs_per_node:
            yield Problem(
                ("procsPerNode",),
                f"{self.procs_per_node} exceeds gpusPerNode ({self.gpus_per_node}): each process drives one GPU",
            )
        if self.training.sync_batch_norm and self.gpus_per_node == 0:
            yield Problem(("training", "syncBatchNorm"), "SyncBatchNorm needs GPUs: set gpusPerNode > 0 or turn it off")
        for section in ("requests", "limits"):
            if self.gpu_resource in getattr(self.resources, section):
                yield Problem(
                    ("resources", section, self.gpu_resource), "set gpusPerNode instead of requesting GPUs here"
                )
        yield from self._env_problems()
        yield from self._volume_problems()

    def _env_problems(self) -> Iterator[Problem]:
        seen: set[str] = set()
        for index, var in enumerate(self.env):
            if var.name in naming.RANK_ENV:
                yield Problem(
                    ("env", index, "name"), f"{var.name} is set by ScaleTrain from nodes/procsPerNode; remove it"
                )
            elif var.name in seen:
                yield Problem(("env", index, "name"), f"{var.name} is set twice; keep one")
            seen.add(var.name)

    def _volume_problems(self) -> Iterator[Problem]:
        names = [v.name for v in self.volumes]
        template_names = {v.get("name") for v in (self.pod_template or {}).get("spec", {}).get("volumes", [])}
        for index, name in enumerate(names):
            if name == naming.SHM_VOLUME:
                yield Problem(("volumes", index, "name"), f"{name} is reserved for /dev/shm; use shmSize to size it")
            elif name in template_names:
                yield Problem(("volumes", index, "name"), f"{name} is also defined in podTemplate; define it once")
            elif name in names[:index]:
                yield Problem(
                    ("volumes", index, "name"), f"{name} is used by another volume; volume names must be unique"
                )
            elif len(self.volumes[index].model_extra or {}) != 1:
                yield Problem(
                    ("volumes", index), "give exactly one volume source, e.g. persistentVolumeClaim: {claimName: ...}"
                )
        for index, mount in enumerate(self.volume_mounts):
            if mount.mount_path.rstrip("/") == "/dev/shm":
                yield Problem(
                    ("volumeMounts", index, "mountPath"), "/dev/shm is provided by ScaleTrain; size it with shmSize"
                )
            if mount.name not in names and mount.name not in template_names:
                yield Problem(("volumeMounts", index, "name"), f"no volume named {mount.name}; add it to volumes")


class ObjectMeta(BaseModel):
    """The metadata ScaleTrain reads; everything else in metadata passes through."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=naming.DNS_1035_LABEL, max_length=naming.MAX_NAME_LENGTH)
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


ConditionType = Literal["Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]
Phase = Literal["Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]


class Condition(SpecModel):
    """metav1.Condition."""

    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = Field(None, ge=0)
    last_transition_time: datetime
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = Field("", max_length=32768)


class NodeCounts(SpecModel):
    active: int = Field(0, ge=0)
    succeeded: int = Field(0, ge=0)
    failed: int = Field(0, ge=0)


class Progress(SpecModel):
    step: int = Field(0, ge=0)
    max_steps: int | None = Field(None, ge=1)
    loss: float | None = None
    samples_per_second: float | None = Field(None, ge=0)
    eta_seconds: float | None = Field(None, ge=0)
    updated_at: datetime | None = None


class ScaleTrainJobStatus(SpecModel):
    phase: Phase | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    restarts: int = Field(0, ge=0, description="Gang restarts after failures (spec-change restarts not counted).")
    current_job: str | None = Field(None, description="The batch/v1 Job of the current gang generation.")
    nodes: NodeCounts = Field(default_factory=NodeCounts)
    start_time: datetime | None = None
    completion_time: datetime | None = None
    observed_generation: int | None = None
    message: str | None = None
    progress: Progress | None = None


class ScaleTrainJob(SpecModel):
    api_version: Literal["scaletrain.io/v1alpha1"]
    kind: Literal["ScaleTrainJob"]
    metadata: ObjectMeta
    spec: ScaleTrainJobSpec
    status: ScaleTrainJobStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name


def parse_job(document: Any) -> ScaleTrainJob:
    """Validate a ScaleTrainJob document; raises ProblemsError listing every problem with its path."""
    if not isinstance(document, dict):
        raise ProblemsError([Problem((), f"expected a ScaleTrainJob mapping, got {type(document).__name__}")])
    if document.get("kind") != naming.KIND or document.get("apiVersion") != naming.API_VERSION:
        raise ProblemsError(
            [
                Problem(
                    ("kind",),
                    f"expected apiVersion {naming.API_VERSION} and kind {naming.KIND}, "
                    f"got {document.get('apiVersion')!r} / {document.get('kind')!r}",
                )
            ]
        )
    try:
        return ScaleTrainJob.model_validate(document)
    except ValidationError as error:
        raise ProblemsError(problems_from_validation_error(error, ScaleTrainJob)) from None
