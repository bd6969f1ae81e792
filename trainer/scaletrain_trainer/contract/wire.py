"""What passes between the operator and a trainer pod, defined once: the environment the operator sets,
the termination message, and rank 0's progress report.

Everything that carries a progress field is derived from `PROGRESS_FIELDS`: the trainer's /progress and
/metrics answers (reporting/metrics.py), the operator's reader (progress.py), its `Progress` model
and so the CRD's status.progress schema, and kubectl's columns. A new field is one `ProgressField` here
and the trainer code that produces its value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# The environment of the trainer container: set by the operator's renderer, read by the trainer.
CONFIG_ENV = "SCALETRAIN_CONFIG"  # the training config, as JSON
BACKEND_ENV = "SCALETRAIN_BACKEND"  # the torch.distributed backend: nccl or gloo
JOB_NAME_ENV = "SCALETRAIN_JOB_NAME"
GENERATION_ENV = "SCALETRAIN_GENERATION"  # the gang generation the pod belongs to
METRICS_PORT_ENV = "SCALETRAIN_METRICS_PORT"  # where rank 0 serves /progress: a script of one's own reads it
TERMINATION_LOG_ENV = "SCALETRAIN_TERMINATION_LOG"  # where the trainer writes its termination message
# torchelastic's @record writes an uncaught exception, with its traceback, to the file this names; torchrun,
# itself decorated so, copies its first failed worker's file into its own (launch.py reads it from there).
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
# A pod's own: never the termination message. The kubelet mounts that file, and torchrun removes its error
# file before it copies a worker's into it (ErrorHandler._rm): EACCES in /dev, EBUSY on a mount point, and
# a traceback of torchrun's own at the end of the log instead of the worker's. A file that does not exist
# yet, where the container may write, is written in place; torchrun's failure table, which ends with its
# first failed worker's traceback, is then the end of the log, which the kubelet makes the message.
ERROR_FILE_PATH = "/tmp/torchelastic-error.json"

# Object storage (spec.objectStorage): the AWS SDKs' own variables, so that the trainer (s3fs, on botocore), boto3
# in a script of one's own and the AWS CLI all read the same. Without a credentials Secret none of the key
# variables is set, and botocore uses the pod's own identity (IRSA: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE,
# which EKS's pod identity webhook sets).
S3_ENDPOINT_ENV = "AWS_ENDPOINT_URL"  # an S3-compatible store's URL; unset: AWS's own endpoints
S3_REGION_ENV = "AWS_REGION"
S3_ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
S3_SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
S3_SESSION_TOKEN_ENV = "AWS_SESSION_TOKEN"
# Where a model on object storage (the hf model's options) is copied to on each machine; default /tmp: mount a
# volume there (an emptyDir, a node's disk) for a large model.
MODEL_CACHE_ENV = "SCALETRAIN_MODEL_CACHE"

# The trainer image's user and group (the Dockerfile's TRAINER_UID). Pods get it as their fsGroup unless
# the job says otherwise, so that a volume the kubelet mounts root-owned (a new disk: mode 0755) is theirs.
TRAINER_GID = 10001

# The termination message: the trainer's summary, which Kubernetes copies into the pod's status.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"  # Kubernetes' default terminationMessagePath
TERMINATION_MESSAGE_LIMIT = 4096  # bytes: the kubelet keeps at most this much of one container's message


def termination_message_path() -> Path:
    """Where this process writes its termination message: TERMINATION_LOG_ENV's path, else Kubernetes' default."""
    return Path(os.environ.get(TERMINATION_LOG_ENV, TERMINATION_MESSAGE_PATH))


# The operator's status-report endpoint, as the Kubeflow Trainer status protocol names it for a pod: its URL, and
# the files of a token that names the pod and of the CA that signed the endpoint's certificate.
REPORT_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
REPORT_CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
REPORT_TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"

# In-place gang restarts: each pod's agent (agent.py) says what its workload is doing, over the operator's
# status-report endpoint with the pod's projected token, and the answer is the operator's word on the gang
# (operator/scaletrain_operator/in_place.py), held open until there is one: a long poll. A call is a JSON object:
# {"state": READY, "generation": G}: the workload may start, once the operator releases a generation after G (the
# last one this pod ran; -1 before any); {"state": RUNNING, "generation": G}: it runs generation G; {"state": ENDED,
# "generation": G, "exitCode": C, "message": M}: it ended so, M being its termination message. The answer is
# {"verdict": V, "generation": G}: RUN generation G (a READY call), RESTART at generation G (the pod exits with
# exit_codes.EXIT_RESTART_IN_PLACE, which its container's restart rule matches), END (exit with the workload's own
# code), or WAIT (no word within HOLD_SECONDS: call again).
IN_PLACE_PATH = "/v1/in-place"
IN_PLACE_URL_ENV = "SCALETRAIN_IN_PLACE_URL"  # set where the gang restarts in place: the endpoint's IN_PLACE_PATH
# A file on a volume that outlives the pod's containers (an emptyDir): the generation the agent last ran. Found at
# start, it says the pod was restarted in place, and so must wait at the barrier for a newer generation.
IN_PLACE_STATE_ENV = "SCALETRAIN_IN_PLACE_STATE"
AGENT_BUNDLE = "agent.pyz"  # the agent as one file (agent_bundle.py), for a script of one's own's pods
READY, RUNNING, ENDED = "ready", "running", "ended"
RUN, RESTART, END, WAIT = "run", "restart", "end", "wait"
HOLD_SECONDS = 20.0  # the longest the endpoint holds a call; an agent waits a little longer for the answer

# Bounds of the progress report that are not a field's own number range.
MAX_TEXT = 64  # a timestamp; a checkpoint directory's name
MAX_SET_ASIDE = 16  # checkpointsSetAside: damaged checkpoints named (a resume sets aside a few at most)
MAX_METRICS = 16  # metrics: the numbers a script reports by name (HF's Trainer logs about ten)
METRIC_NAME = r"^[A-Za-z0-9_./:-]{1,64}$"
SET_ASIDE_NAME = r"^step-\d+\.corrupt(-\d+)?$"
# kubectl cannot round a column, so the status keeps numbers shown there with this many significant digits.
SHOWN_DIGITS = 4

Kind = Literal["integer", "number", "boolean", "timestamp", "set-aside names", "named numbers"]
# Who writes a field: rank 0's step record, rank 0 at other moments (a checkpoint, an evaluation, the
# promise of its next report), or the operator when it reads the report.
Source = Literal["step record", "trainer", "operator"]


@dataclass(frozen=True)
class Column:
    """A kubectl printer column for the field (`-o wide` only when wide)."""

    header: str
    wide: bool = False


@dataclass(frozen=True)
class Gauge:
    """A Prometheus gauge on rank 0's /metrics."""

    name: str
    help: str


