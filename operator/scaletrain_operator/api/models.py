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

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    WithJsonSchema,
    create_model,
)
from pydantic.alias_generators import to_snake

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.config import TrainingConfig
from scaletrain_trainer.contract.exit_codes import (
    EXIT_CONFIG_ERROR,
    EXIT_NON_FINITE,
    EXIT_PREEMPTED,
    EXIT_STORAGE_ERROR,
    EXIT_WRITE_ERROR,
)
from scaletrain_trainer.contract.validation import (
    Problem,
    ProblemsError,
    SpecModel,
    problems_from_validation_error,
)

from ..validation import elastic_sizes, kube_rules, kube_schema
from ..validation.bounds import spec_bound_problems
from . import naming
from .cel import cel_rule, with_cel_rules

# Kubernetes' resource.Quantity, as its own OpenAPI schema spells it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _quantity(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not re.fullmatch(QUANTITY_PATTERN, value):  # "2Gi\n" is not one
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
# An RFC 3339 time: the API server stores and serves it as a string, which strict validation would refuse.
Timestamp = Annotated[datetime, Strict(False)]


class Toleration(SpecModel):
    """A core/v1 Toleration: the pod tolerates any taint that matches key, value and effect under operator."""

    key: str | None = Field(
        None,
        description="The taint key the toleration applies to; required unless operator is Exists "
        "(an empty key with Exists matches every taint).",
    )
    operator: Literal["Exists", "Equal"] = Field(
        "Equal",
        description="How the taint's value is matched: Equal (the default) matches value, Exists matches any value.",
    )
    value: str | None = Field(
        None, description="The taint value to match with operator Equal; must be empty with Exists."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="The taint effect to match: NoSchedule, PreferNoSchedule or NoExecute; unset matches all."
    )
    toleration_seconds: int | None = Field(
        None,
        description="With effect NoExecute only: seconds the pod stays on a node after the taint appears before "
        "it is evicted; unset tolerates the taint forever.",
    )

    def problems(self) -> Iterator[Problem]:
        if self.key is None and self.operator == "Equal":
            yield Problem(("key",), "required unless operator is Exists (an empty key with Exists matches every taint)")
        if self.operator == "Exists" and self.value:
            yield Problem(("value",), "must be empty when operator is Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            yield Problem(("tolerationSeconds",), "only applies to effect NoExecute")


class EnvVar(SpecModel):
    """An environment variable of the trainer container (core/v1 EnvVar)."""

    name: str = Field(
        min_length=1,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Variable name, unique in env; the rank layout's variables (WORLD_SIZE, NODE_RANK, PET_*, "
        "...) are set by ScaleTrain and refused here.",
    )
    value: str | None = Field(
        None,
        description="Variable value; $(VAR_NAME) references to earlier variables are expanded. "
        "Set either value or valueFrom; default: empty.",
    )
    value_from: KubeObject | None = Field(None, description="An EnvVarSource, e.g. secretKeyRef.")

    def problems(self) -> Iterator[Problem]:
        if self.value is not None and self.value_from is not None:
            yield Problem(("valueFrom",), "set either value or valueFrom, not both")


class Volume(BaseModel):
    """A pod volume: a name plus one volume source (persistentVolumeClaim, configMap, ...)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    name: str = Field(
        pattern=naming.DNS_1123_LABEL,
        max_length=63,
        description="Volume name (a DNS-1123 label), unique among the pod's volumes; volumeMounts refer to it.",
    )


class VolumeMount(SpecModel):
    """A mount of a volume into the trainer container (core/v1 VolumeMount)."""

    name: str = Field(min_length=1, description="The volume to mount: a name from volumes or from podTemplate.")
    mount_path: str = Field(
        pattern=r"^/", description="Absolute path in the trainer container to mount the volume at; not /dev/shm."
    )
    read_only: bool | None = Field(None, description="Mount the volume read-only; default false (read-write).")
    sub_path: str | None = Field(
        None, description="Path within the volume to mount instead of its root; default: the volume's root."
    )


class ResourceRequirements(SpecModel):
    """cpu/memory (and other non-GPU) requests and limits for each pod; GPUs come from gpusPerNode."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Minimum compute resources the trainer container needs, e.g. cpu: 4, memory: 16Gi "
        "(core/v1 ResourceRequirements); the scheduler places each pod by these.",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Maximum compute resources the trainer container may use, e.g. memory: 32Gi "
        "(core/v1 ResourceRequirements); the GPU limit comes from gpusPerNode.",
    )


class PodSecurity(SpecModel):
    run_as_non_root: bool = Field(
        True, description="Refuse to start images that run as root; set false for images without a non-root user."
    )
    run_as_user: int | None = Field(
        None, ge=0, description="UID to run the containers' entrypoint as; default: the user in the image metadata."
    )
    run_as_group: int | None = Field(
        None, ge=0, description="GID to run the containers' entrypoint as; default: the container runtime's."
    )
    fs_group: int | None = Field(
        None,
        ge=0,
        description="A supplemental group of all containers; volumes that support it are made owned by "
        "and writable to this GID.",
    )


# Where a job without a training block serves /progress: where the built-in trainer would.
DEFAULT_METRICS_PORT: int = TrainingConfig.model_fields["metrics_port"].default
DEFAULT_CRASH_LOOP_LIMIT = 3  # maxRestartsWithoutProgress for the built-in trainer
MAX_GANG_RECORDS = 16  # status.gangs keeps the last ones
MAX_RESIZES = 16  # and status.resizes
MAX_SIZES_SHOWN = 16  # the sizes goodput has time for (the last ones first seen)
DEFAULT_GRACE_PERIOD_SECONDS = 120  # a step and a checkpoint save after SIGTERM, for most models
TRAINING_REQUIRED = (
    "required: the built-in trainer needs it (e.g. {globalBatchSize: 16, microBatchSize: 4, maxSteps: 200}); "
    "only a job with a command or args of its own may leave it out"
)

# CEL: samples in one micro-step of the whole gang (microBatchSize × nodes × processes per node).
_SAMPLES_PER_MICRO_STEP = (
    "self.training.microBatchSize * self.nodes * "
    "(has(self.procsPerNode) ? self.procsPerNode : (self.gpusPerNode > 0 ? self.gpusPerNode : 1))"
)


_SAMPLES_PER_SMALLEST_MICRO_STEP = _SAMPLES_PER_MICRO_STEP.replace("self.nodes", "self.elastic.minNodes")


