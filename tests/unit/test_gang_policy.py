"""The one gang policy (policy/gang_policy.py), table-driven: what a set of pod outcomes means for the job."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from scaletrain_operator.api import naming
from scaletrain_operator.api.conditions import DEADLINE_EXCEEDED, DISRUPTION_TARGET, NON_FINITE_LOSS
from scaletrain_operator.api.job import parse_job
from scaletrain_operator.api.job_status import GangRecord
from scaletrain_operator.api.spec import FailurePolicyRule, RestartBackoff
from scaletrain_operator.policy.gang_policy import (
    Action,
    GangLimits,
    PodOutcome,
    crash_loop_length,
    ended_gang,
    judge,
    pod_outcome,
    restart_backoff,
)
from scaletrain_testing.jobs import DELETE, base_job
from scaletrain_trainer.contract.exit_codes import (
    EXIT_CONFIG_ERROR,
    EXIT_HANG,
    EXIT_NON_FINITE,
    EXIT_PREEMPTED,
    EXIT_STORAGE_ERROR,
    EXIT_WRITE_ERROR,
)

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
# The trainer's start-up check of checkpoint.dir, refused by the store (exit 77).
STORAGE_REFUSED = (
    '{"result": "CheckpointStorageError", "cause": "s3://team-a/ckpt: AccessDenied writing a test object"}'
)

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
    ("a failed Job without a failed pod", [], 0, {"job_failure": "BackoffLimitExceeded"}, Action.RESTART,
     "BackoffLimitExceeded", None, "the gang's Job failed (BackoffLimitExceeded); gang restart 1/3"),
    ("success wins over a late failure", [pod(0, "Succeeded", 0, 1), pod(1, "Succeeded", 0, 2)], 0,
     {"job_failure": "BackoffLimitExceeded"}, Action.SUCCEED, None, None, ""),
    ("pods stopped by a suspension", [pod(0, "Failed", 143, 5), pod(1, "Running")], 0, {"suspended": True},
     Action.KEEP_RUNNING, None, None, ""),
    ("pods being deleted are not crashes", [pod(0, "Failed", 143, 5, stopping=True), pod(1, "Running")], 0, {},
     Action.KEEP_RUNNING, None, None, ""),
    ("a write error is final", [pod(0, "Failed", EXIT_WRITE_ERROR, 5, message="disk full (ENOSPC)")], 0, {},
     Action.FAIL, "WriteError", "demo-g0-0", "cannot write its checkpoints or outputs, not retried"),
    ("checkpoint storage that refused the trainer is final, its cause told",
     [pod(0, "Failed", EXIT_STORAGE_ERROR, 5, message=STORAGE_REFUSED), pod(1, "Running")], 0, {}, Action.FAIL,
     "CheckpointStorageError", "demo-g0-0", "s3://team-a/ckpt: AccessDenied writing a test object"),
    ("a worker's storage error under torchrun is final", [pod(0, "Failed", 1, 5, message=STORAGE_REFUSED)], 0, {},
     Action.FAIL, "CheckpointStorageError", "demo-g0-0", "its checkpoint storage refused it, not retried"),
    ("a pod that waited on a stuck peer is not the cause: the stuck one is",
     [pod(0, "Failed", EXIT_HANG, 5, message=WAITED), pod(1, "Running")], 0, {}, Action.RESTART, "Hang", "demo-g0-1",
     "pod demo-g0-1 stopped advancing (its peers timed out waiting on it); gang restart 1/3"),
    ("the stuck peer is the cause even while the failed Job's pods are being stopped",
     [pod(0, "Failed", EXIT_HANG, 5, message=WAITED), pod(1, "Running", stopping=True)], 0, {}, Action.RESTART,
     "Hang", "demo-g0-1", "pod demo-g0-1 stopped advancing (its peers timed out waiting on it); gang restart 1/3"),
    ("a pod stuck in its own work is the cause, though it stopped later",
     [pod(0, "Failed", EXIT_HANG, 5, message=WAITED), pod(1, "Failed", EXIT_HANG, 6, message=STUCK)], 0, {},
     Action.RESTART, "Hang", "demo-g0-1", "pod demo-g0-1 failed (Error, exit code 75)"),
    ("when every pod waited on the others, the first to stop",
     [pod(0, "Failed", EXIT_HANG, 6, message=WAITED), pod(1, "Failed", EXIT_HANG, 5, message=WAITED)], 0, {},
     Action.RESTART, "Hang", "demo-g0-1", "gang restart 1/3"),
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
    assert GangLimits.of(spec) == GangLimits(
        nodes=2, max_restarts=5, active_deadline_seconds=60, max_restarts_without_progress=3
    )
    # A script of one's own may not report its checkpoints: the crash-loop guard is off unless asked for.
    own_script = base_job(training=DELETE, command=["python", "train.py"])
    assert GangLimits.of(parse_job(own_script).spec).max_restarts_without_progress is None
    asked = parse_job(own_script | {"spec": own_script["spec"] | {"maxRestartsWithoutProgress": 5}}).spec
    assert GangLimits.of(asked).max_restarts_without_progress == 5


def test_a_termination_message_that_is_not_the_trainers_is_just_text():
    deep = pod(0, "Failed", 1, 5, message="[" * 4000)  # too deep for the JSON parser: RecursionError
    assert judge([deep], LIMITS, 0).action is Action.RESTART


def rule(name, action, exit_codes=None, conditions=(), exclude_node=False):
    document = {"name": name, "action": action, "excludeNode": exclude_node,
                "onPodConditions": [{"type": kind, "status": status} for kind, status in conditions]}  # fmt: skip
    if exit_codes is not None:
        document["onExitCodes"] = {"operator": exit_codes[0], "values": list(exit_codes[1])}
    return FailurePolicyRule.model_validate(document)


def on_node(outcome, node="n1", disruption=None):
    """`outcome` on `node`; with `disruption`, the reason of its DisruptionTarget condition."""
    conditions = frozenset({(DISRUPTION_TARGET, "True")}) if disruption else frozenset()
    return replace(outcome, node_name=node, conditions=conditions, disruption_reason=disruption or "")


EVICTED = on_node(pod(1, "Failed", 143, 5, stopping=True), disruption="EvictionByEvictionAPI")
PREEMPTED = '{"result": "Preempted", "step": 20}'
FAIL_ON_3 = rule("BadInput", "FailJob", ("In", [3]))
SIGTERM_IS_OURS = rule("SpotReclaim", "RestartGangIgnoreLimit", ("In", [143]))
ONLY_OOM_RESTARTS = rule("NotOOM", "FailJob", ("NotIn", [137]))
FLAKY_NODE = rule("FlakyNode", "RestartGang", ("In", [1]), exclude_node=True)
LIMITS_2 = GangLimits(nodes=2, max_restarts=1, max_disruptions=2)

# (case, pods, rules, restarts, disruptions, action, reason, counted as disruption, node avoided, words)
POLICY_CASES = [
    ("a rule fails the job at once", [on_node(pod(0, "Failed", 3, 5))], [FAIL_ON_3], 0, 0, Action.FAIL, "BadInput",
     False, "", "pod demo-g0-0 failed (Error, exit code 3): not retried (failurePolicy rule BadInput)"),
    ("a rule that does not match leaves the default", [pod(0, "Failed", 4, 5)], [FAIL_ON_3], 0, 0, Action.RESTART,
     None, False, "", "gang restart 1/1"),
    ("NotIn matches every other code", [pod(0, "Failed", 1, 5)], [ONLY_OOM_RESTARTS], 0, 0, Action.FAIL, "NotOOM",
     False, "", "rule NotOOM"),
    ("NotIn leaves the listed code to the defaults", [pod(0, "Failed", 137, 5)], [ONLY_OOM_RESTARTS], 0, 0,
     Action.RESTART, None, False, "", "gang restart 1/1"),
    ("the first matching rule wins", [pod(0, "Failed", 3, 5)], [rule("Any", "RestartGang"), FAIL_ON_3], 0, 0,
     Action.RESTART, "Any", False, "", "(failurePolicy rule Any); gang restart 1/1"),
    ("RestartGangIgnoreLimit restarts past maxRestarts", [pod(0, "Failed", 143, 5)], [SIGTERM_IS_OURS], 1, 0,
     Action.RESTART, "SpotReclaim", True, "", "a disruption, not counted against maxRestarts; gang restart from the "
     "last checkpoint (disruption 1/2)"),
    ("without that rule, 143 is a crash", [pod(0, "Failed", 143, 5)], [], 1, 0, Action.FAIL, "RestartLimitReached",
     False, "", "maxRestarts (1) reached"),
    ("an eviction is a disruption, and the node's", [EVICTED, pod(0, "Running")], [], 1, 0, Action.RESTART,
     "Disruption", True, "n1", "(disruption 1/2)"),
    ("a preemption by the scheduler is not the node's fault",
     [on_node(pod(1, "Failed", 143, 5), disruption="PreemptionByScheduler")], [], 0, 0, Action.RESTART, "Disruption",
     True, "", "a disruption"),
    ("the trainer's exit 80 after a SIGTERM is a disruption", [on_node(pod(0, "Failed", 80, 5, message=PREEMPTED))],
     [], 1, 0, Action.RESTART, "Disruption", True, "", "a disruption"),
    ("disruptions are capped by maxDisruptions", [EVICTED], [], 0, 2, Action.FAIL, "DisruptionLimitReached", False,
     "n1", "maxDisruptions (2) reached"),
    ("a rule can make a disruption fail the job", [EVICTED], [rule("NoEvictions", "FailJob",
     conditions=[(DISRUPTION_TARGET, "True")])], 0, 0, Action.FAIL, "NoEvictions", False, "", "rule NoEvictions"),
    ("the Job failed by the disruption rules of its podFailurePolicy, the pod gone already", [], [], 1, 0,
     Action.RESTART, "Disruption", True, "", "the gang's Job failed (PodFailurePolicy): a disruption"),
    ("a pod condition that is not there does not match", [on_node(pod(0, "Failed", 1, 5))],
     [rule("NoEvictions", "FailJob", conditions=[(DISRUPTION_TARGET, "True")])], 0, 0, Action.RESTART, None, False,
     "", "gang restart 1/1"),
    ("a rule can override a built-in final failure",
     [on_node(pod(0, "Failed", EXIT_CONFIG_ERROR, 5))], [rule("RetryConfig", "RestartGang", ("In", [78]))], 0, 0,
     Action.RESTART, "RetryConfig", False, "", "gang restart 1/1"),
    ("a hang is the node's",
     [on_node(pod(0, "Failed", EXIT_HANG, 5, message=WAITED), "n2"), on_node(pod(1, "Running"))], [], 0, 0,
     Action.RESTART, "Hang", False, "n1", "stopped advancing"),
    ("a rule's excludeNode blames the node", [on_node(pod(0, "Failed", 1, 5), "n3")], [FLAKY_NODE], 0, 0,
     Action.RESTART, "FlakyNode", False, "n3", "rule FlakyNode"),
    ("an application crash blames no node", [on_node(pod(0, "Failed", 1, 5), "n3")], [], 0, 0, Action.RESTART, None,
     False, "", "gang restart 1/1"),
]  # fmt: skip


@pytest.mark.parametrize(
    "pods, rules, restarts, disruptions, action, reason, disruption, node, words",
    [case[1:] for case in POLICY_CASES],
    ids=[case[0] for case in POLICY_CASES],
)
def test_the_failure_policy(pods, rules, restarts, disruptions, action, reason, disruption, node, words):
    job_failure = None if pods else "PodFailurePolicy"
    limits = replace(LIMITS_2, rules=tuple(rules))
    verdict = judge(pods, limits, restarts, disruptions=disruptions, job_failure=job_failure)
    assert (verdict.action, verdict.reason, verdict.disruption) == (action, reason, disruption)
    assert verdict.avoid_node == node
    assert words in verdict.message, verdict.message


def test_pod_outcome_reads_the_node_and_the_disruption_condition():
    pod_object = {
        "metadata": {"name": "demo-g0-1", "annotations": {"batch.kubernetes.io/job-completion-index": "1"},
                     "deletionTimestamp": "2026-11-30T12:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]},
    }  # fmt: skip
    outcome = pod_outcome(pod_object)
    assert (outcome.node_name, outcome.disrupted, outcome.disruption_reason) == ("n1", True, "EvictionByEvictionAPI")
    assert outcome.failed  # evicted: a failure, though the pod is being deleted


@pytest.mark.parametrize("index", ["²", "-1", "", "x"])
def test_a_pod_whose_index_is_not_ascii_digits_sorts_last_instead_of_raising(index):
    """Annotations are anyone's to write; "²".isdigit() is true, and int("²") raises."""
    pod_object = {"metadata": {"name": "forged", "annotations": {"batch.kubernetes.io/job-completion-index": index}}}
    assert pod_outcome(pod_object).index == naming.MAX_NODES