@dataclass(frozen=True)
class ProgressField:
    """One field of rank 0's progress report and of status.progress."""

    name: str  # camelCase, as /progress and the status spell it
    kind: Kind
    source: Source
    description: str  # the CRD's
    minimum: float | None = None
    maximum: float | None = None
    rounded: bool = False  # to SHOWN_DIGITS significant digits in the status (metrics.jsonl keeps it whole)
    column: Column | None = None
    gauge: Gauge | None = None


PROGRESS_FIELDS = (
    ProgressField(
        "step", "integer", "step record", "Optimizer steps completed.", minimum=0,
        column=Column("Step"), gauge=Gauge("scaletrain_step", "Optimizer steps completed."),
    ),
    ProgressField(
        "maxSteps", "integer", "trainer", "Optimizer steps the job trains for (training.maxSteps).", minimum=1,
        gauge=Gauge("scaletrain_max_steps", "Optimizer steps the job trains for."),
    ),
    ProgressField(
        "loss", "number", "step record",
        "Training loss of the last logged step, rounded to 4 significant digits (metrics.jsonl has it whole); "
        "absent when not finite.",
        rounded=True, column=Column("Loss"),
        gauge=Gauge("scaletrain_loss", "Training loss of the last logged step."),
    ),
    ProgressField(
        "evalLoss", "number", "trainer",
        "Loss on the held-out samples at the last evaluation (training.eval), rounded to 4 significant digits "
        "(metrics.jsonl has it in full).",
        rounded=True, column=Column("Eval-Loss", wide=True),
        gauge=Gauge("scaletrain_eval_loss", "Loss on the held-out samples at the last evaluation."),
    ),
    ProgressField(  # the reader's, from the loss rank 0 reports (null, with lossFinite false, when not finite)
        "lossFinite", "boolean", "operator",
        "False when the last logged loss was NaN or infinite: the run diverged. Absent otherwise.",
    ),
    ProgressField(
        "samplesPerSecond", "number", "step record",
        "Training throughput over the last logging interval, in samples per second.", minimum=0,
        gauge=Gauge("scaletrain_samples_per_second", "Training throughput in samples per second."),
    ),
    ProgressField(
        "tokensPerSecond", "number", "step record",
        "Training throughput over the last logging interval, in tokens per second, rounded to 4 significant "
        "digits; absent for a model that does not train on tokens.",
        minimum=0, rounded=True, column=Column("Tokens/s", wide=True),
        gauge=Gauge("scaletrain_tokens_per_second", "Training throughput in tokens per second."),
    ),
    ProgressField(
        "tflopsPerDevice", "number", "step record",
        "Model TFLOP/s per device over the last logging interval: the model's FLOPs per token (6N plus "
        "attention for the built-in gpt) × tokensPerSecond ÷ world size, rounded to 4 significant digits.",
        minimum=0, rounded=True, column=Column("TFLOPS/Device", wide=True),
        gauge=Gauge("scaletrain_tflops_per_device", "Model TFLOP/s per device (6N plus attention per token)."),
    ),
    ProgressField(
        "mfu", "number", "step record",
        "Model FLOPs utilization: tflopsPerDevice as a fraction of the GPU's dense 16-bit (bf16) peak, rounded "
        "to 4 significant digits; absent on CPUs and GPUs the trainer has no peak for.",
        # a share of the peak: more says the FLOPs estimate or the peak is wrong
        minimum=0, maximum=1, rounded=True, column=Column("MFU", wide=True),
        gauge=Gauge("scaletrain_mfu", "Model FLOPs utilization: a fraction of the device's dense 16-bit peak."),
    ),
    ProgressField(
        "peakMemoryBytes", "integer", "step record",
        "The largest GPU memory allocated by the trainer (torch.cuda.max_memory_allocated) on any rank since the "
        "last log line: what sizes the micro-batch. Absent on CPUs.",
        minimum=0, gauge=Gauge("scaletrain_peak_memory_bytes", "The largest GPU memory allocated on any rank since "
                                                                "the last log line."),
    ),
    ProgressField(
        "etaSeconds", "number", "trainer",
        "Estimated seconds until maxSteps, at the average step time since the trainer (re)started; removed "
        "once the job succeeded.",
        minimum=0, column=Column("ETA-Seconds", wide=True),
        gauge=Gauge("scaletrain_eta_seconds", "Estimated seconds until maxSteps."),
    ),
    ProgressField(
        "progressPercentage", "number", "trainer",
        "How far the job's own script says it is, in percent (the Kubeflow Trainer status protocol's "
        "progressPercentage); the built-in trainer reports step and maxSteps instead.",
        minimum=0, maximum=100, column=Column("Progress-%", wide=True),
    ),
    ProgressField(
        "metrics", "named numbers", "trainer",
        f"Other numbers the job's own script reports by name (the status protocol's metrics, e.g. "
        f"learning_rate), rounded to {SHOWN_DIGITS} significant digits; at most {MAX_METRICS}, the first by name.",
        rounded=True,
    ),
    ProgressField("updatedAt", "timestamp", "trainer", "When rank 0 last logged progress (RFC 3339)."),
    ProgressField(
        "checkpointsSetAside", "set-aside names", "trainer",
        "Damaged checkpoints rank 0 moved aside (step-N.corrupt in checkpoint.dir) while resuming, trying the "
        "one before each; a Warning Event CheckpointSetAside names them.",
    ),
    ProgressField(
        "resumedFromStep", "integer", "trainer",
        "The step of the checkpoint the gang resumed from; 0: it started afresh.", minimum=0,
    ),
    ProgressField(
        "checkpointStep", "integer", "trainer",
        "The step of the newest checkpoint the gang saved or resumed from; 0: none.", minimum=0,
        gauge=Gauge("scaletrain_checkpoint_step", "The step of the newest checkpoint saved or resumed from."),
    ),
    ProgressField(
        "generation", "integer", "operator", "The gang generation rank 0 reported this from.", minimum=0
    ),
    ProgressField(
        "readAt", "timestamp", "operator",
        "When the operator read this from rank 0 (RFC 3339). A gang is taken for hung only when a read after "
        "staleAfter still holds that promise.",
    ),
    ProgressField(
        "reportedAt", "timestamp", "operator",
        "When the job's own script last reported (RFC 3339): set only for progress the script pushed to the "
        "operator (the Kubeflow Trainer status protocol) rather than served on /progress.",
    ),
    ProgressField(
        "staleAfter", "timestamp", "trainer",
        "When rank 0 promised its next progress report by: its hang timeout plus a logging interval after the "
        "last one (longer during a checkpoint save). A Running gang whose rank 0, read after then, still "
        "answers this promise is taken for hung and restarted (Event Hang).",
    ),
)  # fmt: skip
# The fields rank 0 reports (the rest the operator adds when it reads them), and those of each step record.
REPORTED = tuple(field for field in PROGRESS_FIELDS if field.source != "operator")
FROM_STEP_RECORD = tuple(field.name for field in PROGRESS_FIELDS if field.source == "step record")
