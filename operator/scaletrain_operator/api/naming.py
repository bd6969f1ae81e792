"""Names the API, the renderer and the operator agree on: resource names, labels, env, ports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scaletrain_trainer.contract import wire

GROUP = "scaletrain.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ScaleTrainJob"
PLURAL = "scaletrainjobs"
SINGULAR = "scaletrainjob"
SHORT_NAMES = ("stj",)

# Size limits that keep every generated name a valid DNS label. A pod's hostname is
# "<job>-g<generation>-<index>" and must fit in 63 characters.
MAX_NODES = 4096
MAX_RESTARTS = 100
# Disruptions (evictions, preemptions) are not the job's fault, but a job that is disrupted for ever makes a new Job
# each time: the default bounds that, and the limit keeps the generation's digits within a few more.
DEFAULT_MAX_DISRUPTIONS = 30
MAX_DISRUPTIONS = 1000
MAX_NAME_LENGTH = 63 - len(f"-g{MAX_RESTARTS}") - len(f"-{MAX_NODES - 1}")

TRAINER_CONTAINER = "trainer"
SHM_VOLUME = "scaletrain-shm"
DEFAULT_MASTER_PORT = 29500  # torchrun's; PyTorchJob's is 23456
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_LABEL = COMPLETION_INDEX_ANNOTATION  # the Job controller sets both (PodIndexLabel, GA in 1.32)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"  # pod template annotations (Kueue's TAS)
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_GENERATION = f"{GROUP}/generation"
APP_NAME = "scaletrain"
MANAGER = "scaletrain-operator"

# Env the renderer sets, each with where its value comes from (what a user would change instead): a
# user value would break the rank layout. RANK and LOCAL_RANK are set only with one process per node,
# as PyTorchJob sets them for `python train.py` in each pod; with more, torchrun sets each worker's.
RENDERED_ENV = {
    "PET_NNODES": "nodes",
    "PET_NPROC_PER_NODE": "procsPerNode",
    "PET_NODE_RANK": "the pod's completion index",
    "PET_MASTER_ADDR": "the gang's rank-0 pod",
    "PET_MASTER_PORT": "masterPort",
    "PET_RDZV_ENDPOINT": "the gang's rank-0 pod and masterPort",
    "MASTER_ADDR": "the gang's rank-0 pod",
    "MASTER_PORT": "masterPort",
    "NNODES": "nodes",
    "NODE_RANK": "the pod's completion index",
    "NPROC_PER_NODE": "procsPerNode",
    "WORLD_SIZE": "nodes × procsPerNode",
    "JOB_COMPLETION_INDEX": "the Job controller",
    wire.CONFIG_ENV: "training",
    wire.METRICS_PORT_ENV: "training.metricsPort",
    wire.BACKEND_ENV: "backend",
    wire.JOB_NAME_ENV: "the job's name",
    wire.GENERATION_ENV: "the gang generation",
}
SINGLE_PROCESS_RANK_ENV = {"RANK": "the node rank, with procsPerNode 1", "LOCAL_RANK": "0, with procsPerNode 1"}


def env_set_by_scaletrain(procs_per_node: int) -> dict[str, str]:
    """The env ScaleTrain sets in the trainer container, by name, each with where its value comes from."""
    return RENDERED_ENV | (SINGLE_PROCESS_RANK_ENV if procs_per_node == 1 else {})


def service_name(job_name: str) -> str:
    """The headless Service: one per ScaleTrainJob, stable across gang restarts."""
    return job_name


def master_alias(job_name: str) -> str:
    """The Service whose DNS name is the current gang's rank-0 pod, whatever its generation: for a
    rendezvous endpoint written into a script or its args (`NAME-master:29500`)."""
    return f"{job_name}-master"


def queue_of(queue_name: Any, labels: Mapping[str, Any] | None) -> str | None:
    """The Kueue LocalQueue of a job's gangs: spec.queueName, else the job's KUEUE_QUEUE_LABEL; None: not
    queued. (Read from a stored object too, whose spec may not even parse.)"""
    queue = queue_name or (labels or {}).get(KUEUE_QUEUE_LABEL)
    return queue if isinstance(queue, str) and queue else None


def whole_number(text: str | None) -> int | None:
    """`text` as a non-negative integer when it is written in ASCII digits alone, else None. Annotations
    and labels are anyone's to write, and str.isdigit() also takes digits such as "²", which int() refuses."""
    return int(text) if text and text.isascii() and text.isdigit() else None


def generation_of(job_name: str, child_job: Any) -> int | None:
    """The gang generation of job `job_name` that a child Job's name says (the inverse of child_job_name);
    None when it names no gang of that job. status.currentJob is anyone's to write who may write the status."""
    prefix = f"{job_name}-g"
    if not isinstance(child_job, str) or not child_job.startswith(prefix):
        return None
    return whole_number(child_job[len(prefix) :])


def named_gang(job_name: str, status: Mapping[str, Any]) -> int | None:
    """The gang generation a stored status names: its gangGeneration, else the one its currentJob's name says (a
    status written before gangGeneration was). A gang restarted in place keeps its Job, so the name alone can lag.
    None when neither names a gang of the job: anyone who may write the status may write anything there."""
    generation = status.get("gangGeneration")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation >= 0:
        return generation
    return generation_of(job_name, status.get("currentJob"))


def child_job_name(job_name: str, gang_generation: int) -> str:
    """The batch/v1 Job of one gang generation. A new name per generation means a restarted gang
    never resolves the master address to a still-terminating pod of the previous generation."""
    return f"{job_name}-g{gang_generation}"


# Where on the operator's HTTPS endpoint a script of one's own posts its progress (report_server.py); pods are given
# the whole URL (render/status_reports.py).
STATUS_REPORTS_PATH = "/v1/trainer-status"
# On the operator's own pod while it is the active replica: the status-report Service selects it, so that reports
# reach only the replica that can take them (controller/housekeeping.py).
ACTIVE_REPLICA_LABEL = f"{GROUP}/active-replica"