def test_a_crash_loop_is_the_run_of_failed_gangs_at_the_end_that_saved_nothing_newer():
    def gang(started, saved, ended="Failed"):
        return GangRecord(generation=0, started_from_step=started, checkpoint_step=saved, ended=ended)

    assert crash_loop_length([gang(0, 5), gang(5, 5), gang(None, None)]) == 2  # never reported: no progress known
    assert crash_loop_length([gang(0, 0), gang(0, 0, "Disrupted"), gang(0, 0)]) == 1
    assert crash_loop_length([gang(0, 0), gang(0, 0, "SpecChanged")]) == 0
    limits = replace(LIMITS, max_restarts_without_progress=3)
    crashed = [pod(0, "Failed", 1, 5)]
    assert judge(crashed, limits, 0, crash_loop=2).action is Action.RESTART
    assert judge(crashed, limits, 0, crash_loop=3).reason == "NoProgress"
    evicted = [replace(pod(0, "Failed", 137, 5), conditions=frozenset({(DISRUPTION_TARGET, "True")}))]
    assert judge(evicted, limits, 0, crash_loop=3).action is Action.RESTART  # a disruption is no crash


def test_an_ended_gangs_record_takes_the_furthest_step_rank_0_reported():
    reported = {"step": 7, "resumedFromStep": 5, "checkpointStep": 5}
    done = pod(0, "Failed", 80, 5, message='{"result": "Preempted", "step": 9}')
    record = ended_gang(3, reported, [done], "Disrupted")
    assert (record.started_from_step, record.reached_step, record.checkpoint_step) == (5, 9, 5)
    assert ended_gang(3, None, [], "Failed").reached_step is None


