"""What the controller's pure layer decides and the cluster layer carries out: typed and immutable, so
the handlers can only apply a Decision, never edit one."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

# Why the controller fails a job outside the gang policy (api/gang_policy.GangFailureReason has the rest)
ControllerFailureReason = Literal[
    "InvalidSpec", "ChildRejected", "NameConflict", "ReconcileError", "GangSchedulingUnavailable"
]
EventReason = (
    Literal[
        "Created",
        "Running",
        "Suspended",
        "Restarting",
        "Resized",
        "Succeeded",
        "Failed",
        "LossNotFinite",
        "ApiRetrying",
        "PodCreationFailed",
        "Unschedulable",
        "JobDeleted",
        "Preempted",
        "Hang",
        "CheckpointSetAside",
        "CapacityProbeFailed",
        "WorkloadRecreated",
        "ForeignWorkload",
    ]
    | ControllerFailureReason
)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the ScaleTrainJob. With an `occasion` (what it is about besides its reason, e.g.
    a gang generation and a spec generation) it is posted once: its name is made from the job's uid, the
    reason and the occasion, so posting it again (a decision carried out again after its status patch
    failed, or by a restarted operator) finds it there. Without one, every post is a new Event."""

    type: Literal["Normal", "Warning"]
    reason: EventReason
    message: str
    occasion: str | None = None


@dataclass(frozen=True)
class ChildJobPatch:
    """A merge patch of one child Job: of its spec, what a running gang takes in place (suspend, deadline);
    and annotations that go with it (an elastic resize's, with the suspension that starts it)."""

    job: str
    spec: dict[str, Any]
    annotations: dict[str, str | None] = field(default_factory=dict)  # None: removed (a merge patch)

    def body(self) -> dict[str, Any]:
        return (
            {"metadata": {"annotations": self.annotations}, "spec": self.spec}
            if self.annotations
            else {"spec": self.spec}
        )


@dataclass(frozen=True)
class Decision:
    create: tuple[dict[str, Any], ...] = ()  # rendered children, in creation order
    delete_child_jobs: tuple[str, ...] = ()  # each with its pods
    patch_child_job: ChildJobPatch | None = None
    status: dict[str, Any] | None = None  # a merge patch of .status; None when nothing changed
    events: tuple[Event, ...] = ()
    delete_stj: bool = False  # the ScaleTrainJob itself (its children follow through ownerReferences)
    # Events to post only if the child of that name was in fact made, not found there already (a create that
    # may be a repeat: the decide layer cannot tell whether its object still exists).
    if_made: dict[tuple[str, str], Event] = field(default_factory=dict)  # by the child's kind and name
    # Seconds until a timeout this decision waits on passes (scheduleTimeoutSeconds): decide again then,
    # even if no watch event comes. Not a change to carry out.
    recheck_after: float | None = None

    def said_if_made(self, child: dict[str, Any]) -> Event | None:
        return self.if_made.get((child["kind"], child["metadata"]["name"]))

    @property
    def changes_nothing(self) -> bool:
        return replace(self, recheck_after=None) == Decision()
