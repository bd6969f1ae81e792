"""The operator's side of in-place gang restarts: which generation each gang is to run, which of its pods have
checked in for it, and what the pods said of workloads that ended. Each pod's agent calls over the status-report
endpoint (report_server.py, wire.IN_PLACE_PATH), which answers from here, holding a call open until there is an
answer; the operator's decisions say here what is wanted (`want`, `end`) and read what ended (`outcomes`).

- **The barrier.** A generation is released to its pods only once every rank of the gang has checked in for it
  (READY) and its backoff has passed; then all are answered RUN at once, so that no rank trains alone and none
  waits in a rendezvous timeout for a peer still restarting.
- **The restart signal.** A pod running, or ended in, an older generation than the one wanted is answered
  RESTART: its agent exits with the code its restart rule matches, and the kubelet restarts the pod in place.
- **The exit code.** A restart in place leaves the kubelet's record of the container's exit as
  RestartingAllContainers, 137: the agent says the workload's own code and termination message first (ENDED),
  and the gang policy reads them from here.

Level-based: the operator says what it wants on each pass, so an operator that starts (a failover) and knows
nothing yet answers WAIT until its first pass. Thread-safe: the operator's threads write, the endpoint's event
loop reads; `listen` tells the endpoint of each change so that it answers held calls at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scaletrain_trainer.contract import wire

from .policy.pods import as_said, pod_index
from .validation.in_place_call import Call

Key = tuple[str, str]  # a job's namespace and name


@dataclass(frozen=True)
class WorkloadEnd:
    """How a pod's workload ended, as its agent said: the pod's own exit code and message, which the kubelet's
    record of an in-place restart no longer holds."""

    generation: int
    exit_code: int
    message: str
    at: datetime


def as_said_by_agents(pods: Iterable[dict[str, Any]], said: Mapping[int, WorkloadEnd]) -> list[dict[str, Any]]:
    """`pods`, each whose agent said how its workload ended (`said`, by rank) as the pod that ended so."""
    return [
        as_said(pod, ended.exit_code, ended.message, ended.at) if (ended := said.get(pod_index(pod))) else pod
        for pod in pods
    ]


@dataclass(frozen=True)
class Answer:
    verdict: str  # wire.RUN, RESTART, END or WAIT
    generation: int


@dataclass
class _Gang:
    generation: int  # the generation its pods are to run
    ranks: int
    not_before: datetime | None  # released no earlier (a backoff)
    ended: int = -1  # the newest generation whose ended pods are answered END: no restart in place for them
    ready: set[int] = field(default_factory=set)  # the ranks checked in for `generation`
    released: bool = False
    outcomes: dict[int, WorkloadEnd] = field(default_factory=dict)  # by rank: the newest of each, of `generation` on


class InPlaceGangs:
    """What the operator wants of each gang restarted in place, and what its pods said; `on_outcome(job)` is told
    when a pod of `job` says its workload ended, so that the operator decides at once."""

    def __init__(self, on_outcome: Callable[[Key], None] = lambda job: None) -> None:
        self.on_outcome = on_outcome
        self._gangs: dict[Key, _Gang] = {}
        self._listeners: list[Callable[[Key], None]] = []
        self._lock = threading.Lock()

    def listen(self, changed: Callable[[Key], None]) -> None:
        """`changed(job)` is called after each change to `job`'s gang, on the thread that made it."""
        self._listeners.append(changed)

    def want(self, job: Key, generation: int, ranks: int, not_before: datetime | None = None) -> None:
        """`job`'s gang of `ranks` pods is to run `generation`, from `not_before` on. A newer generation than
        before tells the pods of older ones to restart, and opens its barrier."""
        with self._lock:
            gang = self._gangs.get(job)
            if gang is not None and gang.generation == generation:
                changed = (gang.ranks, gang.not_before) != (ranks, not_before)
                gang.ranks, gang.not_before = ranks, not_before
            else:
                kept = {} if gang is None else {r: o for r, o in gang.outcomes.items() if o.generation >= generation}
                ended = -1 if gang is None else gang.ended
                self._gangs[job] = _Gang(generation, ranks, not_before, ended, outcomes=kept)
                changed = True
        if changed:
            self._changed(job)

    def end(self, job: Key, generation: int) -> None:
        """The pods whose workload ended in `generation` (or before) are to exit with their own code: the gang is
        not restarted in place (it failed, succeeded, or is recreated)."""
        with self._lock:
            gang = self._gangs.get(job)
            if gang is None or gang.ended >= generation:
                return
            gang.ended = generation
        self._changed(job)

    def outcomes(self, job: Key, generation: int) -> dict[int, WorkloadEnd]:
        """What the pods of `job` said of workloads that ended in `generation`, by rank."""
        with self._lock:
            gang = self._gangs.get(job)
            return {} if gang is None else {r: o for r, o in gang.outcomes.items() if o.generation == generation}

    def forget(self, job: Key) -> None:
        """Forget the gang of a job that was deleted."""
        with self._lock:
            self._gangs.pop(job, None)

    def answer(self, job: Key, rank: int, call: Call, now: datetime) -> tuple[Answer | None, datetime | None]:
        """The answer to `call` from the pod of rank `rank`, or None while there is none yet; and, with None, when
        one may come without any change (a backoff that passes), if it may. Records what the call says."""
        told = False
        with self._lock:
            gang = self._gangs.get(job)
            if gang is None:
                return None, None
            if call.state == wire.ENDED and call.generation >= gang.generation and rank not in gang.outcomes:
                gang.outcomes[rank] = WorkloadEnd(call.generation, call.exit_code or 0, call.message, now)
                told = True
            was_released = gang.released
            answer, retry_at = self._answer(gang, rank, call, now)
            released = gang.released and not was_released
        if told:
            self.on_outcome(job)
        if released:  # the last rank checked in: the others' calls, held, are answered now
            self._changed(job)
        return answer, retry_at

    @staticmethod
    def _answer(gang: _Gang, rank: int, call: Call, now: datetime) -> tuple[Answer | None, datetime | None]:
        if call.state == wire.READY:
            if call.generation >= gang.generation or not 0 <= rank < gang.ranks:
                return None, None  # nothing newer to run yet; or a rank this gang does not have
            gang.ready.add(rank)
            if not gang.released and len(gang.ready) == gang.ranks:
                if gang.not_before is not None and now < gang.not_before:
                    return None, gang.not_before
                gang.released = True
            return (Answer(wire.RUN, gang.generation), None) if gang.released else (None, None)
        if call.generation < gang.generation:
            return Answer(wire.RESTART, gang.generation), None
        if call.state == wire.ENDED and call.generation <= gang.ended:
            return Answer(wire.END, call.generation), None
        return None, None

    def _changed(self, job: Key) -> None:
        for changed in self._listeners:
            changed(job)
