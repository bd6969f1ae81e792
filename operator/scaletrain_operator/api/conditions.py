"""The status vocabulary, defined once: the words a ScaleTrainJob's status and Events are made of (its phases,
condition types and reasons, how a gang ended, why it resized, the Event reasons), and the Kubernetes words the
operator reads pods and Jobs by (a pod's phase and conditions, the scheduler's, the Job controller's and the
container runtime's reasons). The same word may be several things ("Failed" is a pod phase, a job phase, a
condition type, a gang's ending and a Job condition): each is named for what it is.

The closed sets are Words: str Enums, as enum.StrEnum is from Python 3.11. A member is its word: it equals and
hashes as the plain string, and f-strings, json.dumps, pydantic and the API client write it as the string, so
the status reads the same as with plain strings, and a pod read as a dict compares with PodPhase as it is.
PyYAML's safe dumper refuses them: what is rendered into a child object (a condition type in a
podFailurePolicy) stays a plain string. Reasons that belong to open sets (a failurePolicy rule's name and a
trainer result share the Failed and Restarting reasons) are plain strings too.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from scaletrain_trainer.contract.exit_codes import HANG_RESULT


class Word(str, Enum):
    """A status word: equal to, hashed, printed and formatted as its string."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


def one_of(words: type[Word]) -> Any:
    """The Literal type of a status field that holds one of `words`, as the plain strings the API server sends."""
    return Literal[tuple(word.value for word in words)]


# A condition's reason (metav1.Condition); a failurePolicy rule's name becomes the reason of the condition it causes.
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
MAX_MESSAGE = 32768  # metav1.Condition's message; the status message keeps to it too


class JobPhase(Word):
    """A ScaleTrainJob's status.phase."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class ConditionType(Word):
    """The types of a ScaleTrainJob's status.conditions (api/job_status.py's Condition says what each means)."""

    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    POD_CREATION_FAILED = "PodCreationFailed"
    SCHEDULABLE = "Schedulable"
    PROGRESS_UNREACHABLE = "ProgressUnreachable"
    QUEUED = "Queued"
    IN_PLACE_RESTARTS_UNAVAILABLE = "InPlaceRestartsUnavailable"


class GangEnding(Word):
    """How one gang generation ended (status.gangs[].ended)."""

    FAILED = "Failed"  # a restart counted against maxRestarts, or the job's failure
    DISRUPTED = "Disrupted"
    SPEC_CHANGED = "SpecChanged"  # restarted for a spec change, a resize or a resume
    SUCCEEDED = "Succeeded"


class ResizeReason(Word):
    """Why an elastic gang changed its size (status.resizes[].reason)."""

    SCALED = "Scaled"
    UNSCHEDULABLE = "Unschedulable"
    CAPACITY_RETURNED = "CapacityReturned"
    CAPACITY_TAKEN = "CapacityTaken"


class ControllerFailureReason(Word):
    """Why the controller fails a job outside the gang policy: the Failed condition's reason, and its Event's."""

    INVALID_SPEC = "InvalidSpec"
    CHILD_REJECTED = "ChildRejected"
    NAME_CONFLICT = "NameConflict"
    RECONCILE_ERROR = "ReconcileError"
    GANG_SCHEDULING_UNAVAILABLE = "GangSchedulingUnavailable"


class EventReason(Word):
    """The reasons of the Events the operator posts on a ScaleTrainJob, but for ControllerFailureReason's. A phase's
    Event is named for the phase; a gang that ended with no pod to blame, for what the gang policy hears of it."""

    CREATED = "Created"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    RESTARTING = "Restarting"
    RESIZED = "Resized"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    LOSS_NOT_FINITE = "LossNotFinite"
    API_RETRYING = "ApiRetrying"
    POD_CREATION_FAILED = "PodCreationFailed"
    UNSCHEDULABLE = "Unschedulable"
    JOB_DELETED = "JobDeleted"  # the current gang's Job, deleted by someone else
    PREEMPTED = "Preempted"  # a running gang whose Job Kueue suspended
    HANG = HANG_RESULT  # a Running gang whose progress stalled: the gang policy takes it as a rank that stopped
    CHECKPOINT_SET_ASIDE = "CheckpointSetAside"
    CAPACITY_PROBE_FAILED = "CapacityProbeFailed"
    WORKLOAD_RECREATED = "WorkloadRecreated"
    FOREIGN_WORKLOAD = "ForeignWorkload"  # a gang the Job controller placed through another Workload than the job's
    STATUS_WRITE_REFUSED = "StatusWriteRefused"
    METRICS_LEFT_OUT = "MetricsLeftOut"
    IN_PLACE_RESTARTS_UNAVAILABLE = "InPlaceRestartsUnavailable"


# The gang policy's reasons: the Failed condition's, or a restart's (the Restarting condition's). Besides them: a
# final trainer result (exit_codes.FINAL) or HANG_RESULT, and a failurePolicy rule's name.
RESTART_LIMIT_REACHED = "RestartLimitReached"
DISRUPTION_LIMIT_REACHED = "DisruptionLimitReached"
NO_PROGRESS = "NoProgress"
NON_FINITE_LOSS = "NonFiniteLoss"  # exit 79 (the trainer's NonFinite), or a rank 0 that finished diverged
DISRUPTION = "Disruption"  # a restart for a disruption: DisruptionTarget, or exit 80 (Preempted)

# The other reasons of the operator's conditions.
STOPPING = "StoppingAtStep"  # Restarting, while a gang saves its checkpoint for a spec change
SCHEDULED = "Scheduled"  # Schedulable True: every pod of the gang was placed
PODS_CREATED = "PodsCreated"  # PodCreationFailed False
ADMITTED = "Admitted"  # Queued False
WAITING_FOR_ADMISSION = "WaitingForAdmission"  # Queued True
READ = "Read"  # ProgressUnreachable False
READ_FAILED = "ReadFailed"  # ProgressUnreachable True
NO_RESTART_RULE = "RestartRuleNotTaken"  # InPlaceRestartsUnavailable True: the API server refused or dropped it


class PodPhase(Word):
    """A pod's status.phase, as the kubelet reports it."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


