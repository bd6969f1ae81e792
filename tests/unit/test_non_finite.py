"""Streaks of non-finite steps (training/non_finite.py, onNonFinite: skip): the limit that stops the run, the
save that waits for an applied update, and a final loss that is not finite."""

from __future__ import annotations

import math

import pytest

from scaletrain_trainer.contract.exit_codes import NonFinite
from scaletrain_trainer.training.non_finite import NonFiniteStreak


def test_a_streak_of_dropped_updates_at_the_limit_stops_naming_its_first_step():
    streak = NonFiniteStreak(limit=3)
    for step, dropped in [(1, False), (2, True), (3, True), (4, False), (5, True), (6, True)]:
        streak.count(step, dropped)  # two in a row, then applied, then two again: under the limit
    with pytest.raises(NonFinite) as stopped:
        streak.count(7, dropped=True)
    assert stopped.value.step == 5
    stopped.value.last_checkpoint_step = 4
    assert str(stopped.value).endswith("not finite at step 5: the run diverged (the last finite checkpoint: step 4)")


def test_a_save_due_during_a_streak_waits_for_the_next_applied_update():
    streak = NonFiniteStreak(limit=10)
    saves = []
    for step, dropped in [(1, False), (2, False), (3, True), (4, True), (5, False), (6, False)]:
        streak.count(step, dropped)
        if streak.saves_now(due=step % 2 == 0):
            saves.append(step)
    assert saves == [2, 5, 6]  # step 4's save waited for step 5, the first applied after it


def test_a_final_loss_that_is_not_finite_stops_the_run_naming_where_it_turned():
    streak = NonFiniteStreak(limit=10)
    streak.check_final_loss(2.5, step=9)
    streak.count(8, dropped=True)
    streak.count(9, dropped=True)
    with pytest.raises(NonFinite) as in_a_streak:
        streak.check_final_loss(math.nan, step=9)
    assert in_a_streak.value.step == 8
    with pytest.raises(NonFinite) as without_a_streak:  # fp16: its scaler skips steps itself
        NonFiniteStreak(limit=10).check_final_loss(math.inf, step=9)
    assert without_a_streak.value.step == 9
