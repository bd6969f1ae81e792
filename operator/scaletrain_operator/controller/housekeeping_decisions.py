"""What housekeeping (housekeeping.py) writes into one job's status, decided purely from what it observed, as
reconcile's decide and ttl's decide_ttl are: why Kueue holds the gang back (Queued), why the gang's pods are
missing (PodCreationFailed), rank 0's progress, and an endpoint that cannot be read (ProgressUnreachable).
Each returns a Decision: a status patch, onto the version decided from, and the Events to post once it is
written. A condition is written only when it turns, or when its caller finds news in its message."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from ..api.conditions import (
    ADMITTED,
    FAILED_CREATE,
    PODS_CREATED,
    READ,
    READ_FAILED,
    WAITING_FOR_ADMISSION,
    ConditionType,
    EventReason,
)
from ..api.job import ScaleTrainJob
from ..api.timestamps import parse_timestamp
from ..policy.hang import promise_broken
from ..render.child_annotations import suspended_by_operator
from ..validation.progress_answer import Unreadable, status_patch
from .decision import Decision, Event
from .status import bounded, condition, with_condition

UNREACHABLE_AFTER_READS = 2  # failed reads in a row before ProgressUnreachable: one may meet a restarting server
POD_CREATION_GRACE = timedelta(seconds=3)  # a new Job's pods take a moment; after that, a missing one has a reason
# What of an answer hang detection reads (policy/hang.py), with the step its message names: written alone when the
# API server refuses the whole answer, so that a job whose progress cannot be written is still found hung.
PROMISE = ("step", "reportedAt", "staleAfter")
# What of an answer is news, written at the read that finds it changed, whatever the cadence (decide_progress): what the
# trainer saved, resumed from or set aside, a loss that is not finite, an evaluation, the run's length.
NEWS = ("checkpointStep", "resumedFromStep", "checkpointsSetAside", "lossFinite", "evalLoss", "maxSteps")
# A namespace's messages by child Job (its name or uid), listed from the API server only when a decision asks.
Listing = Callable[[str], Mapping[str, str]]


class Rank0(NamedTuple):
    """Where the newest gang's rank 0 of a Running job serves its progress."""

    job: ScaleTrainJob
    gang_generation: int
    url: str


def decide_queue_wait(
    stj: Mapping[str, Any], gang: Mapping[str, Any] | None, waits: Listing, now: datetime
) -> Decision:
    """While Kueue holds the gang's Job `gang` back (queued, or suspended at its creation where Kueue manages every
    Job: any suspension but the operator's own), why, in Kueue's words (its Workload's QuotaReserved message, from
    `waits`, by the Job's uid: a quota, or a topology no domain of which holds the gang), as the condition Queued,
    which the job's status message repeats (reconcile.waiting_for_admission). Queued turns False once Kueue
    admitted the Job."""
    if gang is None or (stj.get("spec") or {}).get("suspend") or suspended_by_operator(gang):
        return Decision()
    held = held_condition(stj, ConditionType.QUEUED)
    if not (gang.get("spec") or {}).get("suspend"):  # admitted: a Queued it holds turns False
        if held is None:
            return Decision()
        admitted = f"Kueue admitted Job {child_name(gang)}"
        return Decision(status=condition_patch(stj, ConditionType.QUEUED, False, ADMITTED, admitted, now))
    reason = waits(stj["metadata"]["namespace"]).get(gang["metadata"]["uid"])
    if reason is None or (held is not None and held["message"] == bounded(reason)):
        return Decision()
    return Decision(
        status=condition_patch(stj, ConditionType.QUEUED, True, WAITING_FOR_ADMISSION, reason, now, rewrite=True)
    )