# The end of a traceback, as the pod launcher leaves it in the termination message (launch.with_error).
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 40, in main\n'
    "    batch = next(shards)\n"
    "ValueError: shard 7 of the training data is corrupt"
)
LAST_LINE = "ValueError: shard 7 of the training data is corrupt"
CRASH_LIMITS = replace(LIMITS, max_restarts_without_progress=3)


@pytest.mark.parametrize(
    "restarts, crash_loop, reason, says",
    [
        (0, 0, None, "pod demo-g0-1 failed (Error, exit code 1); gang restart 1/3 from the last checkpoint. Trace"),
        (3, 0, "RestartLimitReached", "maxRestarts (3) reached. Traceback"),
        (0, 3, "NoProgress", "a crash loop. Traceback"),
    ],
    ids=["a restart", "the restart limit", "a crash loop"],
)
def test_every_failure_message_ends_with_the_root_cause_pods_error(restarts, crash_loop, reason, says):
    crashed = [pod(0, "Running"), pod(1, "Failed", 1, 5, message=TRACEBACK)]
    verdict = judge(crashed, CRASH_LIMITS, restarts, crash_loop=crash_loop)
    assert verdict.reason == reason
    assert says in verdict.message and verdict.message.endswith(LAST_LINE), verdict.message


def test_the_error_in_a_trainer_summary_and_in_a_torchelastic_error_file_is_shown_as_text():
    summary = '{"result": "Hang", "step": 7, "error": "Traceback (most recent call last):\\nRuntimeError: gloo"}'
    hung = judge([pod(0, "Failed", EXIT_HANG, 5, message=summary)], LIMITS, 0)
    assert hung.message.endswith(
        '. {"result": "Hang", "step": 7}\nTraceback (most recent call last):\nRuntimeError: gloo'
    )
    # A script's own torchrun, or its @record, wrote TORCHELASTIC_ERROR_FILE (the termination message) itself.
    elastic = (
        '{"message": {"message": "ValueError: shard 7", "extraInfo": {"py_callstack": "Traceback (most recent call '
        'last):\\nValueError: shard 7\\n", "timestamp": "1764500000"}, "errorCode": 1}}'
    )
    own = judge([pod(0, "Failed", 1, 5, message=elastic)], LIMITS, 0)
    assert own.message.endswith("from the last checkpoint. Traceback (most recent call last):\nValueError: shard 7")


