"""The status of a ScaleTrainJob, as the operator writes it: phase, conditions, gang restarts, progress, goodput
and resizes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, create_model
from pydantic.alias_generators import to_snake

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.exit_codes import EXIT_PREEMPTED
from scaletrain_trainer.contract.validation import SpecModel

from . import naming
from .conditions import MAX_MESSAGE, REASON_PATTERN, ConditionType, GangEnding, JobPhase, ResizeReason, one_of

# An RFC 3339 time: the API server stores and serves it as a string, which strict validation would refuse.
Timestamp = Annotated[datetime, Strict(False)]

MAX_GANG_RECORDS = 16  # status.gangs keeps the last ones
MAX_RESIZES = 16  # and status.resizes
MAX_SIZES_SHOWN = 16  # the sizes goodput has time for (the last ones first seen)


class Condition(SpecModel):
    """metav1.Condition."""

    type: one_of(ConditionType) = Field(
        description="Type of condition: Created (the gang was started), Running, Restarting and Suspended (True while "
        "in that phase), Succeeded or Failed (final), PodCreationFailed (True while the Job controller cannot "
        "create the gang's pods, e.g. refused by Pod Security admission or a ResourceQuota), Schedulable (False while "
        "the scheduler cannot place a pod of the gang, with its message; True again once it could), "
        "ProgressUnreachable (True while the operator cannot read rank 0's progress endpoint, with why; never a "
        "restart by itself), Queued (True while Kueue holds the gang's Job back, with Kueue's reason), "
        "InPlaceRestartsUnavailable (True when spec.restartStrategy is InPlace and the cluster cannot restart "
        "the gang in place, with why: its gangs are recreated)."
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
        pattern=REASON_PATTERN,
        max_length=1024,
        description="Why the condition last changed, as a CamelCase identifier, e.g. DeadlineExceeded.",
    )
    message: str = Field(
        "", max_length=MAX_MESSAGE, description="Human-readable details of the transition; may be empty."
    )


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
    ended: one_of(GangEnding) = Field(
        description="How it ended: Failed (a restart counted against maxRestarts, or the job's failure), "
        "Disrupted, SpecChanged (restarted for a spec change), or Succeeded."
    )

    @property
    def progressed(self) -> bool:
        """Whether it left a checkpoint newer than the one it started from."""
        started, saved = self.started_from_step, self.checkpoint_step
        return started is not None and saved is not None and saved > started


class Resize(SpecModel):
    """One change of the gang's size."""

    time: Timestamp = Field(description="When the gang of the new size was started (RFC 3339).")
    from_nodes: int = Field(ge=1, description="The size of the gang that ended.")
    to_nodes: int = Field(ge=1, description="The size of the gang that started.")
    reason: one_of(ResizeReason) = Field(
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

    phase: one_of(JobPhase) | None = Field(
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
    gang_generation: int | None = Field(
        None,
        ge=0,
        description="The current gang generation. A gang restarted in place keeps its Job (currentJob), whose name "
        "says the generation that made it.",
    )
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
