"""Names the API, the renderer and the operator agree on: resource names, labels, env, ports."""

from __future__ import annotations

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
MAX_NAME_LENGTH = 63 - len(f"-g{MAX_RESTARTS}") - len(f"-{MAX_NODES - 1}")
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"  # Service names
DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # volume names
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # claim names

TRAINER_CONTAINER = "trainer"
SHM_VOLUME = "scaletrain-shm"
RENDEZVOUS_PORT = 29500
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_GENERATION = f"{GROUP}/generation"
APP_NAME = "scaletrain"
MANAGER = "scaletrain-operator"

# Env the renderer sets from the job's shape: a user value would break the rank layout.
RANK_ENV = frozenset(
    {
        "PET_NNODES",
        "PET_NPROC_PER_NODE",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NNODES",
        "NODE_RANK",
        "NPROC_PER_NODE",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "JOB_COMPLETION_INDEX",
        "SCALETRAIN_CONFIG",
        "SCALETRAIN_BACKEND",
        "SCALETRAIN_JOB_NAME",
        "SCALETRAIN_GENERATION",
    }
)


def service_name(job_name: str) -> str:
    """The headless Service: one per ScaleTrainJob, stable across gang restarts."""
    return job_name


def generation_of(child_job: str) -> int:
    """The gang generation in a child Job's name (the inverse of child_job_name)."""
    return int(child_job.rsplit("-g", 1)[1])


def child_job_name(job_name: str, generation: int) -> str:
    """The batch/v1 Job of one gang generation. A new name per generation means a restarted gang
    never resolves the master address to a still-terminating pod of the previous generation."""
    return f"{job_name}-g{generation}"