NON_FINITE = '{"result": "NonFinite", "firstNonFiniteStep": 9, "step": 10, "lastFiniteCheckpointStep": 5}'


@pytest.mark.parametrize(
    "exit_code, message, says",
    [
        (EXIT_NON_FINITE, NON_FINITE, "loss not finite at step 9 (the last finite checkpoint: step 5), not retried"),
        (1, NON_FINITE, "loss not finite at step 9 (the last finite checkpoint: step 5), not retried"),  # torchrun's 1
        (EXIT_NON_FINITE, '{"result": "NonFinite", "step": 12, "checkpointStep": 10}',
         "loss not finite at step 12 (the last finite checkpoint: step 10)"),
        (EXIT_NON_FINITE, '{"result": "NonFinite", "step": 3, "checkpointStep": 0}',
         "loss not finite at step 3 (no checkpoint before it)"),
        (EXIT_NON_FINITE, "", "failed (Error, exit code 79): loss not finite, not retried"),
    ],
    ids=["exit 79", "reported under torchrun", "checkpointStep", "no checkpoint yet", "no summary"],
)  # fmt: skip
def test_a_loss_that_is_not_finite_fails_the_job_at_once_and_says_where(exit_code, message, says):
    verdict = judge([pod(0, "Failed", exit_code, 5, message=message), pod(1, "Running")], LIMITS, 0)
    assert (verdict.action, verdict.reason, verdict.exit_code) == (Action.FAIL, NON_FINITE_LOSS, EXIT_NON_FINITE)
    assert says in verdict.message, verdict.message


