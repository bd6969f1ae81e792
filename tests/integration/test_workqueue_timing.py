"""The reconcile work queue (controller/workqueue.py) over time: triggers folded, echoes of a settled job
dropped, a job that acted looked at again, delays kept, a failing one retried with a doubling backoff. Each
test takes real time: delays and backoffs that run out, or a pause (`settle`) that shows nothing more runs."""

from __future__ import annotations

import itertools
import threading
import time

from scaletrain_operator.controller import workqueue
from scaletrain_operator.controller.workqueue import MAX_PASSES, Outcome
from scaletrain_testing.work_queues import Reconciler


def settle():
    time.sleep(0.1)  # long enough for an idle queue to start anything it was going to


def test_triggers_while_a_reconcile_runs_fold_into_one_more_run_of_that_key_only(make_queue):
    reconciler = Reconciler()
    reconciler.hold["a"] = threading.Event()
    queue = make_queue(reconciler, workers=4)
    queue.add("a")
    reconciler.wait_until(lambda: reconciler.calls == ["a"])
    for _ in range(5):
        queue.add("a")
    settle()
    assert reconciler.calls == ["a"] and reconciler.most_concurrent == 1
    reconciler.hold["a"].set()
    reconciler.wait_until(lambda: reconciler.calls == ["a", "a"])
    settle()
    assert reconciler.calls == ["a", "a"]


def test_a_settled_key_ignores_triggers_without_news_but_not_news(make_queue):
    reconciler = Reconciler(Outcome.SETTLED)
    queue = make_queue(reconciler)
    queue.add("a")
    reconciler.wait_until(lambda: reconciler.calls == ["a"])
    settle()
    queue.add("a", news=False)  # the echo of what the cache holds
    settle()
    assert reconciler.calls == ["a"]
    queue.add("a", news=True)
    reconciler.wait_until(lambda: reconciler.calls == ["a", "a"])


def test_a_key_that_acted_is_looked_at_again_up_to_max_passes(make_queue):
    reconciler = Reconciler(*[Outcome.ACTED] * (MAX_PASSES + 2))
    queue = make_queue(reconciler, recheck_delay=0.0)
    queue.add("a")
    reconciler.wait_until(lambda: len(reconciler.calls) == MAX_PASSES)
    settle()
    assert len(reconciler.calls) == MAX_PASSES
    queue.add("a", news=False)  # not settled: an echo still reconciles it
    reconciler.wait_until(lambda: len(reconciler.calls) > MAX_PASSES)


def test_a_delayed_trigger_folds_a_burst_and_runs_after_its_delay(make_queue):
    reconciler = Reconciler()
    queue = make_queue(reconciler)
    started = time.monotonic()
    for _ in range(10):
        queue.add("a", delay=0.2)
    reconciler.wait_until(lambda: reconciler.calls == ["a"])
    assert time.monotonic() - started >= 0.2
    settle()
    assert reconciler.calls == ["a"]


def test_the_recheck_after_acting_waits_its_delay(make_queue):
    reconciler = Reconciler(Outcome.ACTED)
    queue = make_queue(reconciler, recheck_delay=0.3)
    queue.add("a")
    reconciler.wait_until(lambda: reconciler.calls == ["a"])
    acted = time.monotonic()
    queue.add("a", news=False)  # the echo of its own write: only a recheck, so it waits too
    reconciler.wait_until(lambda: reconciler.calls == ["a", "a"])
    assert time.monotonic() - acted >= 0.25


def test_a_failing_reconcile_is_retried_after_a_doubling_backoff_and_reported(make_queue, monkeypatch, caplog):
    monkeypatch.setattr(workqueue, "RETRY_BASE_SECONDS", 0.05)
    down = RuntimeError("the API server is down")
    reconciler = Reconciler(down, down, down, Outcome.SETTLED)
    times, reported = [], []
    reconciler_with_times = lambda key: times.append(time.monotonic()) or reconciler(key)  # noqa: E731
    queue = make_queue(reconciler_with_times, on_error=lambda key, failures, error: reported.append((failures, error)))
    queue.add("a")
    reconciler.wait_until(lambda: len(reconciler.calls) == 4)  # no trigger needed: the queue retries by itself
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2, gaps
    assert reported == [(1, down), (2, down), (3, down)] and "the API server is down" in caplog.text
    settle()
    assert len(reconciler.calls) == 4  # settled: no more retries