def _template_containers(pod_template: Any) -> list[tuple[int, dict[str, Any]]]:
    """The containers of a podTemplate, with their index, as far as they are mappings (other shapes are
    _pod_template_problems')."""
    pod_spec = pod_template.get("spec") if isinstance(pod_template, dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    return [
        (i, item) for i, item in enumerate(containers if isinstance(containers, list) else []) if isinstance(item, dict)
    ]


def _template_grace_period(pod_template: Any) -> int | None:
    """podTemplate's terminationGracePeriodSeconds, when it sets a whole number of seconds."""
    pod_spec = pod_template.get("spec") if isinstance(pod_template, dict) else None
    value = pod_spec.get("terminationGracePeriodSeconds") if isinstance(pod_spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# A condition reason (metav1.Condition): a rule's name becomes the reason of the condition it causes.
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class ExitCodes(SpecModel):
    """Which exit codes of the trainer container a rule matches (as JobSet and batch/v1 podFailurePolicy)."""

    operator: Literal["In", "NotIn"] = Field(description="In: one of `values`; NotIn: none of them.")
    values: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        min_length=1, max_length=255, description="Exit codes, 0 to 255, e.g. [3] or [137, 143]."
    )


class PodConditionMatch(SpecModel):
    """A pod condition a rule matches, e.g. DisruptionTarget True (evicted, preempted, its node deleted)."""

    type: str = Field(min_length=1, max_length=316, description="The pod condition's type, e.g. DisruptionTarget.")
    status: Literal["True", "False", "Unknown"] = Field("True", description="Its status; default True.")


class FailurePolicyRule(SpecModel):
    """What a failed gang means when its root-cause pod matches: every matcher given must match; a rule with
    none matches every failure."""

    name: str = Field(
        pattern=REASON_PATTERN,
        max_length=128,
        description="CamelCase, e.g. BadInput; the reason of the condition and the Event the rule causes.",
    )
    action: Literal["FailJob", "RestartGang", "RestartGangIgnoreLimit"] = Field(
        description="FailJob: the job fails at once. RestartGang: a gang restart counted against maxRestarts. "
        "RestartGangIgnoreLimit: a gang restart counted as a disruption (status.disruptions, capped by "
        "maxDisruptions), not against maxRestarts."
    )
    on_exit_codes: ExitCodes | None = Field(None, description="The trainer container's exit code.")
    on_pod_conditions: list[PodConditionMatch] = Field(
        default_factory=list, max_length=8, description="Conditions the pod has, all of them."
    )
    exclude_node: bool = Field(
        False,
        description="Treat the failure as the node's: with failurePolicy.excludeNodes, the next gang avoids "
        "the failed pod's node.",
    )


class ExcludeNodes(SpecModel):
    """Keep the next gangs off nodes where a gang failed for the node's sake: a hang, a disruption, or a
    rule with excludeNode."""

    mode: Literal["Required", "Preferred"] = Field(
        "Required",
        description="Required: the pods may not run there (added to each required node selector term); "
        "Preferred: the scheduler avoids them if it can (a preferred term of weight 100).",
    )
    max: int = Field(8, ge=1, le=64, description="Nodes kept at most; the oldest drop out first.")


class FailurePolicy(SpecModel):
    """What failures mean, beyond the built-in defaults (docs/api.md, Failure policy)."""

    rules: list[FailurePolicyRule] = Field(
        default_factory=list,
        max_length=32,
        description="Tried in order against the gang's root-cause pod; the first match decides. The built-in "
        f"meanings (exit {EXIT_CONFIG_ERROR}, {EXIT_WRITE_ERROR}, {EXIT_STORAGE_ERROR} and {EXIT_NON_FINITE} fail the "
        f"job, a disruption or exit {EXIT_PREEMPTED} restarts without counting, anything else restarts counted) apply "
        "when none matches.",
    )
    exclude_nodes: ExcludeNodes | None = Field(
        None, description="Avoid the nodes of failures classed as the node's; unset: no node is avoided."
    )

    model_config = with_cel_rules(
        cel_rule(
            "!has(self.rules) || self.rules.all(r, self.rules.exists_one(o, o.name == r.name))",
            "each rule's name must be unique",
            ".rules",
        ),
    )

    def problems(self) -> Iterator[Problem]:
        names = [rule.name for rule in self.rules]
        for name in sorted({name for name in names if names.count(name) > 1}):
            yield Problem(("rules",), f"each rule's name must be unique: {name} is used twice or more")


class Scheduling(SpecModel):
    """How the scheduler places the gang: all of its pods at once, or each on its own (docs/operator.md,
    Shared clusters)."""

    gang: Literal["auto", "workload", "none"] = Field(
        "auto",
        description="auto: gang placement through a scheduling.k8s.io Workload where the cluster serves that API "
        "(Kubernetes 1.36+, feature gates GenericWorkload and WorkloadWithJob), else none; workload: the same, and "
        "the job fails where the API is not served; none: the scheduler places each pod on its own, so part of a "
        "gang may hold its nodes while the rest waits.",
    )


class ScaleUp(SpecModel):
    """How an elastic gang below spec.nodes finds out that room for more nodes returned."""

    check_every_seconds: int = Field(
        300,
        ge=10,
        le=86400,
        description="Seconds between capacity probes while the gang runs below nodes: placeholder pods with the "
        "gang's placement and requests, deleted as soon as the scheduler placed them or said it cannot; when "
        "they were placed, the gang stops at a step boundary with a checkpoint and the next one is larger.",
    )


class Elastic(SpecModel):
    """A gang that shrinks when nodes are lost and grows back when they return, keeping the global batch (and
    so the model trained) exact at every size (docs/api.md, Elastic gangs)."""

    min_nodes: int = Field(
        ge=1,
        le=naming.MAX_NODES,
        description="The smallest gang; below it the job waits (scheduleTimeoutSeconds applies). With training, "
        "the global batch must stay exact at it; sizes between it and nodes at which it would not are skipped "
        "(status.elasticSizes lists the sizes used).",
    )
    scale_down_after_seconds: int = Field(
        120,
        ge=0,
        le=86400,
        description="Seconds a pod of the gang may stay unschedulable before the gang restarts at the largest "
        "smaller size that fits (neither a restart nor a disruption).",
    )
    scale_up: ScaleUp = Field(default_factory=ScaleUp, description="Growing back to nodes.")


class RestartBackoff(SpecModel):
    """How long the next gang waits after restarts in quick succession, as the kubelet backs off a container
    that keeps crashing: a gang that ran for resetAfterSeconds restarts at once."""

    initial_seconds: int = Field(
        10,
        ge=0,
        le=3600,
        description="The wait before the next gang from the second gang in a row that ended within "
        "resetAfterSeconds of its start (the first restarts at once); doubled for each more, up to maxSeconds. "
        "0: no wait.",
    )
    max_seconds: int = Field(300, ge=1, le=86400, description="The longest wait.")
    reset_after_seconds: int = Field(
        600, ge=1, le=86400, description="A gang that ran this long before it ended restarts at once."
    )

    model_config = with_cel_rules(
        cel_rule("self.maxSeconds >= self.initialSeconds", "maxSeconds must be at least initialSeconds", ".maxSeconds")
    )

    def problems(self) -> Iterator[Problem]:
        if self.max_seconds < self.initial_seconds:
            yield Problem(("maxSeconds",), f"must be at least initialSeconds ({self.initial_seconds})")


class StatusReports(SpecModel):
    """The reports a script of one's own pushes to the operator in the Kubeflow Trainer status protocol
    (KUBEFLOW_TRAINER_SERVER_*; HF's Trainer does so by itself): they become status.progress (docs/api.md)."""

    hang_after_seconds: int | None = Field(
        None,
        ge=10,
        le=7 * 86400,
        description="Once the running gang has reported, no report for this long is a Hang (restarted, or failed, "
        "as failurePolicy says for the built-in trainer's hangs). Counted only while the operator serves the "
        "reports: a gang never reported, or an operator that cannot be reached, is no hang. Default: off.",
    )


# An S3-compatible store's URL: http or https, a host and maybe a port and a path; no user, query or fragment (a
# key in the URL would end up in the rendered Job).
ENDPOINT_PATTERN = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[^?#@\s]*)?$"


def _endpoint(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(ENDPOINT_PATTERN, value):  # not echoed: it may hold a key
        raise ValueError(
            "not an http(s) URL of a host, e.g. http://seaweedfs.storage:8333 or https://s3.example.com: give the "
            "store's address, without credentials or a query, or unset it for AWS's own endpoints"
        )
    return value


Endpoint = Annotated[str, BeforeValidator(_endpoint), WithJsonSchema({"type": "string", "pattern": ENDPOINT_PATTERN})]
SecretKey = Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]  # a key of a Secret's data


class CredentialsSecret(SpecModel):
    """A Secret of the job's namespace holding the store's access key; each key becomes the variable the AWS SDKs
    read (AWS_ACCESS_KEY_ID, ...) through a secretKeyRef, so that no key is written into the job or its Job."""

    name: str = Field(
        pattern=naming.DNS_1123_SUBDOMAIN, max_length=253, description="The Secret, in the job's namespace."
    )
    access_key_id_key: SecretKey = Field(
        wire.S3_ACCESS_KEY_ENV,
        description=f"The Secret's key holding the access key ID; default {wire.S3_ACCESS_KEY_ENV}.",
    )
    secret_access_key_key: SecretKey = Field(
        wire.S3_SECRET_KEY_ENV,
        description=f"The Secret's key holding the secret access key; default {wire.S3_SECRET_KEY_ENV}.",
    )
    session_token_key: SecretKey | None = Field(
        None,
        description="The Secret's key holding a session token, for temporary credentials; unset: none.",
    )


class ObjectStorage(SpecModel):
    """Where the training config's s3:// URLs (checkpoint.dir, data.path, eval.path, the hf model's options) are
    served, and with whose credentials: the trainer container (and rankEnvContainers) get the AWS SDKs' own
    variables, so a script of one's own with boto3 reads the same."""

    endpoint: Endpoint | None = Field(
        None,
        description="An S3-compatible store's URL (AWS_ENDPOINT_URL), http:// or https://, e.g. "
        "http://seaweedfs.storage:8333; unset: AWS's own endpoints.",
    )
    region: str | None = Field(
        None,
        pattern=naming.DNS_1123_LABEL,
        max_length=63,
        description="The store's region (AWS_REGION), e.g. us-east-1; unset: the SDK's default.",
    )
    credentials_secret: CredentialsSecret | None = Field(
        None,
        description="A Secret holding an access key. Unset: the pod's own identity, e.g. IAM Roles for Service "
        "Accounts (set serviceAccountName to an annotated ServiceAccount: EKS's webhook adds AWS_ROLE_ARN and "
        "AWS_WEB_IDENTITY_TOKEN_FILE, which the SDK reads), or the node's instance role.",
    )


class Topology(SpecModel):
    """All pods of the gang in one domain of a node label (a rack, a block, an NVLink domain)."""

    required: str | None = Field(
        None,
        max_length=317,
        description="A node label, e.g. cloud.provider.com/topology-block: the gang waits until it fits whole "
        "in one domain of it (Kueue's Topology Aware Scheduling with queueName; else the Workload's topology "
        "constraint).",
    )
    preferred: str | None = Field(
        None,
        max_length=317,
        description="A node label: one domain of it if the gang fits there, else the fewest domains (Kueue's "
        "Topology Aware Scheduling; needs queueName).",
    )

    model_config = with_cel_rules(
        cel_rule("has(self.required) != has(self.preferred)", "give required or preferred, one of them", ".required")
    )

    def problems(self) -> Iterator[Problem]:
        if (self.required is None) == (self.preferred is None):
            yield Problem(("required",), "give required or preferred, one of them: a node label such as a rack's")
        for key in ("required", "preferred"):
            label = getattr(self, key)
            if label is not None and (problem := kube_rules.qualified_name(label)):
                yield Problem((key,), problem)


class Placement(SpecModel):
    """Where the gang's pods go together."""

    topology: Topology | None = Field(None, description="All pods of the gang in one domain of a node label.")


class ScaleTrainJobSpec(SpecModel):
    """What to train and how: the trainer image, the gang's size and placement, training and lifecycle."""

    # Image and command
    image: str = Field(min_length=1, description="Trainer image; the default command runs the built-in trainer.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None,
        description="Pull policy of the trainer image: Always, IfNotPresent or Never; default: Always for "
        ":latest or untagged images, else IfNotPresent.",
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
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
    master_port: int = Field(
        naming.DEFAULT_MASTER_PORT,
        ge=1024,
        le=65535,
        description="The rendezvous port on the gang's rank-0 pod: MASTER_PORT and PET_MASTER_PORT in every pod. "
        "29500 is torchrun's default; PyTorchJob's is 23456.",
    )
    gpu_resource: str = Field(
        "nvidia.com/gpu",
        pattern=r"^[a-z0-9.-]+/[a-zA-Z0-9._-]+$",
        description="The extended resource that gpusPerNode requests as each pod's limit, e.g. amd.com/gpu; GPU "
        "pods also tolerate a NoSchedule taint with this key.",
    )
    # Networking
    backend: Literal["auto", "nccl", "gloo"] = Field("auto", description="auto: nccl with GPUs, gloo without.")
    # Placement and pod settings
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict,
        description="Labels a node must have for the pods of the gang to run on it (core/v1 PodSpec nodeSelector).",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=64,
        description="Tolerations added to every pod of the gang (core/v1 Toleration); with GPUs, one for "
        "gpuResource's NoSchedule taint is added unless given here.",
    )
    affinity: KubeObject | None = Field(
        None,
        description="Scheduling constraints for every pod of the gang: node affinity, pod affinity and "
        "anti-affinity (core/v1 Affinity).",
    )
    priority_class_name: str | None = Field(
        None,
        description="PriorityClass of the pods, which sets their scheduling priority and preemption; default: "
        "the cluster's global default PriorityClass, else priority 0.",
    )
    scheduler_name: str | None = Field(
        None, description="Scheduler that places the pods, e.g. a gang scheduler; default: default-scheduler."
    )
    service_account_name: str | None = Field(
        None,
        description="ServiceAccount the pods run as, with its token mounted; default: the namespace's default "
        "ServiceAccount, without a token (the trainer does not call the API).",
    )
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    env: list[EnvVar] = Field(default_factory=list, max_length=512, description="Extra env; overrides NCCL_* defaults.")
    volumes: list[Volume] = Field(
        default_factory=list,
        max_length=64,
        description="Volumes added to every pod of the gang (core/v1 Volume), for volumeMounts to mount.",
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        max_length=64,
        description="Volumes mounted into the trainer container (core/v1 VolumeMount); /dev/shm is provided, "
        "sized by shmSize.",
    )
    shm_size: Quantity = Field("2Gi", description="Size of the memory-backed /dev/shm (counts against pod memory).")
    security_context: PodSecurity = Field(
        default_factory=PodSecurity,
        description="Security attributes of every pod (core/v1 PodSecurityContext); ScaleTrain adds seccompProfile "
        "RuntimeDefault, and the trainer container drops all capabilities and may not escalate privileges "
        "(Pod Security restricted).",
    )
    pod_template: KubeObject | None = Field(
        None, description="A PodTemplateSpec merged under the rendered pod (sidecars, init containers, ...)."
    )
    rank_env_containers: list[Annotated[str, Field(pattern=naming.DNS_1123_LABEL, max_length=63)]] = Field(
        [naming.TRAINER_CONTAINER],  # pydantic copies a mutable default for each object
        min_length=1,
        max_length=16,
        description="Containers that get the rank env (MASTER_ADDR, WORLD_SIZE, PET_*, ...) and spec.env: the "
        "trainer (always), and containers of podTemplate by name, e.g. pytorch for a template copied from a "
        "PyTorchJob; default [trainer].",
    )
    # Training
    training: TrainingConfig | None = Field(
        None,
        description="The built-in trainer's config; required unless command or args is set (a script of your "
        "own, which then gets no training config and reports progress as docs/api.md describes).",
    )
    object_storage: ObjectStorage | None = Field(
        None,
        description="The S3 (or S3-compatible) store behind the training config's s3:// URLs: its endpoint, "
        "region and credentials. Unset: AWS's endpoints with the pod's own identity.",
    )
    # Lifecycle
    max_restarts: int = Field(
        3, ge=0, le=naming.MAX_RESTARTS, description="Gang restarts on failure (disruptions not counted)."
    )
    max_disruptions: int = Field(
        naming.DEFAULT_MAX_DISRUPTIONS,
        ge=0,
        le=naming.MAX_DISRUPTIONS,
        description="Gang restarts after disruptions (a pod evicted or preempted, its node lost, or the trainer "
        f"stopped by SIGTERM after a checkpoint: exit {EXIT_PREEMPTED}) before the job fails with reason "
        f"DisruptionLimitReached; default {naming.DEFAULT_MAX_DISRUPTIONS}.",
    )
    restart_backoff: RestartBackoff = Field(
        default_factory=RestartBackoff,
        description="The wait before the next gang after restarts and disruptions in quick succession (not with "
        "a queue: Kueue decides when the next gang starts).",
    )
    max_restarts_without_progress: int | None = Field(
        None,
        ge=1,
        le=naming.MAX_RESTARTS,
        description="Gangs in a row that fail without a checkpoint newer than the one they started from before "
        "the job fails with reason NoProgress (a crash loop); default 3 with the built-in trainer, off for a "
        "script of one's own (which must then report resumedFromStep and checkpointStep, docs/api.md).",
    )
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    status_reports: StatusReports = Field(
        default_factory=StatusReports,
        description="Progress a script of one's own pushes (not for the built-in trainer, which reports its own).",
    )
    termination_grace_period_seconds: int | None = Field(
        None,
        ge=0,
        le=86400,
        description="Seconds a stopped pod has after SIGTERM before SIGKILL (core/v1 PodSpec): the trainer "
        f"finishes its step, saves a checkpoint and exits {EXIT_PREEMPTED} in it, so cover one step plus one save; "
        "default: "
        "podTemplate's, else 120.",
    )
    suspend: bool = Field(
        False,
        description="true stops the gang (its pods are deleted, phase Suspended) without failing the job; "
        "false runs it again from the last checkpoint (with queueName, once Kueue admits it).",
    )
    queue_name: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        description="Kueue LocalQueue that admits every gang generation's Job (the job's label "
        "kueue.x-k8s.io/queue-name does the same); Kueue decides when the gang starts, and may preempt it.",
    )
    scheduling: Scheduling = Field(default_factory=Scheduling, description="Gang placement.")
    elastic: Elastic | None = Field(
        None,
        description="Run with fewer nodes than nodes while the rest cannot be placed, and grow back when they can; "
        "nodes stays the desired size. Unset: the gang always has nodes pods.",
    )
    placement: Placement = Field(default_factory=Placement, description="Topology placement of the gang.")
    active_deadline_seconds: int | None = Field(
        None,
        ge=1,
        description="Seconds each gang generation may run before the job fails with reason DeadlineExceeded "
        "(a gang restart starts the clock again); unset: no limit.",
    )
    schedule_timeout_seconds: int | None = Field(
        None,
        ge=1,
        description="Seconds a pod of the gang may stay unschedulable (condition PodScheduled False, reason "
        "Unschedulable) before the job fails with reason Unschedulable (a gang restart starts the clock again); "
        "unset: it waits, with the condition Schedulable False saying why.",
    )
    ttl_seconds_after_finished: int | None = Field(
        None,
        ge=0,
        description="Seconds after the job finished (Succeeded or Failed) until the operator deletes it, with its "
        "Service, Jobs and pods; unset keeps it.",
    )

    model_config = with_cel_rules(
        cel_rule(
            # A zero divisor is already refused by the fields' minimums; the rule then stays quiet
            # instead of adding "modulus by zero".
            f"!has(self.training) || {_SAMPLES_PER_MICRO_STEP} == 0 || "
            f"self.training.globalBatchSize % ({_SAMPLES_PER_MICRO_STEP}) == 0",
            "training.globalBatchSize must be divisible by training.microBatchSize × nodes × procsPerNode",
            ".training.globalBatchSize",
        ),
        cel_rule(
            "!has(self.elastic) || self.elastic.minNodes <= self.nodes",
            "elastic.minNodes must not exceed nodes",
            ".elastic.minNodes",
        ),
        cel_rule(
            f"!has(self.elastic) || !has(self.training) || {_SAMPLES_PER_SMALLEST_MICRO_STEP} == 0 || "
            f"self.training.globalBatchSize % ({_SAMPLES_PER_SMALLEST_MICRO_STEP}) == 0",
            "training.globalBatchSize must be divisible by training.microBatchSize × elastic.minNodes × procsPerNode: "
            "the smallest gang keeps the global batch exact too (scaletrain validate names the sizes that do)",
            # The message names no sizes: that would take a loop (CEL's lists.range, which clusters before
            # 1.34 lack), and a messageExpression's estimated cost is over the API server's budget anyway.
            ".elastic.minNodes",
        ),
        cel_rule(
            "has(self.training) || has(self.command) || has(self.args)",
            TRAINING_REQUIRED,
            ".training",
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
            "!has(self.training) || !self.training.syncBatchNorm || self.gpusPerNode > 0",
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

    @property
    def crash_loop_limit(self) -> int | None:
        """maxRestartsWithoutProgress, resolved: a script of one's own may not report its checkpoints."""
        if self.max_restarts_without_progress is not None:
            return self.max_restarts_without_progress
        return DEFAULT_CRASH_LOOP_LIMIT if self.training is not None else None

    @property
    def grace_period_seconds(self) -> int:
        """terminationGracePeriodSeconds of the pods: the spec's, podTemplate's, or the default."""
        if self.termination_grace_period_seconds is not None:
            return self.termination_grace_period_seconds
        templated = _template_grace_period(self.pod_template)
        return templated if templated is not None else DEFAULT_GRACE_PERIOD_SECONDS

    @property
    def metrics_port(self) -> int:
        """Where rank 0 serves /progress (and the built-in trainer its metrics)."""
        return self.training.metrics_port if self.training is not None else DEFAULT_METRICS_PORT

    def problems(self) -> Iterator[Problem]:
        found = list(self._spec_problems())
        yield from found
        if not found:  # the server's rules repeat some of ScaleTrain's in other words: one report of each
            yield from self._pass_through_problems()

    def _spec_problems(self) -> Iterator[Problem]:
        yield from self._training_problems()
        for problem in self.failure_policy.problems():
            yield Problem(("failurePolicy",) + problem.path, problem.message)
        yield from self._placement_problems()
        yield from elastic_sizes.problems(self)
        if self.backend == "nccl" and self.gpus_per_node == 0:
            yield Problem(("backend",), "nccl needs GPUs: set gpusPerNode > 0, or use backend gloo (or auto) on CPU")
        if self.procs_per_node is not None and 0 < self.gpus_per_node < self.procs_per_node:
            yield Problem(
                ("procsPerNode",),
                f"{self.procs_per_node} exceeds gpusPerNode ({self.gpus_per_node}): each process drives one GPU",
            )
        for section in ("requests", "limits"):
            if self.gpu_resource in getattr(self.resources, section):
                yield Problem(
                    ("resources", section, self.gpu_resource), "set gpusPerNode instead of requesting GPUs here"
                )
        if self.master_port == self.metrics_port:
            where = "training.metricsPort" if self.training is not None else "the progress port"
            yield Problem(("masterPort",), f"{self.master_port} is {where} too; give them different ports")
        templated = _template_grace_period(self.pod_template)
        if None not in (templated, self.termination_grace_period_seconds) and templated != self.grace_period_seconds:
            message = f"terminationGracePeriodSeconds is {self.grace_period_seconds} in spec; set it in one place"
            yield Problem(("podTemplate", "spec", "terminationGracePeriodSeconds"), message)
        yield from self._rank_env_container_problems()
        yield from self._env_problems()
        yield from self._pod_template_problems()
        yield from self._volume_problems()
        yield from self._kubernetes_problems()

    def _training_problems(self) -> Iterator[Problem]:
        if self.training is not None and self.status_reports.hang_after_seconds is not None:
            message = "is for a script of one's own; the built-in trainer's hang timeout is training.hangTimeoutSeconds"
            yield Problem(("statusReports", "hangAfterSeconds"), message)
        if self.training is None:
            if self.command is None and self.args is None:
                yield Problem(("training",), TRAINING_REQUIRED)
            return
        for problem in self.training.accumulation_problems(self.world_size):
            yield Problem(("training",) + problem.path, problem.message)
        if self.training.sync_batch_norm and self.gpus_per_node == 0:
            yield Problem(("training", "syncBatchNorm"), "SyncBatchNorm needs GPUs: set gpusPerNode > 0 or turn it off")

    def _env_problems(self) -> Iterator[Problem]:
        """spec.env, and the env in podTemplate of each container that gets the rank env: none of the
        names ScaleTrain sets (naming.env_set_by_scaletrain), each named once."""
        set_by_scaletrain = naming.env_set_by_scaletrain(self.resolved_procs_per_node)
        sources: list[tuple[tuple[Any, ...], list[Any]]] = [(("env",), [var.name for var in self.env])]
        for index, container in _template_containers(self.pod_template):
            if container.get("name") in self.rank_env_containers and isinstance(container.get("env"), list):
                names = [var.get("name") if isinstance(var, dict) else None for var in container["env"]]
                sources.append((("podTemplate", "spec", "containers", index, "env"), names))
        for where, names in sources:
            seen: set[str] = set()
            for index, name in enumerate(names):
                if name in set_by_scaletrain:
                    message = f"{name} is set by ScaleTrain from {set_by_scaletrain[name]}; remove it"
                    yield Problem((*where, index, "name"), message)
                elif name in seen:
                    yield Problem((*where, index, "name"), f"{name} is set twice; keep one")
                seen.add(name)

    def _rank_env_container_problems(self) -> Iterator[Problem]:
        """Each name is the trainer or a container of podTemplate, once: a name that matches nothing would
        leave the script it meant without ranks, silently."""
        containers = _template_containers(self.pod_template)
        in_template = {container["name"] for _, container in containers if isinstance(container.get("name"), str)}
        for index, name in enumerate(self.rank_env_containers):
            if name in self.rank_env_containers[:index]:
                yield Problem(("rankEnvContainers", index), f"{name} is listed twice; keep one")
            elif name != naming.TRAINER_CONTAINER and name not in in_template:
                message = (
                    f"no container {name} in podTemplate.spec.containers; name the trainer "
                    f"({naming.TRAINER_CONTAINER}) or a container the template defines"
                )
                yield Problem(("rankEnvContainers", index), message)

    def _pod_template_problems(self) -> Iterator[Problem]:
        """The shape of a PodTemplateSpec, as far as rendering reads it; its contents are the cluster's to
        judge (docs/api.md)."""
        template = self.pod_template or {}
        for key in template.keys() - {"metadata", "spec"}:
            yield Problem(("podTemplate", key), "unknown field; a pod template has metadata and spec")
        for key in ("metadata", "spec"):
            if key in template and not isinstance(template[key], dict):
                yield Problem(("podTemplate", key), f"must be a mapping, not {type(template[key]).__name__}")
        pod_spec = template.get("spec")
        for key in ("containers", "initContainers", "volumes") if isinstance(pod_spec, dict) else ():
            items = pod_spec.get(key, [])
            if not isinstance(items, list):
                yield Problem(("podTemplate", "spec", key), f"must be a list, not {type(items).__name__}")
                continue
            for index, item in enumerate(items):
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    yield Problem(("podTemplate", "spec", key, index), "must be a mapping with a name")
                elif key != "volumes":
                    yield from self._template_gpu_problems(item, ("podTemplate", "spec", key, index))

    def _template_gpu_problems(self, container: dict[str, Any], where: tuple[Any, ...]) -> Iterator[Problem]:
        """GPUs come from gpusPerNode, which also sets the backend, the process count and the toleration: a
        GPU limit in the template would give a gloo job GPUs it never uses, on nodes it cannot tolerate."""
        resources = container.get("resources")
        for section in ("limits", "requests"):
            values = resources.get(section) if isinstance(resources, dict) else None
            if isinstance(values, dict) and self.gpu_resource in values:
                message = "set gpusPerNode instead of giving a container GPUs in podTemplate"
                yield Problem((*where, "resources", section, self.gpu_resource), message)

    def _placement_problems(self) -> Iterator[Problem]:
        if self.placement.topology is not None:
            for problem in self.placement.topology.problems():
                yield Problem(("placement", "topology") + problem.path, problem.message)

    def _kubernetes_problems(self) -> Iterator[Problem]:
        """Kubernetes' rules for what the pods get, which the API server would apply to the Job."""
        sections = {"requests": self.resources.requests, "limits": self.resources.limits}
        yield from kube_rules.resources_problems(sections, ("resources",))
        if kube_rules.parse_quantity(self.shm_size) <= 0:  # the emptyDir's sizeLimit
            yield Problem(("shmSize",), f"{self.shm_size} must be more than 0, e.g. 2Gi")
        yield from kube_rules.labels_problems(self.node_selector, ("nodeSelector",))
        if self.queue_name is not None and (problem := kube_rules.label_value(self.queue_name)):
            yield Problem(("queueName",), problem)  # it becomes the Job's kueue.x-k8s.io/queue-name label
        names = {
            "priorityClassName": self.priority_class_name,
            "serviceAccountName": self.service_account_name,
            "schedulerName": self.scheduler_name,
        }
        yield from kube_rules.name_problems(names)
        yield from kube_rules.mounts_problems(self.volume_mounts, ("volumeMounts",))
        for index, volume in enumerate(self.volumes):
            yield from kube_rules.volume_source_problems(volume.model_extra or {}, ("volumes", index))
        for index, toleration in enumerate(self.tolerations):
            if toleration.key and (problem := kube_rules.qualified_name(toleration.key)):
                yield Problem(("tolerations", index, "key"), problem)
        if isinstance(self.pod_template, dict):
            yield from kube_rules.metadata_problems(self.pod_template.get("metadata"), ("podTemplate", "metadata"))

    def _pass_through_problems(self) -> Iterator[Problem]:
        """What the API server would refuse in what the spec passes through to the pods (kube_schema.py)."""
        yield from kube_schema.pass_through_problems(
            pod_template=self.pod_template,
            affinity=self.affinity,
            volumes=[volume.model_dump(mode="json") for volume in self.volumes],
            env_sources={index: var.value_from for index, var in enumerate(self.env) if var.value_from is not None},
            tolerations=[t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in self.tolerations],
            rendered_containers=dict.fromkeys([naming.TRAINER_CONTAINER, *self.rank_env_containers], self.image),
        )

    def _template_volume_names(self) -> set[str]:
        pod_spec = (self.pod_template or {}).get("spec")
        volumes = pod_spec.get("volumes") if isinstance(pod_spec, dict) else None
        return {v.get("name") for v in volumes if isinstance(v, dict)} if isinstance(volumes, list) else set()

    def _volume_problems(self) -> Iterator[Problem]:
        names = [v.name for v in self.volumes]
        template_names = self._template_volume_names()
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


ConditionType = Literal[
    "Created",
    "Running",
    "Restarting",
    "Succeeded",
    "Failed",
    "Suspended",
    "PodCreationFailed",
    "Schedulable",
    "ProgressUnreachable",
    "Queued",
]
Phase = Literal["Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]


class Condition(SpecModel):
    """metav1.Condition."""

    type: ConditionType = Field(
        description="Type of condition: Created (the gang was started), Running, Restarting and Suspended (True while "
        "in that phase), Succeeded or Failed (final), PodCreationFailed (True while the Job controller cannot "
        "create the gang's pods, e.g. refused by Pod Security admission or a ResourceQuota), Schedulable (False while "
        "the scheduler cannot place a pod of the gang, with its message; True again once it could), "
        "ProgressUnreachable (True while the operator cannot read rank 0's progress endpoint, with why; never a "
        "restart by itself), Queued (True while Kueue holds the gang's Job back, with Kueue's reason)."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Status of the condition: True, False or Unknown.")
    observed_generation: int | None = Field(
        None,
        ge=0,
        description="The metadata.generation the condition was set from; older than the job's generation means "
        "out of date.",
    )
    last_transition_time: Timestamp = Field(
        description="When the condition last changed from one status to another (RFC 3339)."
    )
    reason: str = Field(
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        max_length=1024,
        description="Why the condition last changed, as a CamelCase identifier, e.g. DeadlineExceeded.",
    )
    message: str = Field("", max_length=32768, description="Human-readable details of the transition; may be empty.")


class NodeCounts(SpecModel):
    """The current gang generation: its size, and its pods by pod phase."""

    current: int = Field(
        0,
        ge=0,
        description="Nodes of the current gang (its Job's completions): spec.nodes once a resize reached a new "
        "gang. The scale subresource's replicas.",
    )
    active: int = Field(0, ge=0, description="Pods running.")
    pending: int = Field(
        0, ge=0, description="Pods not running yet: being scheduled (or unschedulable), pulling images, starting."
    )
    succeeded: int = Field(0, ge=0, description="Pods that finished successfully.")
    failed: int = Field(0, ge=0, description="Pods that failed.")


def _progress_field(field: wire.ProgressField) -> tuple[Any, Any]:
    """A status.progress field's type and bounds, as `wire` defines them."""
    bounds = {"ge": field.minimum, "le": field.maximum}
    kind: Any = {
        "integer": int,
        "number": float,
        "boolean": bool,
        "timestamp": Timestamp,
        "set-aside names": list[Annotated[str, Field(max_length=wire.MAX_TEXT)]],
        "named numbers": dict[str, float],  # names are checked where read (progress_answer.fits)
    }[field.kind]
    if field.kind in ("set-aside names", "named numbers"):
        bounds["max_length"] = wire.MAX_SET_ASIDE if field.kind == "set-aside names" else wire.MAX_METRICS
    bounds = {name: bound for name, bound in bounds.items() if bound is not None}
    return kind | None, Field(None, description=field.description, **bounds)


Progress = create_model(
    "Progress",
    __base__=SpecModel,
    __doc__="Training progress as rank 0 reports it: copied in by the operator while the job is Running, and "
    "the\nfinal step and loss from rank 0's termination message once it succeeded.",
    **{to_snake(field.name): _progress_field(field) for field in wire.PROGRESS_FIELDS},
)


class GangRecord(SpecModel):
    """One ended gang generation: where it started and how far it got, as rank 0 last reported."""

    generation: int = Field(ge=0, description="The gang generation (its Job is NAME-g<generation>).")
    started_from_step: int | None = Field(
        None, ge=0, description="The checkpoint step it resumed from (0: afresh); absent when it never reported."
    )
    reached_step: int | None = Field(None, ge=0, description="The last step it reported completing.")
    checkpoint_step: int | None = Field(None, ge=0, description="The newest checkpoint step it reported.")
    ended: Literal["Failed", "Disrupted", "SpecChanged", "Succeeded"] = Field(
        description="How it ended: Failed (a restart counted against maxRestarts, or the job's failure), "
        "Disrupted, SpecChanged (restarted for a spec change), or Succeeded."
    )

    @property
    def progressed(self) -> bool:
        """Whether it left a checkpoint newer than the one it started from."""
        started, saved = self.started_from_step, self.checkpoint_step
        return started is not None and saved is not None and saved > started


ResizeReason = Literal["Scaled", "Unschedulable", "CapacityReturned", "CapacityTaken"]


class Resize(SpecModel):
    """One change of the gang's size."""

    time: Timestamp = Field(description="When the gang of the new size was started (RFC 3339).")
    from_nodes: int = Field(ge=1, description="The size of the gang that ended.")
    to_nodes: int = Field(ge=1, description="The size of the gang that started.")
    reason: ResizeReason = Field(
        description="Why: Scaled, spec.nodes changed (kubectl scale, an autoscaler, an edit of the spec); "
        "Unschedulable, the scheduler could not place the whole gang within elastic.scaleDownAfterSeconds; "
        "CapacityReturned, a capacity probe found room for a larger gang (spec.elastic); CapacityTaken, the larger "
        "gang could not be placed (the room was taken meanwhile) and went back to the size it grew from."
    )


class TimeAtSize(SpecModel):
    """The job's Running time with gangs of one size."""

    nodes: int = Field(ge=1, description="The gang's size.")
    running_seconds: float = Field(ge=0, description="Seconds Running at that size, up to goodput.since.")


class Goodput(SpecModel):
    """Where the job's time went, summed at each phase change: training, or waiting for a gang to run."""

    running_seconds: float = Field(
        0, ge=0, description="Seconds the job was Running (its gangs' pods active), up to `since`."
    )
    waiting_seconds: float = Field(
        0,
        ge=0,
        description="Seconds it was Pending or Restarting (queued, unschedulable, pulling images, starting a gang "
        "again), up to `since`; time Suspended is in neither.",
    )
    recomputed_steps: int = Field(
        0,
        ge=0,
        description="Steps trained again after restarts: how far each ended gang got past the checkpoint the "
        "next one resumed from (known once the next one has ended).",
    )
    running_seconds_at_size: list[TimeAtSize] = Field(
        default_factory=list,
        max_length=MAX_SIZES_SHOWN,
        description="runningSeconds by the size of the gang that ran, in the order the sizes were first seen.",
    )
    since: Timestamp | None = Field(None, description="When the job entered its current phase (RFC 3339).")


class ScaleTrainJobStatus(SpecModel):
    """The job's observed state, written by the operator: phase, conditions, gang restarts and progress."""

    phase: Phase | None = Field(
        None,
        description="Where the job is: Pending, Running, Restarting, Suspended, Succeeded or Failed "
        "(the last two are final).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="The latest observations of the job's state (metav1.Condition), one per type.",
    )
    restarts: int = Field(
        0, ge=0, description="Gang restarts after failures (spec-change restarts and disruptions not counted)."
    )
    disruptions: int = Field(
        0,
        ge=0,
        description="Gang restarts after disruptions: a pod evicted, preempted or on a lost node (condition "
        f"DisruptionTarget), the trainer stopped by SIGTERM after a checkpoint (exit {EXIT_PREEMPTED}), or a rule's "
        "RestartGangIgnoreLimit.",
    )
    excluded_nodes: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list,
        max_length=64,
        description="Nodes the next gangs avoid (failurePolicy.excludeNodes), oldest first.",
    )
    current_job: str | None = Field(None, description="The batch/v1 Job of the current gang generation.")
    selector: str | None = Field(
        None, description="The label selector of the job's pods, for the scale subresource (an autoscaler reads it)."
    )
    nodes: NodeCounts = Field(default_factory=NodeCounts)
    start_time: Timestamp | None = Field(
        None, description="When a pod of the job was first seen running (RFC 3339); kept across gang restarts."
    )
    completion_time: Timestamp | None = Field(
        None,
        description="When the job finished, Succeeded or Failed (RFC 3339); ttlSecondsAfterFinished counts from it.",
    )
    observed_generation: int | None = Field(
        None, description="The metadata.generation of the spec the operator last acted on."
    )
    message: str | None = Field(
        None, description='Details of the current phase, e.g. "2 of 2 nodes active" or why the job failed.'
    )
    progress: Progress | None = None
    goodput: Goodput | None = None
    resizes: list[Resize] = Field(
        default_factory=list,
        max_length=MAX_RESIZES,
        description="The last changes of the gang's size, oldest first (at most 16).",
    )
    elastic_sizes: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=list,
        max_length=naming.MAX_NODES,
        description="With spec.elastic: the gang sizes the job may run at, smallest first (those from minNodes to "
        "nodes that keep the global batch exact).",
    )
    quick_restarts: int = Field(
        0,
        ge=0,
        description="Gang restarts and disruptions in a row whose gangs ended within "
        "spec.restartBackoff.resetAfterSeconds of their start; from the second, the next gang waits "
        "(spec.restartBackoff).",
    )
    next_gang_at: Timestamp | None = Field(
        None, description="While the next gang waits out spec.restartBackoff: when it starts (RFC 3339)."
    )
    capacity_probed_at: Timestamp | None = Field(
        None,
        description="With spec.elastic, while the gang runs below nodes: when the last capacity probe started "
        "(RFC 3339); the next starts elastic.scaleUp.checkEverySeconds later (doubled for each growth in a row "
        "that could not be placed; after 4 in a row, no more probes until kubectl scale sets a size).",
    )
    gangs: list[GangRecord] = Field(
        default_factory=list,
        max_length=MAX_GANG_RECORDS,
        description="The last ended gang generations, oldest first (at most 16): maxRestartsWithoutProgress "
        "counts the failed ones at the end that left no newer checkpoint than they started from.",
    )


class ScaleTrainJob(SpecModel):
    api_version: Literal["scaletrain.io/v1alpha1"]
    kind: Literal["ScaleTrainJob"]
    metadata: ObjectMeta
    spec: ScaleTrainJobSpec
    status: ScaleTrainJobStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def current_job(self) -> str | None:
        """The Job of the current gang, as the status says (None before the first)."""
        return self.status.current_job if self.status is not None else None

    def at_size(self, nodes: int) -> ScaleTrainJob:
        """The job as a gang of `nodes` renders and is judged (an elastic gang below or above spec.nodes)."""
        if nodes == self.spec.nodes:
            return self
        return self.model_copy(update={"spec": self.spec.model_copy(update={"nodes": nodes})})

    @property
    def queue(self) -> str | None:
        """The Kueue LocalQueue of its gangs: spec.queueName, else the job's kueue.x-k8s.io/queue-name label."""
        return naming.queue_of(self.spec.queue_name, self.metadata.labels)

    def problems(self) -> Iterator[Problem]:
        """Its labels and annotations, as the API server checks them (the CRD's schema cannot), and a
        topology that nothing would honour."""
        metadata = {"labels": self.metadata.labels, "annotations": self.metadata.annotations}
        yield from kube_rules.metadata_problems(metadata, ("metadata",))
        yield from kube_schema.namespace_problems(self.metadata.namespace, ("metadata", "namespace"))
        yield from self._topology_problems()
        topology = self.spec.placement.topology
        if self.spec.elastic is not None and topology is not None and topology.required is not None:
            message = (
                "an elastic gang cannot keep placement.topology.required: its capacity probe asks for room on any "
                "node, so the gang would grow into room outside the gang's domain and shrink again; remove elastic "
                "or the topology"
            )
            yield Problem(("spec", "elastic"), message)
        if self.spec.elastic is not None and self.queue is not None:
            message = (
                "an elastic gang cannot grow back through a Kueue queue yet (Kueue admits each Job at the size it "
                "asks for, and a probe outside the queue would pass its quota by): remove elastic, or the queue "
                "(queueName and the kueue.x-k8s.io/queue-name label)"
            )
            yield Problem(("spec", "elastic"), message)

    def _topology_problems(self) -> Iterator[Problem]:
        """A topology needs Kueue (a queue) or, for a required one, gang placement (the Workload API)."""
        topology, where = self.spec.placement.topology, ("spec", "placement", "topology")
        if topology is None or self.queue is not None:
            return
        if topology.preferred is not None:
            message = "a preferred topology needs Kueue's Topology Aware Scheduling: set queueName, or use required"
            yield Problem((*where, "preferred"), message)
        if topology.required is not None and self.spec.scheduling.gang == "none":
            message = "a required topology needs queueName (Kueue) or gang placement: set scheduling.gang to auto"
            yield Problem((*where, "required"), message)


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
    if too_deep_or_large := spec_bound_problems(document):  # before anything below walks the spec recursively
        raise ProblemsError(too_deep_or_large)
    try:
        return ScaleTrainJob.model_validate(document)
    except ValidationError as error:
        raise ProblemsError(problems_from_validation_error(error, ScaleTrainJob)) from None
