"""What housekeeping writes of what it observed (controller/housekeeping_decisions.py), without a cluster: why
Kueue holds a gang back, why its pods are missing, rank 0's progress, and an endpoint that cannot be read."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from scaletrain_operator.controller.decision import Decision, Event
from scaletrain_operator.controller.housekeeping_decisions import (
    POD_CREATION_GRACE,
    UNREACHABLE_AFTER_READS,
    decide_pod_creation,
    decide_progress,
    decide_promise_only,
    decide_queue_wait,
    decide_unreachable,
)
from scaletrain_operator.render.child_annotations import SUSPENDED_BY_OPERATOR_ANNOTATION
from scaletrain_operator.validation.progress_answer import Unreadable
from scaletrain_testing.gang_objects import ListedMessages, cached_gang_job, rank_0
from scaletrain_testing.jobs import NAMESPACE, patched, running_status, stored_condition, stored_job

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
SINCE = "2026-12-02T11:00:00Z"  # when a held condition last turned (stored_condition's default)
QUOTA = "couldn't assign flavors to pod set main: insufficient quota for cpu"
FORBIDDEN = 'pods "demo-g0-0" is forbidden: violates PodSecurity "restricted:latest"'
URL = "http://10.0.0.1:9400/progress"
RANK_0 = rank_0(URL, training={"checkpoint": {"dir": "/ckpt"}})
ANSWER = {"step": 12, "loss": 1.5, "reportedAt": "2026-12-02T11:59:58Z", "staleAfter": "2026-12-02T12:01:00Z"}


def pending(*conditions: dict) -> dict:
    """The stored job demo, Pending on its first gang demo-g0, holding `conditions`."""
    return stored_job(status={"phase": "Pending", "currentJob": "demo-g0", "conditions": list(conditions)})


def running(progress: dict, *conditions: dict) -> dict:
    """The stored job demo, Running on demo-g0, its status.progress `progress`, holding `conditions`."""
    return stored_job(status=running_status(progress=progress, conditions=list(conditions)))


def test_kueues_reason_to_hold_the_gang_back_is_the_condition_queued_written_again_only_when_it_changes():
    waits = ListedMessages({"demo-g0-uid": QUOTA})
    decision = decide_queue_wait(pending(), cached_gang_job(suspend=True), waits, NOW)
    queued = {"type": "Queued", "status": "True", "reason": "WaitingForAdmission", "message": QUOTA,
              "lastTransitionTime": "2026-12-02T12:00:00Z"}  # fmt: skip
    assert decision == Decision(status={"conditions": [queued]})
    assert waits.asked == [NAMESPACE]
    said = pending(stored_condition("Queued", True, QUOTA))
    assert decide_queue_wait(said, cached_gang_job(suspend=True), waits, NOW) == Decision()
    no_word_yet = ListedMessages({})  # Kueue made no Workload of the Job yet
    assert decide_queue_wait(pending(), cached_gang_job(suspend=True), no_word_yet, NOW) == Decision()


def test_queued_turns_false_once_kueue_admitted_the_gangs_job_and_only_if_it_was_true():
    waits = ListedMessages({"demo-g0-uid": QUOTA})
    decision = decide_queue_wait(pending(stored_condition("Queued", True, QUOTA)), cached_gang_job(), waits, NOW)
    admitted = {"type": "Queued", "status": "False", "reason": "Admitted", "message": "Kueue admitted Job demo-g0",
                "lastTransitionTime": "2026-12-02T12:00:00Z"}  # fmt: skip
    assert decision == Decision(status={"conditions": [admitted]})
    assert decide_queue_wait(pending(), cached_gang_job(), waits, NOW) == Decision()
    assert (
        decide_queue_wait(pending(stored_condition("Queued", False, "")), cached_gang_job(), waits, NOW) == Decision()
    )
    assert waits.asked == []  # an admitted Job's wait is not listed


def test_a_gang_held_by_its_job_or_the_operator_or_not_yet_made_waits_for_no_admission():
    waits = ListedMessages({"demo-g0-uid": QUOTA})
    user_suspended = stored_job(status={"phase": "Suspended", "currentJob": "demo-g0"}, suspend=True)
    assert decide_queue_wait(user_suspended, cached_gang_job(suspend=True), waits, NOW) == Decision()
    operators = {"metadata": {"annotations": {SUSPENDED_BY_OPERATOR_ANNOTATION: "1"}}}
    assert decide_queue_wait(pending(), patched(cached_gang_job(suspend=True), operators), waits, NOW) == Decision()
    assert decide_queue_wait(pending(), None, waits, NOW) == Decision()
    assert waits.asked == []


def test_a_gang_still_lacking_pods_after_the_grace_says_the_newest_failed_create_once_with_a_warning():
    failures = ListedMessages({"demo-g0": FORBIDDEN})
    gang = cached_gang_job(created=NOW - POD_CREATION_GRACE - timedelta(seconds=1))
    decision = decide_pod_creation(pending(), gang, 0, failures, NOW)
    failed = {"type": "PodCreationFailed", "status": "True", "reason": "FailedCreate", "message": FORBIDDEN,
              "lastTransitionTime": "2026-12-02T12:00:00Z"}  # fmt: skip
    warning = Event("Warning", "PodCreationFailed", f"the Job demo-g0: {FORBIDDEN}")
    assert decision == Decision(status={"conditions": [failed]}, events=(warning,))
    assert failures.asked == [NAMESPACE]
    said = pending(stored_condition("PodCreationFailed", True, FORBIDDEN))
    assert decide_pod_creation(said, gang, 0, failures, NOW) == Decision()
    quota = ListedMessages({"demo-g0": "exceeded quota: pods"})  # a new reason: rewritten, since kept, warned again
    (rewritten,) = decide_pod_creation(said, gang, 0, quota, NOW).status["conditions"]
    assert rewritten["message"] == "exceeded quota: pods" and rewritten["lastTransitionTime"] == SINCE


def test_a_new_or_suspended_gang_lists_no_failed_creates_and_its_pods_turn_pod_creation_failed_false():
    failures = ListedMessages({"demo-g0": FORBIDDEN})
    new = cached_gang_job(created=NOW - POD_CREATION_GRACE + timedelta(seconds=1))  # the Job controller is at it
    assert decide_pod_creation(pending(), new, 0, failures, NOW) == Decision()
    assert decide_pod_creation(pending(), cached_gang_job(suspend=True), 0, failures, NOW) == Decision()
    assert decide_pod_creation(pending(), None, 0, failures, NOW) == Decision()
    assert decide_pod_creation(pending(), new, 1, failures, NOW) == Decision()  # all there, and nothing was said
    assert failures.asked == []
    said = pending(stored_condition("PodCreationFailed", True, FORBIDDEN))
    created = {"type": "PodCreationFailed", "status": "False", "reason": "PodsCreated",
               "message": "the gang's pods were created", "lastTransitionTime": "2026-12-02T12:00:00Z"}  # fmt: skip
    assert decide_pod_creation(said, new, 1, failures, NOW) == Decision(status={"conditions": [created]})


def test_progress_is_unreachable_after_failed_reads_in_a_row_of_a_gang_that_had_answered():
    answered = running({"generation": 0, "step": 3})
    why = Unreadable("connection refused")
    in_a_row = UNREACHABLE_AFTER_READS
    assert decide_unreachable(answered, RANK_0, in_a_row - 1, why, NOW) == Decision()  # may meet a server restarting
    (unreachable,) = decide_unreachable(answered, RANK_0, in_a_row, why, NOW).status["conditions"]
    assert (unreachable["type"], unreachable["status"], unreachable["reason"]) == (
        "ProgressUnreachable",
        "True",
        "ReadFailed",
    )
    assert unreachable["message"] == (
        f"rank 0's progress endpoint {URL} cannot be read (connection refused); a hang is found only from rank 0's own "
        "answers, so the gang is not restarted for this"
    )
    new_gang = rank_0(URL, gang_generation=1)  # not answered yet: it may still be starting
    assert decide_unreachable(answered, new_gang, in_a_row, why, NOW) == Decision()
    said = running({"generation": 0}, stored_condition("ProgressUnreachable", True, "timed out"))
    assert decide_unreachable(said, RANK_0, in_a_row + 1, why, NOW) == Decision()  # a new why is no news


def test_an_answer_replaces_the_progress_and_turns_progress_unreachable_false():
    before = {"generation": 0, "step": 3, "loss": 2.0, "metrics": {"lr": 0.1}}
    decision = decide_progress(running(before), RANK_0, ANSWER, NOW)
    progress = decision.status["progress"]
    assert (progress["step"], progress["loss"], progress["generation"]) == (12, 1.5, 0)
    assert progress["readAt"] == "2026-12-02T12:00:00Z" and progress["metrics"] is None  # the old names removed
    assert "conditions" not in decision.status and decision.events == ()
    unreachable = stored_condition("ProgressUnreachable", True, "timed out")
    (readable,) = decide_progress(running(before, unreachable), RANK_0, ANSWER, NOW).status["conditions"]
    assert readable == {"type": "ProgressUnreachable", "status": "False", "reason": "Read",
                        "message": "rank 0's progress endpoint answers again",
                        "lastTransitionTime": "2026-12-02T12:00:00Z"}  # fmt: skip
    turned = running(before, stored_condition("ProgressUnreachable", False, "rank 0's progress endpoint answers again"))
    assert "conditions" not in decide_progress(turned, RANK_0, ANSWER, NOW).status


WRITE_EVERY, READ_S = 60.0, 2.0  # the default cadence, and a read's deadline
WRITTEN = {"generation": 0, "step": 10, "loss": 1.6, "readAt": "2026-12-02T11:59:30Z", "checkpointStep": 10,
           "maxSteps": 100, "staleAfter": "2026-12-02T12:00:30Z"}  # fmt: skip  # an answer written 30 s ago


def test_an_answer_with_nothing_new_is_written_once_the_write_interval_passed_and_news_at_once():
    """A step and a loss are no news: the status takes them once a minute. A new gang, a checkpoint, a loss not
    finite, the last step and a broken promise (a hang) are written at the read that finds them."""
    later = ANSWER | {"checkpointStep": 10, "maxSteps": 100, "staleAfter": "2026-12-02T12:01:00Z"}

    def written(before: dict, answer: dict, read_at: datetime = NOW) -> bool:
        decision = decide_progress(running(before), RANK_0, answer, read_at, WRITE_EVERY, READ_S)
        return decision.status is not None

    assert not written(WRITTEN, later)
    assert written(WRITTEN, later, NOW + timedelta(seconds=30))  # a minute after the answer the status holds
    assert written({}, later) and written(WRITTEN | {"readAt": None}, later)  # the first answer
    assert written(WRITTEN | {"generation": 1}, later)  # a new gang's first answer
    news = {"a checkpoint": {"checkpointStep": 20}, "a diverged loss": {"loss": None, "lossFinite": False},
            "an evaluation": {"evalLoss": 1.2}, "a resume": {"resumedFromStep": 10},
            "the last step": {"step": 100}, "set aside": {"checkpointsSetAside": ["step-9.corrupt"]}}  # fmt: skip
    for case, changed in news.items():
        assert written(WRITTEN, later | changed), case
    # Read at 12:00:00, an answer that still promises 11:59:58: the trainer made no progress in time.
    assert written(WRITTEN, later | {"staleAfter": "2026-12-02T11:59:58Z"})
    assert not written(WRITTEN, later | {"staleAfter": "2026-12-02T11:59:59Z"})  # within a read's deadline
    unreachable = stored_condition("ProgressUnreachable", True, "timed out")
    decision = decide_progress(running(WRITTEN, unreachable), RANK_0, later, NOW, WRITE_EVERY, READ_S)
    assert decision.status["conditions"][0]["status"] == "False"  # answers again: said at once


def test_a_diverged_loss_and_checkpoints_set_aside_are_each_warned_of_when_an_answer_first_says_so():
    news = ANSWER | {"loss": None, "lossFinite": False, "checkpointsSetAside": ["step-40.damaged"]}
    events = decide_progress(running({"generation": 0, "step": 3}), RANK_0, news, NOW).events
    assert events == (
        Event("Warning", "LossNotFinite", "rank 0 reports a non-finite loss at step 12: the run diverged"),
        Event(
            "Warning",
            "CheckpointSetAside",
            "damaged checkpoints moved aside in /ckpt: step-40.damaged; training resumed from the newest sound one "
            "(rank 0's log says what was wrong)",
        ),
    )
    said = running({"generation": 0, "lossFinite": False, "checkpointsSetAside": ["step-40.damaged"]})
    assert decide_progress(said, RANK_0, news, NOW).events == ()


def test_a_refused_progress_is_written_again_as_its_promise_alone_with_the_same_warnings():
    unreachable = stored_condition("ProgressUnreachable", True, "timed out")
    stj = running({"generation": 0, "step": 3, "loss": 2.0}, unreachable)
    diverged = ANSWER | {"loss": None, "lossFinite": False}
    decision = decide_promise_only(stj, RANK_0, diverged, NOW)
    assert set(decision.status) == {"progress"}  # no conditions: only what hang detection reads
    written = {field: value for field, value in decision.status["progress"].items() if value is not None}
    assert written == {"step": 12, "reportedAt": "2026-12-02T11:59:58Z", "staleAfter": "2026-12-02T12:01:00Z",
                       "generation": 0, "readAt": "2026-12-02T12:00:00Z"}  # fmt: skip
    assert decision.events == decide_progress(stj, RANK_0, diverged, NOW).events != ()
