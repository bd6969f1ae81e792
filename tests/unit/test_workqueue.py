"""The reconcile work queue (controller/workqueue.py): different jobs reconciled in parallel, a gone job
forgotten, a trigger without delay before a delayed one, the failure count, the workers stopped, and due
jobs served fairly across namespaces. The tests wait for the reconciler's calls, not for time to pass; what
takes time to show (triggers folded, delays and backoffs kept, nothing more run after) is in
tests/integration/test_workqueue_timing.py."""

from __future__ import annotations

import threading

from scaletrain_operator.controller import workqueue
from scaletrain_operator.controller.workqueue import FairReady, Outcome, WorkQueue, namespace_of
from scaletrain_testing.timeouts import WORK_QUEUE_REACTION_S
from scaletrain_testing.work_queues import Reconciler


def test_different_keys_run_in_parallel(make_queue):
    reconciler = Reconciler()
    reconciler.hold["a"] = threading.Event()
    queue = make_queue(reconciler, workers=2)
    queue.add("a")
    queue.add("b")
    reconciler.wait_until(lambda: sorted(reconciler.calls) == ["a", "b"])
    reconciler.hold["a"].set()


def test_a_gone_key_is_forgotten(make_queue):
    reconciler = Reconciler(Outcome.SETTLED, Outcome.GONE)
    queue = make_queue(reconciler)
    queue.add("a")
    reconciler.wait_until(lambda: reconciler.calls == ["a"])
    queue.add("a")
    reconciler.wait_until(lambda: reconciler.calls == ["a", "a"])
    queue.add("a", news=False)  # no longer settled: a job of the same name may come back
    reconciler.wait_until(lambda: reconciler.calls == ["a", "a", "a"])


def test_a_trigger_without_delay_overtakes_a_delayed_one(make_queue):
    reconciler = Reconciler()
    queue = make_queue(reconciler)
    queue.add("a", delay=WORK_QUEUE_REACTION_S * 2)
    queue.add("a")
    reconciler.wait_until(lambda: reconciler.calls == ["a"])


def test_the_failure_count_starts_again_after_a_reconcile_that_went_through(make_queue, monkeypatch):
    monkeypatch.setattr(workqueue, "RETRY_BASE_SECONDS", 0.05)
    down = RuntimeError("down")
    reported = []
    reconciler = Reconciler(down, Outcome.WAITING, down)
    queue = make_queue(reconciler, on_error=lambda key, failures, error: reported.append(failures))
    queue.add("a")
    reconciler.wait_until(lambda: len(reconciler.calls) == 2)
    queue.add("a")
    reconciler.wait_until(lambda: len(reconciler.calls) == 4)
    assert reported == [1, 1]


def test_stop_ends_the_workers():
    queue = WorkQueue(Reconciler(), workers=2)
    queue.start()
    queue.stop()
    for worker in queue._workers:
        worker.join(WORK_QUEUE_REACTION_S)
        assert not worker.is_alive()


def test_due_jobs_are_served_round_robin_across_namespaces_and_in_order_within_each():
    """A burst of 200 jobs in one namespace does not hold up a job of another that came due after it."""
    ready = FairReady(namespace_of)
    for n in range(200):
        ready.append(("busy", f"job-{n}"))
    ready.append(("quiet", "job"))
    ready.append(("busy", "job-200"))
    assert ("quiet", "job") in ready and ("quiet", "other") not in ready
    served = [ready.popleft() for _ in range(4)]
    assert served == [("busy", "job-0"), ("quiet", "job"), ("busy", "job-1"), ("busy", "job-2")]
    while ready:
        served.append(ready.popleft())
    assert served[-1] == ("busy", "job-200") and len(served) == 202