# A pod's condition types: the scheduler's, the one of an eviction, a preemption or a lost node, and the kubelet's.
POD_SCHEDULED = "PodScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
POD_READY_TO_START_CONTAINERS = "PodReadyToStartContainers"
INITIALIZED = "Initialized"
CONTAINERS_READY = "ContainersReady"
READY = "Ready"
# A DisruptionTarget reason that says nothing of the node: the scheduler preempted the pod for another.
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
# The scheduler's PodScheduled reasons for a pod it tried and could not place. UNSCHEDULABLE is also the job's
# word for it when that lasts: the Schedulable condition's False reason, and the Failed one's after
# scheduleTimeoutSeconds.
UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"

# A container's state reasons, as the kubelet and the container runtime report them.
CONTAINER_COMPLETED = "Completed"  # terminated with exit code 0
CONTAINER_ERROR = "Error"  # terminated with another
START_ERROR = "StartError"  # its command could not be executed
POD_INITIALIZING = "PodInitializing"  # waiting, not started yet

# A container's restartPolicyRules action that restarts every container of its pod where it stands (KEP-5532); the
# pod condition that says so (True while the kubelet removes them, then False), and the reason of each removed
# container's lastState.
RESTART_ALL_CONTAINERS = "RestartAllContainers"
ALL_CONTAINERS_RESTARTING = "AllContainersRestarting"
RESTARTING_ALL_CONTAINERS = "RestartingAllContainers"

# A batch/v1 Job's condition types, and the Job controller's reasons the operator reads.
JOB_COMPLETE = "Complete"
JOB_FAILED = "Failed"
DEADLINE_EXCEEDED = "DeadlineExceeded"  # activeDeadlineSeconds passed; the job's Failed reason then too
DISRUPTED_JOB = "PodFailurePolicy"  # the rendered podFailurePolicy failed the Job (render/children.py)
FAILED_CREATE = "FailedCreate"  # its Event when the API server refused a pod; the PodCreationFailed True reason

QUOTA_RESERVED = "QuotaReserved"  # a Kueue Workload's condition type: False with why it waits
