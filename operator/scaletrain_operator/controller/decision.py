"""What the controller's pure layer decides from (Observed: a job's children as found) and what it decides
(a Decision, which the cluster layer carries out): typed and immutable, so the handlers can only apply a
Decision, never edit one. A Draft is a Decision in the making."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from ..api import naming
from ..api.conditions import ControllerFailureReason, EventReason, JobPhase
from ..in_place import WorkloadEnd
from ..render.child_annotations import SUSPENDED_BY_OPERATOR_ANNOTATION
from ..report_server import Report
from .status import StatusBuilder


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the ScaleTrainJob. With an `occasion` (what it is about besides its reason, e.g.
    a gang generation and a spec generation) it is posted once: its name is made from the job's uid, the
    reason and the occasion, so posting it again (a decision carried out again after its status patch
    failed, or by a restarted operator) finds it there. Without one, every post is a new Event."""

    type: Literal["Normal", "Warning"]
    reason: EventReason | ControllerFailureReason
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
class InPlaceWord:
    """What the in-place channel (in_place.py) says to the pods of a gang that restarts in place: run `generation`,
    released to its `ranks` pods together no earlier than `not_before` (a restart's backoff); or, `ending`, that
    the gang is not restarted in place (it finished, or is recreated): a pod whose workload ended exits with the
    workload's own code. Said on every pass (level-based), after the pass's writes went through."""

    generation: int
    ranks: int
    not_before: datetime | None
    ending: bool = False


@dataclass(frozen=True)
class Decision:
    create: tuple[dict[str, Any], ...] = ()  # rendered children, in creation order
    # The job's Workload (gang placement), made sure of before the gang's Job: made where it is missing, made anew
    # where the one there asks for another gang (a Workload's spec cannot change). The decide layer does not read
    # Workloads back: their create says which it is (cluster.ensure_workload).
    workload: dict[str, Any] | None = None
    # An elastic gang's capacity probe: one the API server refuses fails nothing (a CapacityProbeFailed Event).
    create_probe: dict[str, Any] | None = None
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
    in_place: InPlaceWord | None = None  # not a change to carry out either

    def said_if_made(self, child: dict[str, Any]) -> Event | None:
        return self.if_made.get((child["kind"], child["metadata"]["name"]))

    @property
    def creates(self) -> bool:
        """Whether it creates anything: a child, the Workload or a probe."""
        return bool(self.create) or self.workload is not None or self.create_probe is not None

    @property
    def changes_nothing(self) -> bool:
        return replace(self, recheck_after=None, in_place=None) == Decision()


@dataclass(frozen=True)
class Observed:
    """The children of one ScaleTrainJob, as listed from the API server."""

    services: dict[str, dict[str, Any]]  # by name: the headless Service and the master alias
    jobs: dict[int, dict[str, Any]]  # by gang generation
    pods: list[dict[str, Any]]  # of the current generation
    probe: dict[str, Any] | None = None  # the elastic gang's capacity probe, while one runs
    probe_pods: list[dict[str, Any]] = field(default_factory=list)
    # The newest report a script of one's own pushed (report_server.py): the last one, sent as the script ends,
    # may come after the last housekeeping pass, and a job that succeeds shows it.
    report: Report | None = None
    # What the agents of the current generation's pods said of workloads that ended (a gang that restarts in place),
    # by rank: the pods run on meanwhile, and an in-place restart leaves the kubelet no record of those exits.
    said: Mapping[int, WorkloadEnd] = field(default_factory=dict)


def current_gang(named: int | None, observed: Observed) -> int | None:
    """The newest gang generation: of the job's Jobs that exist, or the one its status names (`named`,
    naming.named_gang) if they are gone. None while neither names one: before the first gang, or when the
    status names no gang of this job (anyone who may write the status may write anything there)."""
    return max([*observed.jobs, *([] if named is None else [named])], default=None)