def test_a_rule_may_retry_a_loss_that_is_not_finite_and_the_message_still_says_so():
    limits = replace(LIMITS, rules=(rule("RetryDivergence", "RestartGang", ("In", [EXIT_NON_FINITE])),))
    verdict = judge([pod(0, "Failed", EXIT_NON_FINITE, 5, message=NON_FINITE)], limits, 0)
    assert (verdict.action, verdict.reason) == (Action.RESTART, "RetryDivergence")
    assert "loss not finite at step 9 (the last finite checkpoint: step 5) (failurePolicy rule RetryDivergence)" in (
        verdict.message
    )


@pytest.mark.parametrize(
    "summary",
    [
        '{"result": "Succeeded", "step": 40, "maxSteps": 40, "loss": null, "lossFinite": false, "checkpointStep": 40}',
        '{"result": "Succeeded", "step": 40, "maxSteps": 40, "loss": NaN}',
    ],
    ids=["lossFinite false", "a NaN loss"],
)
def test_a_gang_whose_rank_0_finished_with_a_loss_that_is_not_finite_did_not_succeed(summary):
    finished = [pod(0, "Succeeded", 0, 5, message=summary), pod(1, "Succeeded", 0, 5)]
    verdict = judge(finished, LIMITS, 0)
    assert (verdict.action, verdict.reason, verdict.exit_code) == (Action.FAIL, NON_FINITE_LOSS, EXIT_NON_FINITE)
    assert verdict.root_cause.index == 0
    assert "pod demo-g0-0 finished (Completed, exit code 0): loss not finite at step 40" in verdict.message
    assert judge(finished, LIMITS, 0, job_complete=True).action is Action.FAIL  # the Job controller's word too
    healthy = [pod(0, "Succeeded", 0, 5, message='{"result": "Succeeded", "step": 40, "loss": 1.2}'), finished[1]]
    assert judge(healthy, LIMITS, 0).action is Action.SUCCEED


