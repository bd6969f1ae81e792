"""The next status of a ScaleTrainJob, as a merge patch: phase, metav1 conditions and the fields that go
with them. Conditions keep their transition time unless their status flips."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..api.conditions import MAX_MESSAGE, ConditionType, JobPhase
from ..api.job import ScaleTrainJob
from ..api.job_status import MAX_SIZES_SHOWN, Condition, Goodput, ScaleTrainJobStatus
from ..api.timestamps import timestamp

FINISHED = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED})
# Each has a condition of its name, True exactly while the job is in that phase.
EXCLUSIVE_PHASES = (JobPhase.RUNNING, JobPhase.RESTARTING, JobPhase.SUSPENDED)
# Which sum of status.goodput the time in a phase goes to (Suspended: neither; the user chose it).
GOODPUT_SUM_OF: dict[str | None, str] = {
    JobPhase.RUNNING: "runningSeconds",
    JobPhase.PENDING: "waitingSeconds",
    JobPhase.RESTARTING: "waitingSeconds",
}


def bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    """`message` within `limit` characters: its start, which says what failed, and most of the room for its
    end, where a traceback names the exception; the middle is cut with a note of how much was left out."""
    if len(message) <= limit:
        return message
    room = limit - len(f" ... ({len(message)} characters left out) ... ")  # the note, its count at its longest
    head = room // 4
    tail = room - head
    return f"{message[:head]} ... ({len(message) - room} characters left out) ... {message[len(message) - tail :]}"


def condition(
    kind: ConditionType, status: bool, reason: str, message: str, now: datetime, spec_generation: int | None
) -> dict:
    return Condition(
        type=kind,
        status="True" if status else "False",
        reason=reason,
        message=bounded(message),
        last_transition_time=now,
        observed_generation=spec_generation,
    ).model_dump(mode="json", by_alias=True, exclude_none=True)


def with_condition(conditions: list[dict[str, Any]], update: dict[str, Any]) -> list[dict[str, Any]]:
    """`conditions` with `update` in place of the one of its type (metav1 conditions: one per type)."""
    return [*(held for held in conditions if held["type"] != update["type"]), update]


def phase_of(stj: dict[str, Any]) -> str | None:
    """The phase a ScaleTrainJob object's status holds (None before the operator wrote one)."""
    return (stj.get("status") or {}).get("phase")


class StatusBuilder:
    def __init__(self, job: ScaleTrainJob, now: datetime):
        self.before = job.status or ScaleTrainJobStatus()
        self.now, self.spec_generation = now, job.metadata.generation
        self.conditions = {
            c.type: c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in self.before.conditions
        }
        self.fields: dict[str, Any] = {"restarts": self.before.restarts}
        self.recomputed_steps = self.before.goodput.recomputed_steps if self.before.goodput else 0

    @property
    def finished(self) -> bool:
        return self.before.phase in FINISHED

    def set(
        self, kind: ConditionType, status: bool, reason: str, message: str = "", *, shown_when_false: bool = False
    ) -> None:
        """A condition that is not there reads as False, so a False one is added only `shown_when_false`: for
        a condition whose False is the news (Schedulable)."""
        old = self.conditions.get(kind)
        if old and (old["status"] == "True") == status:
            self.conditions[kind] = old | {"reason": reason, "message": bounded(message)}
        elif old or status or shown_when_false:
            self.conditions[kind] = condition(kind, status, reason, message, self.now, self.spec_generation)

    def phase(self, phase: JobPhase, message: str = "", reason: str | None = None) -> dict[str, Any]:
        """The whole status patch for `phase`; `reason` is its condition's (default: the phase's name)."""
        for kind in EXCLUSIVE_PHASES:
            if phase == kind:
                self.set(ConditionType(kind), True, reason or phase, message)
            elif kind in self.conditions:
                self.set(ConditionType(kind), False, phase)
        if phase in FINISHED:
            self.fields["completionTime"] = timestamp(self.now)
            self.set(ConditionType(phase), True, reason or phase, message)
        before_recomputed = self.before.goodput.recomputed_steps if self.before.goodput else 0
        if phase != self.before.phase or self.recomputed_steps != before_recomputed:
            self.fields["goodput"] = self._goodput_now()
        promised = self.before.progress is not None and self.before.progress.stale_after is not None
        # The gang that promised is gone or stopped: the next one promises anew.
        if phase != JobPhase.RUNNING and promised:
            self.fields["progress"] = self.fields.get("progress", {}) | {"staleAfter": None}
        return {
            **self.fields,
            "phase": phase,
            "message": bounded(message),
            "conditions": list(self.conditions.values()),
            "observedGeneration": self.spec_generation,
        }

    def _goodput_now(self) -> dict[str, Any]:
        """status.goodput brought up to now: the time since `since` goes to the sum of the phase the job was
        in, and `since` starts again (at a phase change, or when recomputedSteps grew)."""
        before = self.before.goodput or Goodput(since=self.now)
        spent = max(0.0, (self.now - before.since).total_seconds()) if before.since else 0.0
        sums = {"runningSeconds": before.running_seconds, "waitingSeconds": before.waiting_seconds}
        if (bucket := GOODPUT_SUM_OF.get(self.before.phase)) is not None:
            sums[bucket] = round(sums[bucket] + spent, 3)
        at_size = {entry.nodes: entry.running_seconds for entry in before.running_seconds_at_size}
        # An older operator's status has no size (0).
        if self.before.phase == JobPhase.RUNNING and (size := self.before.nodes.current):
            at_size[size] = round(at_size.get(size, 0.0) + spent, 3)
        shown = [{"nodes": nodes, "runningSeconds": seconds} for nodes, seconds in at_size.items()][-MAX_SIZES_SHOWN:]
        return sums | {
            "runningSecondsAtSize": shown,
            "recomputedSteps": self.recomputed_steps,
            "since": timestamp(self.now),
        }

    def changes(self, patch: dict[str, Any]) -> dict[str, Any] | None:
        """`patch`, or None when the stored status already says all of it (no write, no event loop)."""
        stored = self.before.model_dump(mode="json", by_alias=True, exclude_none=True)
        return None if all(stored.get(key) == value for key, value in patch.items()) else patch