@dataclass
class Draft:
    """A decision in the making; `done` freezes it."""

    status: StatusBuilder
    create: list[dict[str, Any]] = field(default_factory=list)
    delete_child_jobs: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    recheck_after: float | None = None
    gang_job: str | None = None  # the gang this decision is about, by its generation's Job name (None: the status's)
    probe: str | None = None  # the capacity probe's Job, if one exists: deleted unless `keep_probe`
    keep_probe: bool = False
    new_probe: dict[str, Any] | None = None  # a capacity probe to make (Decision.create_probe)
    # What a decision that creates anything makes sure of first: the job's NetworkPolicy (with the operator's
    # settings.network_policy_from), and, when it creates a gang's Job, the job's Workload (where its gangs use
    # one). Either may be missing before any gang: its create failed while the Services' went through, the
    # cluster began to serve the Workload API, or someone deleted it.
    network_policy: dict[str, Any] | None = None
    workload: dict[str, Any] | None = None
    respec_workload: bool = False  # a spec change: a Workload made for its gang is no news (no WorkloadRecreated)
    in_place: InPlaceWord | None = None  # where the current gang restarts in place

    def recheck_in(self, seconds: float) -> None:
        """Decide again in `seconds` at the latest: a timeout this decision waits on passes then."""
        self.recheck_after = seconds if self.recheck_after is None else min(self.recheck_after, seconds)

    def done(self, status: dict[str, Any], patch_child_job: ChildJobPatch | None = None) -> Decision:
        before = self.status.before.phase
        phase = status["phase"]
        if phase != before and phase in (JobPhase.RUNNING, JobPhase.SUSPENDED, JobPhase.SUCCEEDED):
            self.events.append(Event("Normal", EventReason(phase), status["message"]))
        when = occasion(self.gang_job or self.status.before.current_job, self.status.spec_generation)
        probe_ends = [self.probe] if self.probe is not None and not self.keep_probe else []
        creates = bool(self.create) or self.new_probe is not None
        first = [self.network_policy] if self.network_policy is not None and creates else []
        gang = next((child for child in self.create if child["kind"] == "Job"), None)
        workload = self.workload if gang is not None else None
        in_place = self.in_place
        if in_place is not None and (gang is not None or phase in (JobPhase.SUCCEEDED, JobPhase.FAILED)):
            in_place = replace(in_place, ending=True)
        return Decision(
            create=(*first, *self.create),
            workload=workload,
            create_probe=self.new_probe,
            if_made=self._workload_news(workload, gang),
            delete_child_jobs=(*self.delete_child_jobs, *probe_ends),
            patch_child_job=patch_child_job,
            status=self.status.changes(status),
            events=tuple(replace(event, occasion=event.occasion or when) for event in self.events),
            recheck_after=self.recheck_after,
            in_place=in_place,
        )

    def _workload_news(self, workload: dict[str, Any] | None, gang: dict[str, Any] | None) -> dict:
        """A Workload made again for a gang after the first says so in a Warning Event, once it was in fact made
        (Decision.if_made): without it, that gang's pods would have been placed one by one."""
        if workload is None or gang is None or self.respec_workload:
            return {}
        if (gang["metadata"].get("labels") or {}).get(naming.LABEL_GENERATION) == "0":
            return {}
        name, gang_name = workload["metadata"]["name"], gang["metadata"]["name"]
        message = (
            f"Workload {name} was missing (deleted by someone else): made again before gang {gang_name}, which it "
            "places as one gang"
        )
        return {
            ("Workload", name): Event(
                "Warning", EventReason.WORKLOAD_RECREATED, message, occasion(gang_name, self.status.spec_generation)
            )
        }


def occasion(current_job: str | None, spec_generation: int | None) -> str:
    """What a decision's Events are about: the gang it was decided about (the newest Job found, which a
    restart or a deletion ends, not the one it starts; not the status's, which a lost write leaves behind)
    and the spec generation (so that a resumed job gets a Running Event again). Each reason is posted once
    per occasion; a decision carried out again after its status patch failed is about the same gang, so
    its Events are the same ones."""
    return f"{current_job}, spec generation {spec_generation}"


def suspension(
    spec_generation: int | None, child_job: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> ChildJobPatch:
    """The operator suspends the gang's Job, and says so on it (SUSPENDED_BY_OPERATOR_ANNOTATION)."""
    noted = {SUSPENDED_BY_OPERATOR_ANNOTATION: str(spec_generation), **(annotations or {})}
    return ChildJobPatch(child_job["metadata"]["name"], {"suspend": True}, noted)