def test_the_disrupted_pod_is_the_cause_of_an_eviction_not_the_first_rank_to_stop_for_it():
    """Rank 1 is evicted; every rank saves and exits 80, rank 0 first. The eviction is rank 1's, and so is
    its node: the one a node-caused disruption excludes."""
    stopped_first = on_node(pod(0, "Failed", EXIT_PREEMPTED, 5, message=PREEMPTED), "n1")
    evicted = on_node(pod(1, "Failed", EXIT_PREEMPTED, 6, stopping=True, message=PREEMPTED), "n2",
                      disruption="TerminationByKubelet")  # fmt: skip
    for gang in ([stopped_first, evicted], [stopped_first, replace(evicted, phase="Running", exit_code=None)]):
        verdict = judge(gang, LIMITS_2, 0)
        assert (verdict.action, verdict.reason, verdict.disruption) == (Action.RESTART, "Disruption", True)
        assert (verdict.root_cause.name, verdict.avoid_node) == ("demo-g0-1", "n2")
        assert verdict.message.startswith("pod demo-g0-1 was disrupted on node n2 (TerminationByKubelet"), verdict
    # Without an evicted pod, exit 80 is the trainer's own SIGTERM: the first to stop is the cause, no node blamed.
    alone = judge([stopped_first, on_node(pod(1, "Failed", EXIT_PREEMPTED, 6, message=PREEMPTED), "n2")], LIMITS_2, 0)
    assert (alone.root_cause.name, alone.avoid_node) == ("demo-g0-0", "")
    # A rank that crashed on its own is still the cause, evicted peer or not.
    crashed = on_node(pod(0, "Failed", 1, 4), "n1")
    assert judge([crashed, evicted], LIMITS_2, 0).root_cause.name == "demo-g0-0"


def test_restarts_in_quick_succession_back_off_doubling_up_to_a_cap_and_a_gang_that_ran_resets_it():
    backoff = RestartBackoff(initialSeconds=10, maxSeconds=60, resetAfterSeconds=600)
    quick, waits = 0, []
    for _ in range(6):
        wait, quick = restart_backoff(backoff, quick, ran_seconds=5)
        waits.append(wait)
    assert waits == [0, 10, 20, 40, 60, 60] and quick == 6  # the first restart goes at once, as the kubelet's
    assert restart_backoff(backoff, quick, ran_seconds=600) == (0, 0)
    assert restart_backoff(RestartBackoff(initialSeconds=0), 5, ran_seconds=1) == (0, 6)
    assert restart_backoff(backoff, 10_000, ran_seconds=1) == (60, 10_001)
