"""What the controller's pure layer decides and the cluster layer carries out: typed and immutable, so
the handlers can only apply a Decision, never edit one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

FailureReason = Literal["InvalidSpec", "ChildRejected", "NameConflict"]  # final failures decided outside the gang
EventReason = (
    Literal[
        "Created",
        "Running",
        "Suspended",
        "Restarting",
        "Succeeded",
        "Failed",
        "LossNotFinite",
        "ApiRetrying",
        "PodCreationFailed",
    ]
    | FailureReason
)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the ScaleTrainJob."""

    type: Literal["Normal", "Warning"]
    reason: EventReason
    message: str


@dataclass(frozen=True)
class ChildJobPatch:
    """A merge patch of one child Job's spec: what a running gang takes in place (suspend, deadline)."""

    job: str
    spec: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    create: tuple[dict[str, Any], ...] = ()  # rendered children, in creation order
    delete_child_jobs: tuple[str, ...] = ()  # each with its pods
    patch_child_job: ChildJobPatch | None = None
    status: dict[str, Any] | None = None  # a merge patch of .status; None when nothing changed
    events: tuple[Event, ...] = ()
    delete_stj: bool = False  # the ScaleTrainJob itself (its children follow through ownerReferences)
