"""The operator's side of in-place restarts (in_place.py): the barrier, the restart signal and the pods' word on
how their workloads ended; and how a pod's call is read (validation/in_place_call.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from scaletrain_operator.in_place import Answer, InPlaceGangs
from scaletrain_operator.validation.in_place_call import Call, parse_call
from scaletrain_operator.validation.progress_answer import Unreadable
from scaletrain_trainer.contract import wire

JOB = ("team-a", "demo")
NOW = datetime(2026, 12, 7, 9, 0, tzinfo=timezone.utc)


def ready(after: int) -> Call:
    return Call(wire.READY, after)


def test_a_generation_is_released_to_no_rank_until_every_rank_checked_in_and_then_to_all():
    gangs, changes = InPlaceGangs(), []
    gangs.listen(changes.append)
    gangs.want(JOB, 1, ranks=3)
    assert gangs.answer(JOB, 0, ready(0), NOW) == (None, None)
    assert gangs.answer(JOB, 2, ready(0), NOW) == (None, None)
    assert gangs.answer(JOB, 7, ready(0), NOW) == (None, None)  # no rank of this gang: not counted
    changes.clear()
    assert gangs.answer(JOB, 1, ready(0), NOW) == (Answer(wire.RUN, 1), None)
    assert changes == [JOB]  # the ranks held are answered now
    assert gangs.answer(JOB, 0, ready(0), NOW) == (Answer(wire.RUN, 1), None)
    assert gangs.answer(JOB, 0, ready(1), NOW) == (None, None)  # nothing newer than what it ran


def test_the_backoff_holds_the_barrier_until_it_passes():
    gangs = InPlaceGangs()
    gangs.want(JOB, 2, ranks=1, not_before=NOW + timedelta(seconds=10))
    assert gangs.answer(JOB, 0, ready(1), NOW) == (None, NOW + timedelta(seconds=10))
    assert gangs.answer(JOB, 0, ready(1), NOW + timedelta(seconds=10)) == (Answer(wire.RUN, 2), None)


def test_pods_of_an_older_generation_are_told_to_restart_and_an_ended_gang_to_end():
    gangs = InPlaceGangs()
    gangs.want(JOB, 0, ranks=2)
    assert gangs.answer(JOB, 0, Call(wire.RUNNING, 0), NOW) == (None, None)
    gangs.end(JOB, 0)
    assert gangs.answer(JOB, 1, Call(wire.ENDED, 0, 1, "boom"), NOW) == (Answer(wire.END, 0), None)
    assert gangs.answer(JOB, 0, Call(wire.RUNNING, 0), NOW) == (None, None)  # a running one is stopped otherwise
    gangs.want(JOB, 1, ranks=2)
    assert gangs.answer(JOB, 0, Call(wire.RUNNING, 0), NOW) == (Answer(wire.RESTART, 1), None)
    assert gangs.answer(JOB, 1, Call(wire.ENDED, 0, 1, "boom"), NOW) == (Answer(wire.RESTART, 1), None)


def test_an_ended_workloads_code_and_message_are_kept_for_its_generation_and_said_once():
    told = []
    gangs = InPlaceGangs(on_outcome=told.append)
    assert gangs.answer(JOB, 1, Call(wire.ENDED, 0, 3, "x"), NOW) == (None, None)  # no word yet: nothing kept
    gangs.want(JOB, 0, ranks=2)
    for _ in range(2):  # asked again after a WAIT
        assert gangs.answer(JOB, 1, Call(wire.ENDED, 0, 3, "ValueError: boom"), NOW) == (None, None)
    assert told == [JOB]
    [(rank, outcome)] = gangs.outcomes(JOB, 0).items()
    assert (rank, outcome.exit_code, outcome.message, outcome.at) == (1, 3, "ValueError: boom", NOW)
    assert gangs.outcomes(JOB, 1) == {}
    gangs.want(JOB, 1, ranks=2)  # the restart: what ended in the old generation is its record's, not the new one's
    assert gangs.outcomes(JOB, 0) == {}
    gangs.forget(JOB)
    assert gangs.answer(JOB, 0, Call(wire.RUNNING, 0), NOW) == (None, None)


def test_saying_the_same_again_changes_nothing():
    gangs, changes = InPlaceGangs(), []
    gangs.listen(changes.append)
    gangs.want(JOB, 1, ranks=2)
    gangs.want(JOB, 1, ranks=2)
    gangs.end(JOB, 0)
    gangs.end(JOB, 0)
    assert changes == [JOB, JOB]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"[]", "a JSON object"),
        (b'{"state": "dancing", "generation": 0}', "state"),
        (b'{"state": "ready", "generation": -2}', "generation"),
        (b'{"state": "ready", "generation": true}', "generation"),
        (b'{"state": "ended", "generation": 0}', "exitCode"),
        (b'{"state": "ended", "generation": 0, "exitCode": 256}', "exitCode"),
        (json.dumps({"state": "ended", "generation": 0, "exitCode": 1, "message": "x" * 4097}).encode(), "message"),
        (b"{" * 100_000, "a call over"),
    ],
)
def test_a_call_that_is_not_one_is_refused_naming_the_field(body, field):
    with pytest.raises(Unreadable, match=field):
        parse_call(body)


def test_a_call_is_read():
    assert parse_call(b'{"state": "ready", "generation": -1}') == Call(wire.READY, -1)
    ended = {"state": "ended", "generation": 3, "exitCode": 79, "message": '{"result": "NonFinite"}'}
    assert parse_call(json.dumps(ended).encode()) == Call(wire.ENDED, 3, 79, '{"result": "NonFinite"}')
