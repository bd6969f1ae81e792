"""The spec of a ScaleTrainJob (scaletrain.io/v1alpha1): its types, their field constraints and CEL rules.

The CRD in crds/ is generated from these models, the status's (job_status.py) and the job's around them (job.py)
by `scaletrain crd`. Each model's cross-field rules are checks in validation/ (spec_rules.py, pass_through.py) that
its `problems()` calls; the ones cheap enough for the API server are mirrored as CEL `x-kubernetes-validations`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.config import TrainingConfig
from scaletrain_trainer.contract.exit_codes import (
    EXIT_CONFIG_ERROR,
    EXIT_NON_FINITE,
    EXIT_PREEMPTED,
    EXIT_STORAGE_ERROR,
    EXIT_WRITE_ERROR,
)
from scaletrain_trainer.contract.validation import Problem, SpecModel

from ..validation import elastic_sizes, kube_schema, pass_through, spec_rules
from ..validation.kube_rules import DATA_KEY, DNS_1123_LABEL, DNS_1123_SUBDOMAIN, ENV_VAR_NAME
from . import naming
from .cel import cel_rule, with_cel_rules
from .conditions import REASON_PATTERN

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
        yield from spec_rules.toleration_problems(
            key=self.key,
            operator=self.operator,
            value=self.value,
            effect=self.effect,
            toleration_seconds=self.toleration_seconds,
        )


class EnvVar(SpecModel):
    """An environment variable of the trainer container (core/v1 EnvVar)."""

    name: str = Field(
        min_length=1,
        pattern=ENV_VAR_NAME,
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
        yield from spec_rules.env_var_problems(value=self.value, value_from=self.value_from)


class Volume(BaseModel):
    """A pod volume: a name plus one volume source (persistentVolumeClaim, configMap, ...)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    name: str = Field(
        pattern=DNS_1123_LABEL,
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
DEFAULT_GRACE_PERIOD_SECONDS = 120  # a step and a checkpoint save after SIGTERM, for most models

# CEL: samples in one micro-step of the whole gang (microBatchSize × nodes × processes per node).
_SAMPLES_PER_MICRO_STEP = (
    "self.training.microBatchSize * self.nodes * "
    "(has(self.procsPerNode) ? self.procsPerNode : (self.gpusPerNode > 0 ? self.gpusPerNode : 1))"
)


_SAMPLES_PER_SMALLEST_MICRO_STEP = _SAMPLES_PER_MICRO_STEP.replace("self.nodes", "self.elastic.minNodes")


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
        yield from spec_rules.failure_policy_problems([rule.name for rule in self.rules])


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
        yield from spec_rules.restart_backoff_problems(
            initial_seconds=self.initial_seconds, max_seconds=self.max_seconds
        )


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
SecretKey = Annotated[str, Field(pattern=DATA_KEY, max_length=253)]  # a key of a Secret's data


class CredentialsSecret(SpecModel):
    """A Secret of the job's namespace holding the store's access key; each key becomes the variable the AWS SDKs
    read (AWS_ACCESS_KEY_ID, ...) through a secretKeyRef, so that no key is written into the job or its Job."""

    name: str = Field(pattern=DNS_1123_SUBDOMAIN, max_length=253, description="The Secret, in the job's namespace.")
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
        pattern=DNS_1123_LABEL,
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
        yield from spec_rules.topology_problems(required=self.required, preferred=self.preferred)


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
    rank_env_containers: list[Annotated[str, Field(pattern=DNS_1123_LABEL, max_length=63)]] = Field(
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
    restart_strategy: Literal["InPlace", "Recreate"] = Field(
        "InPlace",
        description="How a gang restarts after a failure. InPlace: every pod restarts where it stands (its node, IP, "
        "volumes and devices kept), the ranks start the next generation together; a pod evicted, or of a node "
        "drained or lost, is replaced alone; where the cluster can (else the gang is recreated). Recreate: new pods. "
        "Resizes and spec changes always get new pods.",
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
            spec_rules.TRAINING_REQUIRED,
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
        templated = pass_through.template_grace_period(self.pod_template)
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
        yield from spec_rules.training_problems(
            self.training,
            command=self.command,
            args=self.args,
            hang_after_seconds=self.status_reports.hang_after_seconds,
            world_size=self.world_size,
            gpus_per_node=self.gpus_per_node,
        )
        for problem in self.failure_policy.problems():
            yield Problem(("failurePolicy",) + problem.path, problem.message)
        yield from self._placement_problems()
        yield from elastic_sizes.problems(self)
        resources = {"requests": self.resources.requests, "limits": self.resources.limits}
        yield from spec_rules.gpu_problems(
            backend=self.backend,
            gpus_per_node=self.gpus_per_node,
            procs_per_node=self.procs_per_node,
            gpu_resource=self.gpu_resource,
            resources=resources,
        )
        yield from spec_rules.master_port_problems(
            master_port=self.master_port, metrics_port=self.metrics_port, with_training=self.training is not None
        )
        yield from pass_through.grace_period_problems(self.termination_grace_period_seconds, self.pod_template)
        yield from pass_through.rank_env_container_problems(self.rank_env_containers, self.pod_template)
        yield from pass_through.env_problems(
            [var.name for var in self.env], self.pod_template, self.rank_env_containers, self.resolved_procs_per_node
        )
        yield from pass_through.pod_template_problems(self.pod_template, self.gpu_resource)
        volumes = [volume.model_dump() for volume in self.volumes]
        mounts = [mount.model_dump(by_alias=True) for mount in self.volume_mounts]
        yield from pass_through.volume_problems(volumes, mounts, self.pod_template)
        yield from pass_through.kubernetes_problems(
            resources=resources,
            shm_size=self.shm_size,
            node_selector=self.node_selector,
            queue_name=self.queue_name,
            names={
                "priorityClassName": self.priority_class_name,
                "serviceAccountName": self.service_account_name,
                "schedulerName": self.scheduler_name,
            },
            volume_mounts=mounts,
            volumes=volumes,
            toleration_keys=[toleration.key for toleration in self.tolerations],
            pod_template=self.pod_template,
        )

    def _placement_problems(self) -> Iterator[Problem]:
        if self.placement.topology is not None:
            for problem in self.placement.topology.problems():
                yield Problem(("placement", "topology") + problem.path, problem.message)

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
