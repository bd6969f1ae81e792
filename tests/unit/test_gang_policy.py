"""The one gang policy (api/gang_policy.py), table-driven: what a set of pod outcomes means for the job."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from scaletrain_operator.api.gang_policy import DEADLINE_EXCEEDED, Action, GangLimits, PodOutcome, judge
from scaletrain_operator.api.models import parse_job
from scaletrain_trainer.exit_codes import EXIT_CONFIG_ERROR, EXIT_HANG, EXIT_WRITE_ERROR
from support.jobs import base_job

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
LIMITS = GangLimits(nodes=2, max_restarts=3, active_deadline_seconds=600)


def pod(index, phase, exit_code=None, second=None, stopping=False, message=""):
    finished = T0 + timedelta(seconds=second) if second is not None else None
    reason = {"Failed": "Error", "Succeeded": "Completed"}.get(phase, "")
    return PodOutcome(f"demo-g0-{index}", index, phase, exit_code, reason, message, finished, stopping)


# Termination messages of the hang watchdog (trainer/watchdog.py): stopped while waiting on the peers, or
# stuck in work of its own.
WAITED = '{"result": "Hang", "step": 7, "doing": "in step 8", "waitingOnPeers": true}'
STUCK = '{"result": "Hang", "step": 7, "doing": "loading the data of step 8", "waitingOnPeers": false}'

# (case, pods, restarts, keyword arguments, action, reason, root-cause pod name, words in the message)
CASES = [
    ("all pending", [pod(0, "Pending"), pod(1, "Pending")], 0, {}, Action.KEEP_RUNNING, None, None, ""),
    ("running", [pod(0, "Running"), pod(1, "Running")], 0, {}, Action.KEEP_RUNNING, None, None, ""),
    ("one done, one running", [pod(0, "Succeeded", 0, 1), pod(1, "Running")], 0, {}, Action.KEEP_RUNNING, None, None,
     ""),
    ("all succeeded", [pod(0, "Succeeded", 0, 1), pod(1, "Succeeded", 0, 2)], 0, {}, Action.SUCCEED, None, None,
     "all 2 nodes finished"),
    ("the Job says complete", [], 0, {"job_complete": True}, Action.SUCCEED, None, None, "all 2 nodes finished"),
    ("a crash restarts", [pod(0, "Running"), pod(1, "Failed", 137, 5)], 0, {}, Action.RESTART, None, "demo-g0-1",
     "pod demo-g0-1 failed (Error, exit code 137); gang restart 1/3 from the last checkpoint"),
    ("the budget is spent", [pod(0, "Failed", 1, 5)], 3, {}, Action.FAIL, "RestartLimitReached", "demo-g0-0",
     "maxRestarts (3) reached"),
    ("a config error is final", [pod(0, "Failed", EXIT_CONFIG_ERROR, 5, message="data.path: missing")], 0, {},
     Action.FAIL, "ConfigError", "demo-g0-0", "invalid training config, not retried. data.path: missing"),
    ("a worker's config error under torchrun is final",
     [pod(0, "Failed", 1, 5, message='{"result": "ConfigError", "problems": ["model.name: returned a dict"]}')], 0,
     {}, Action.FAIL, "ConfigError", "demo-g0-0", "invalid training config, not retried"),
    ("a plain exit 1 with another message restarts", [pod(0, "Failed", 1, 5, message='{"result": "Crashed"}')], 0,
     {}, Action.RESTART, None, "demo-g0-0", "gang restart 1/3"),
    ("a passed deadline is final", [pod(0, "Running")], 0, {"job_failure": DEADLINE_EXCEEDED}, Action.FAIL,
     "DeadlineExceeded", None, "activeDeadlineSeconds (600) passed"),
    ("the deadline wins over the pods it killed", [pod(0, "Failed", 143, 5)], 0,
     {"job_failure": DEADLINE_EXCEEDED}, Action.FAIL, "DeadlineExceeded", None, "activeDeadlineSeconds"),
    ("a failed Job without a failed pod", [], 0, {"job_failure": "BackoffLimitExceeded"}, Action.RESTART, None,
     None, "the gang's Job failed (BackoffLimitExceeded); gang restart 1/3"),
    ("success wins over a late failure", [pod(0, "Succeeded", 0, 1), pod(1, "Succeeded", 0, 2)], 0,
     {"job_failure": "BackoffLimitExceeded"}, Action.SUCCEED, None, None, ""),
    ("pods stopped by a suspension", [pod(0, "Failed", 143, 5), pod(1, "Running")], 0, {"suspended": True},
     Action.KEEP_RUNNING, None, None, ""),
    ("pods being deleted are not crashes", [pod(0, "Failed", 143, 5, stopping=True), pod(1, "Running")], 0, {},
     Action.KEEP_RUNNING, None, None, ""),
    ("a write error is final", [pod(0, "Failed", EXIT_WRITE_ERROR, 5, message="disk full (ENOSPC)")], 0, {},
     Action.FAIL, "WriteError", "demo-g0-0", "cannot write its checkpoints or outputs, not retried"),
    ("a pod that waited on a stuck peer is not the cause: the stuck one is",
     [pod(0, "Failed", EXIT_HANG, 5, message=WAITED), pod(1, "Running")], 0, {}, Action.RESTART, None, "demo-g0-1",
     "pod demo-g0-1 stopped advancing (its peers timed out waiting on it); gang restart 1/3"),
    ("a pod stuck in its own work is the cause, though it stopped later",
     [pod(0, "Failed", EXIT_HANG, 5, message=WAITED), pod(1, "Failed", EXIT_HANG, 6, message=STUCK)], 0, {},
     Action.RESTART, None, "demo-g0-1", "pod demo-g0-1 failed (Error, exit code 75)"),
    ("when every pod waited on the others, the first to stop",
     [pod(0, "Failed", EXIT_HANG, 6, message=WAITED), pod(1, "Failed", EXIT_HANG, 5, message=WAITED)], 0, {},
     Action.RESTART, None, "demo-g0-1", "gang restart 1/3"),
    ("any crash counts", [pod(1, "Failed", 1, 5)], 2, {}, Action.RESTART, None, "demo-g0-1", "gang restart 3/3"),
]  # fmt: skip


@pytest.mark.parametrize(
    "pods, restarts, kwargs, action, reason, cause, words", [case[1:] for case in CASES], ids=[c[0] for c in CASES]
)
def test_the_gang_policy(pods, restarts, kwargs, action, reason, cause, words):
    verdict = judge(pods, LIMITS, restarts, **kwargs)
    assert verdict.action is action
    assert verdict.reason == reason
    assert (verdict.root_cause.name if verdict.root_cause else None) == cause
    assert words in verdict.message


def test_the_root_cause_is_the_first_pod_to_finish_then_the_lowest_index():
    # Node 1 was killed; node 0's collective broke a second later: node 1 is the root cause.
    assert judge([pod(0, "Failed", 1, 6), pod(1, "Failed", 137, 5)], LIMITS, 0).root_cause.index == 1
    # Finished together: the lowest index.
    assert judge([pod(1, "Failed", 1, 5), pod(0, "Failed", 1, 5)], LIMITS, 0).root_cause.index == 0
    # A pod whose finish time is unknown comes after any that has one.
    assert judge([pod(0, "Failed", 1), pod(1, "Failed", 1, 9)], LIMITS, 0).root_cause.index == 1


def test_the_job_exit_code_follows_the_verdict():
    assert judge([pod(0, "Succeeded", 0, 1), pod(1, "Succeeded", 0, 1)], LIMITS, 0).exit_code == 0
    assert judge([pod(0, "Failed", EXIT_CONFIG_ERROR, 1)], LIMITS, 0).exit_code == EXIT_CONFIG_ERROR
    reported = pod(0, "Failed", 1, 1, message='{"result": "ConfigError"}')  # by a worker, under torchrun
    assert judge([reported], LIMITS, 0).exit_code == EXIT_CONFIG_ERROR
    assert judge([pod(0, "Failed", 137, 1)], LIMITS, 3).exit_code == 137
    assert judge([pod(0, "Running")], LIMITS, 0, job_failure=DEADLINE_EXCEEDED).exit_code == 1


def test_limits_come_from_the_spec():
    spec = parse_job(base_job(maxRestarts=5, activeDeadlineSeconds=60)).spec
    assert GangLimits.of(spec) == GangLimits(nodes=2, max_restarts=5, active_deadline_seconds=60)


def test_a_termination_message_that_is_not_the_trainers_is_just_text():
    deep = pod(0, "Failed", 1, 5, message="[" * 4000)  # too deep for the JSON parser: RecursionError
    assert judge([deep], LIMITS, 0).action is Action.RESTART