def decide_pod_creation(
    stj: Mapping[str, Any], gang: Mapping[str, Any] | None, pods: int, failures: Listing, now: datetime
) -> Decision:
    """While the gang's Job `gang` lacks pods (it has `pods` of its completions), why: the Job controller's newest
    FailedCreate Event (Pod Security admission, a quota; from `failures`, by the Job's name) becomes the condition
    PodCreationFailed and a Warning Event, which nothing else would show on the job; once the pods are there the
    condition turns False. Nothing while the Job is suspended, or so new that its pods may be on their way."""
    if gang is None or (gang.get("spec") or {}).get("suspend"):
        return Decision()
    if pods >= (gang.get("spec") or {}).get("completions", 1):  # the gang's size (elastic: not nodes)
        message = None
    elif now - parse_timestamp(gang["metadata"]["creationTimestamp"]) < POD_CREATION_GRACE:
        return Decision()  # the Job controller is still at it
    else:
        message = failures(stj["metadata"]["namespace"]).get(child_name(gang))
    held = held_condition(stj, ConditionType.POD_CREATION_FAILED)
    said = held["message"] if held is not None and held["status"] == "True" else None  # what the job shows
    if said == (bounded(message) if message is not None else None):
        return Decision()
    if message is None:
        created = "the gang's pods were created"
        return Decision(
            status=condition_patch(stj, ConditionType.POD_CREATION_FAILED, False, PODS_CREATED, created, now)
        )
    return Decision(
        status=condition_patch(stj, ConditionType.POD_CREATION_FAILED, True, FAILED_CREATE, message, now, rewrite=True),
        events=(Event("Warning", EventReason.POD_CREATION_FAILED, f"the Job {child_name(gang)}: {message}"),),
    )


def decide_unreachable(
    stj: Mapping[str, Any], rank_0: Rank0, failed_reads: int, why: Unreadable, now: datetime
) -> Decision:
    """Rank 0's progress endpoint could not be read `failed_reads` times in a row, the last for `why`: from the
    UNREACHABLE_AFTER_READS-th on, after its gang had answered, the condition ProgressUnreachable says so. An
    unreadable endpoint is not a silent trainer: it is never taken for a hang."""
    answered = progress_of(stj).get("generation") == rank_0.gang_generation
    if not answered or failed_reads < UNREACHABLE_AFTER_READS:
        return Decision()
    message = (
        f"rank 0's progress endpoint {rank_0.url} cannot be read ({why}); a hang is found only from rank 0's own "
        "answers, so the gang is not restarted for this"
    )
    return Decision(status=condition_patch(stj, ConditionType.PROGRESS_UNREACHABLE, True, READ_FAILED, message, now))


def decide_progress(
    stj: Mapping[str, Any],
    rank_0: Rank0,
    answer: dict[str, Any],
    read_at: datetime,
    write_every: float = 0.0,
    read_seconds: float = 0.0,
) -> Decision:
    """Rank 0's answer into status.progress, replacing what an earlier answer said (progress_answer.status_patch),
    with when it was read; ProgressUnreachable turns False if it was True. A loss that turned non-finite and
    damaged checkpoints the trainer set aside while resuming each get a Warning Event once.

    Written when `write_every` seconds passed since the answer the status holds was read, or at once for news: a
    new gang's first answer, a NEWS field that changed, the last step reached, the endpoint answering again, or an
    answer that proves its promise broken (policy/hang.py, with `read_seconds`: a hang is found at the read that
    finds it). Nothing else (a step, a loss, a newer promise) is worth a write per read: the status is a summary,
    and rank 0's /metrics has every step."""
    before = progress_of(stj)
    progress = status_patch(answer, rank_0.gang_generation, before, read_at)
    patch: dict[str, Any] = {"progress": progress}
    unreachable = held_condition(stj, ConditionType.PROGRESS_UNREACHABLE)
    if unreachable is not None and unreachable["status"] == "True":  # so it turns: a patch, never None
        answers = "rank 0's progress endpoint answers again"
        patch |= condition_patch(stj, ConditionType.PROGRESS_UNREACHABLE, False, READ, answers, read_at)
    read_before = parse_timestamp(before["readAt"]) if isinstance(before.get("readAt"), str) else None
    due = read_before is None or (read_at - read_before).total_seconds() >= write_every
    if not (due or "conditions" in patch or is_news(before, progress, read_at, read_seconds)):
        return Decision()
    return Decision(status=patch, events=progress_news(rank_0.job, before, answer))


def is_news(before: Mapping[str, Any], progress: Mapping[str, Any], read_at: datetime, read_seconds: float) -> bool:
    """Whether `progress` (a status patch, read at `read_at`) says what the status `before` it must show at once."""
    step = progress.get("step")
    stale_after = parse_timestamp(progress["staleAfter"]) if progress.get("staleAfter") else None
    return (
        before.get("generation") != progress.get("generation")
        or any(progress.get(field) != before.get(field) for field in NEWS)
        or (step is not None and step == progress.get("maxSteps") and step != before.get("step"))
        or (stale_after is not None and promise_broken(stale_after, read_at, read_seconds))
    )


def decide_promise_only(stj: Mapping[str, Any], rank_0: Rank0, answer: dict[str, Any], read_at: datetime) -> Decision:
    """decide_progress for when the API server refused its status (StatusRefused): of the answer only the promise
    that hang detection reads (PROMISE), without the conditions; the same Events."""
    promise = {field: answer[field] for field in PROMISE if field in answer}
    progress = status_patch(promise, rank_0.gang_generation, progress_of(stj), read_at)
    return replace(decide_progress(stj, rank_0, answer, read_at), status={"progress": progress})


def progress_news(job: ScaleTrainJob, before: Mapping[str, Any], answer: Mapping[str, Any]) -> tuple[Event, ...]:
    """A Warning Event for what `answer` newly says went wrong, against the progress `before` it: a non-finite
    loss, checkpoints set aside (in the job's checkpoint dir)."""
    news = []
    if answer.get("lossFinite") is False and before.get("lossFinite") is not False:
        message = f"rank 0 reports a non-finite loss at step {answer.get('step', '?')}: the run diverged"
        news.append(Event("Warning", EventReason.LOSS_NOT_FINITE, message))
    set_aside = answer.get("checkpointsSetAside") or []
    if set_aside and set_aside != before.get("checkpointsSetAside"):
        in_dir = f" in {job.spec.training.checkpoint.dir}" if job.spec.training is not None else ""
        message = (
            f"damaged checkpoints moved aside{in_dir}: {', '.join(set_aside)}; "
            "training resumed from the newest sound one (rank 0's log says what was wrong)"
        )
        news.append(Event("Warning", EventReason.CHECKPOINT_SET_ASIDE, message))
    return tuple(news)


def condition_patch(
    stj: Mapping[str, Any], kind: str, status: bool, reason: str, message: str, now: datetime, rewrite: bool = False
) -> dict[str, Any] | None:
    """The status patch that turns the condition `kind` to `status`; None when it holds that status already: a
    message that differs from pass to pass (the read failed otherwise) is no news worth a write. With `rewrite`,
    the caller found news in the message: it is written, with the time the condition last turned kept."""
    conditions = (stj.get("status") or {}).get("conditions") or []
    held = held_condition(stj, kind)
    unturned = held is not None and held["status"] == ("True" if status else "False")
    if unturned and not rewrite:
        return None
    update = condition(kind, status, reason, message, now, stj["metadata"].get("generation"))
    if unturned and held.get("lastTransitionTime"):
        update["lastTransitionTime"] = held["lastTransitionTime"]
    return {"conditions": with_condition(conditions, update)}


def held_condition(stj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The condition of type `kind` the stored job's status holds, if any."""
    return next((held for held in (stj.get("status") or {}).get("conditions") or [] if held["type"] == kind), None)


def progress_of(stj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The status.progress the stored job holds ({} before any)."""
    return (stj.get("status") or {}).get("progress") or {}


def child_name(child: Mapping[str, Any]) -> str:
    return child["metadata"]["name"]
