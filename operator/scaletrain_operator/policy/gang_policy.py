"""The gang policy: what the outcomes of one gang's pods mean for the whole ScaleTrainJob.

One dead rank breaks every collective, so the pods of a gang run, succeed and fail together. This is
the one place that says what a set of pod outcomes means: keep running, succeeded, restart the gang
from the last checkpoint, or fail the job with a reason, and which pod is the root cause. The
operator (controller/reconcile.py) and `scaletrain run-local` (local/gang.py) both ask `judge`, and
read pods through `pod_outcome`, so they cannot disagree.

What a failure means comes from spec.failurePolicy.rules, tried in order against the root-cause pod,
then from the built-in defaults the rules can override (BUILT_IN_MEANINGS, docs/api.md): a config or
write error, or checkpoint storage that refused the trainer, fails the job, and so does a loss that is not
finite (exit 79, or a rank 0 that finished with `lossFinite: false`: a divergence repeats from the same
checkpoint, and a diverged run is no success); a
disruption (the pod's DisruptionTarget condition: evicted, preempted, its node lost; or the trainer's exit
80 after a SIGTERM from outside) restarts the gang without using maxRestarts; a hang, and anything else,
restarts it counted. Failures that are the node's (a hang, a
disruption of the node, a rule's excludeNode) name the node for the next gangs to avoid.

The root cause is the pod that finished first, then the lowest completion index: a dead rank makes
its peers fail right after it, so the first to fail is the likely culprit. A stuck rank is the
exception: its peers' hang watchdogs stop them while they wait on it (their termination messages say
so: exit_codes.waited_on_peers), and it may never finish at all. Such victims are never the root
cause while another failed pod is not one, or while a pod still runs. Nor are the ranks that stopped
after a checkpoint (exit 80) because a peer was evicted: the pod with the DisruptionTarget condition is
the cause, and its node the one to blame.

Every failure's message ends with what the root-cause pod's termination message says (failure_text): the
end of a traceback (launch.py puts it there), the trainer's summary, or the container log's tail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from scaletrain_trainer.contract.exit_codes import (
    ERROR_FIELD,
    EXIT_CODES,
    EXIT_NON_FINITE,
    FINAL,
    HANG_RESULT,
    NON_FINITE_RESULT,
    PREEMPTED_RESULT,
    elastic_error_text,
    result_of,
    summary_of,
    torchrun_root_cause,
    waited_on_peers,
)

from ..api import naming
from ..api.conditions import (
    CONTAINER_COMPLETED,
    CONTAINER_ERROR,
    DEADLINE_EXCEEDED,
    DISRUPTED_JOB,
    DISRUPTION,
    DISRUPTION_LIMIT_REACHED,
    DISRUPTION_TARGET,
    NO_PROGRESS,
    NON_FINITE_LOSS,
    PREEMPTION_BY_SCHEDULER,
    RESTART_LIMIT_REACHED,
    EventReason,
    GangEnding,
    PodPhase,
)
from ..api.job_status import MAX_GANG_RECORDS, GangRecord
from ..api.spec import FailurePolicyRule, RestartBackoff, ScaleTrainJobSpec
from ..api.timestamps import parse_timestamp
from ..validation.progress_answer import final_progress
from .pods import disruption_target

NOT_THE_NODES_FAULT = frozenset({PREEMPTION_BY_SCHEDULER})  # DisruptionTarget reasons that say nothing of the node
RuleAction = Literal["FailJob", "RestartGang", "RestartGangIgnoreLimit"]
# Why a job fails: DeadlineExceeded, RestartLimitReached, DisruptionLimitReached, NoProgress, NonFiniteLoss,
# a final trainer result (exit_codes.FINAL), or the name of the failurePolicy rule that failed it.
GangFailureReason = str
# The job's exit code (run-local's) for a failure that is not a trainer result's own name.
EXIT_CODE_OF_REASON: dict[GangFailureReason, int] = {**EXIT_CODES, NON_FINITE_LOSS: EXIT_NON_FINITE}
# The built-in meanings, as docs/api.md lists them; failurePolicy.rules come first and may override each.
BUILT_IN_MEANINGS: dict[str, RuleAction] = {
    **{result: "FailJob" for result in FINAL},  # exit 78, 74, 77: no restart can fix them
    NON_FINITE_LOSS: "FailJob",  # a divergence from the same checkpoint, with the same data, repeats
    DISRUPTION: "RestartGangIgnoreLimit",  # DisruptionTarget, or exit 80 (Preempted)
    HANG_RESULT: "RestartGang",  # exit 75, a rank that stopped advancing, or the gang's silence
}


class Action(Enum):
    KEEP_RUNNING = "KeepRunning"
    SUCCEED = "Succeed"
    RESTART = "Restart"  # the whole gang, as the next generation, from the last checkpoint
    FAIL = "Fail"


@dataclass(frozen=True)
class GangLimits:
    """What the policy needs from the spec."""

    nodes: int
    max_restarts: int
    active_deadline_seconds: int | None = None
    max_disruptions: int = naming.DEFAULT_MAX_DISRUPTIONS
    rules: tuple[FailurePolicyRule, ...] = ()
    max_restarts_without_progress: int | None = None

    @classmethod
    def of(cls, spec: ScaleTrainJobSpec) -> GangLimits:
        return cls(
            spec.nodes,
            spec.max_restarts,
            spec.active_deadline_seconds,
            spec.max_disruptions,
            tuple(spec.failure_policy.rules),
            spec.crash_loop_limit,
        )


@dataclass(frozen=True)
class PodOutcome:
    """One pod of the gang, as the kubelet (or run-local) reports it."""

    name: str
    index: int  # the completion index: the node rank
    phase: PodPhase
    exit_code: int | None = None
    reason: str = ""  # of the terminated container (Error, OOMKilled, ...) or of the pod
    message: str = ""  # the container's termination message
    finished_at: datetime | None = None
    stopping: bool = False  # being deleted: stopped (a suspension, a preemption), not crashed
    node_name: str = ""
    conditions: frozenset[tuple[str, str]] = frozenset()  # (type, status) of the pod's conditions
    disruption_reason: str = ""  # of its DisruptionTarget condition, when True

    @property
    def disrupted(self) -> bool:
        """Evicted, preempted, or on a lost node, as the API server or the node says (not the operator's
        own deletion of a gang, which sets no such condition)."""
        return (DISRUPTION_TARGET, "True") in self.conditions

    @property
    def failed(self) -> bool:
        return self.phase == PodPhase.FAILED and (not self.stopping or self.disrupted)

    @property
    def waited_on_peers(self) -> bool:
        return waited_on_peers(self.message)

    @property
    def preempted(self) -> bool:
        """Stopped after a checkpoint for a SIGTERM from outside (exit 80): its own, or a peer's."""
        return result_of(self.exit_code, self.message) == PREEMPTED_RESULT

    @property
    def named_failure(self) -> bool:
        """Failed with a result the trainer named (a write error, a config error, a loss not finite, a hang),
        not one a SIGTERM from outside explains."""
        return self.failed and result_of(self.exit_code, self.message) not in (None, PREEMPTED_RESULT)

    @property
    def finished_diverged(self) -> bool:
        """Succeeded, but its final summary says the loss is not finite."""
        return self.phase == PodPhase.SUCCEEDED and final_progress(self.message).get("lossFinite") is False

    @property
    def non_finite(self) -> bool:
        """The trainer's NonFinite (exit 79, or its result under torchrun), or a diverged finish."""
        return result_of(self.exit_code, self.message) == NON_FINITE_RESULT or self.finished_diverged

    def describe(self) -> str:
        code = f", exit code {self.exit_code}" if self.exit_code is not None else ""
        if self.disrupted:
            where = f" on node {self.node_name}" if self.node_name else ""
            return f"pod {self.name} was disrupted{where} ({self.disruption_reason or DISRUPTION_TARGET}{code})"
        if self.phase == PodPhase.RUNNING:
            return f"pod {self.name} stopped advancing (its peers timed out waiting on it)"
        if self.phase == PodPhase.SUCCEEDED:
            return f"pod {self.name} finished ({self.reason or CONTAINER_COMPLETED}{code})"
        return f"pod {self.name} failed ({self.reason or PodPhase.FAILED}{code})"


def failure_text(termination_message: str) -> str:
    """What a termination message tells people of a failure: the exception the pod launcher recorded (the
    summary's `error`, after the rest of the summary), a torchelastic error file's traceback (a script's own
    @record writing to the termination message path), the first failed worker's entry of torchrun's failure
    table (a script's own torchrun, the end of its log), else the message as it is: the trainer's summary, a
    script's own words, or with FallbackToLogsOnError the log's tail."""
    document = summary_of(termination_message)
    if (traceback := elastic_error_text(document)) is not None:
        return traceback
    error = document.get(ERROR_FIELD)
    if not isinstance(error, str):
        return torchrun_root_cause(termination_message) or termination_message.strip()
    rest = {key: value for key, value in document.items() if key != ERROR_FIELD}
    return f"{json.dumps(rest)}\n{error.strip()}" if rest else error.strip()


def non_finite_text(termination_message: str) -> str:
    """Says "loss not finite at step N (the last finite checkpoint: step C)", as far as the trainer's summary
    tells them: the first non-finite step (`firstNonFiniteStep`, else its `step`), and the last checkpoint
    saved before it (`lastFiniteCheckpointStep`, else `checkpointStep`; 0: none)."""
    summary = summary_of(termination_message)
    step = _first_step(summary, ("firstNonFiniteStep", "step"))
    checkpoint = _first_step(summary, ("lastFiniteCheckpointStep", "checkpointStep"))
    said = "loss not finite" + (f" at step {step}" if step is not None else "")
    if checkpoint is None:
        return said
    return said + (f" (the last finite checkpoint: step {checkpoint})" if checkpoint else " (no checkpoint before it)")


def _first_step(summary: Mapping[str, Any], keys: Sequence[str]) -> int | None:
    steps = (summary.get(key) for key in keys)
    return next((step for step in steps if isinstance(step, int) and not isinstance(step, bool) and step >= 0), None)


def pod_outcome(pod: Mapping[str, Any]) -> PodOutcome:
    """A pod object (metadata and status, as the API server or run-local's executor reports it) as the
    gang policy sees it: its phase, and its trainer container's exit."""
    metadata, status = pod["metadata"], pod.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    disruption = disruption_target(pod)
    index = (metadata.get("annotations") or {}).get(naming.COMPLETION_INDEX_ANNOTATION, "")
    terminated = next(
        (
            (container.get("state") or {}).get("terminated")
            for container in status.get("containerStatuses") or []
            if container.get("name") == naming.TRAINER_CONTAINER
        ),
        None,
    )
    outcome = PodOutcome(
        name=metadata["name"],
        index=naming.MAX_NODES if (number := naming.whole_number(index)) is None else number,
        phase=status.get("phase", PodPhase.PENDING),
        reason=status.get("reason", ""),
        message=status.get("message", ""),
        stopping=metadata.get("deletionTimestamp") is not None,
        node_name=(pod.get("spec") or {}).get("nodeName") or "",
        conditions=frozenset((str(c.get("type")), str(c.get("status"))) for c in conditions),
        disruption_reason=disruption.get("reason", ""),
    )
    if not terminated:
        return outcome
    finished = terminated.get("finishedAt")
    return replace(
        outcome,
        exit_code=terminated.get("exitCode"),
        reason=terminated.get("reason", CONTAINER_ERROR),
        message=terminated.get("message", ""),
        finished_at=parse_timestamp(finished) if finished else None,
    )


@dataclass(frozen=True)
class Verdict:
    action: Action
    message: str = ""
    reason: GangFailureReason | None = None  # why the job fails (with Action.FAIL); with a restart, the rule's name
    root_cause: PodOutcome | None = None  # the pod that caused a restart or failure, when one did
    disruption: bool = False  # a restart counted in status.disruptions, not against maxRestarts
    avoid_node: str = ""  # the node the failure was blamed on, for failurePolicy.excludeNodes

    @property
    def exit_code(self) -> int:
        """The job's exit code, as run-local returns it: 0, the code of a final trainer failure (78 for a
        config error, 79 for a loss not finite, also one a worker reported under torchrun's exit code 1),
        the root-cause pod's code, or 1."""
        if self.action is Action.SUCCEED:
            return 0
        if self.reason in EXIT_CODE_OF_REASON:
            return EXIT_CODE_OF_REASON[self.reason]
        if self.root_cause is not None and self.root_cause.exit_code:
            return self.root_cause.exit_code
        return 1


def root_cause(pods: Sequence[PodOutcome]) -> PodOutcome | None:
    """The failed pod that finished first (then the lowest index); pods being stopped do not count. Pods
    that only followed another are passed over for it: when every failed pod stopped after a checkpoint
    for a peer's eviction (exit 80 with no DisruptionTarget of its own), the disrupted pod, even one still
    terminating; when every failed pod waited on its peers, a pod still running (even one being stopped) is
    the one they waited on."""
    failed = [pod for pod in pods if pod.failed]
    if not failed:
        return None
    disrupted = [pod for pod in pods if pod.disrupted and pod.phase != PodPhase.SUCCEEDED]
    culprits = (
        [pod for pod in failed if not pod.waited_on_peers and not (disrupted and pod.preempted and not pod.disrupted)]
        or disrupted
        or [pod for pod in pods if pod.phase == PodPhase.RUNNING and not pod.stopping]
        # The Job controller may be stopping the pod they waited on already: the failed Job ends its pods.
        or [pod for pod in pods if pod.phase == PodPhase.RUNNING]
        or failed
    )
    return min(culprits, key=lambda pod: (pod.finished_at is None, pod.finished_at or datetime.min, pod.index))


@dataclass(frozen=True)
class Meaning:
    """What a failure means: the action, the name it goes by (a rule's, or a built-in meaning's), and
    whether it is the node's fault."""

    action: RuleAction
    name: str | None = None
    nodes_fault: bool = False
    rule: bool = False  # a failurePolicy rule's, not a built-in meaning


def meaning(cause: PodOutcome | None, job_failure: str | None, rules: Sequence[FailurePolicyRule]) -> Meaning:
    """The first rule that matches the root-cause pod, else the built-in meaning (BUILT_IN_MEANINGS). A
    gang that ended with no pod to blame (its Job deleted, or gone silent: `job_failure`) has only the
    built-in meaning."""
    if cause is not None:
        for rule in rules:
            if rule_matches(rule, cause):
                return Meaning(rule.action, rule.name, rule.exclude_node, rule=True)
    # The disrupted pod is gone already; Kueue took the gang's quota back (it suspended the Job); or another
    # Workload took the gang (not the job's doing).
    if cause is None and job_failure in (DISRUPTED_JOB, EventReason.PREEMPTED, EventReason.FOREIGN_WORKLOAD):
        return Meaning(BUILT_IN_MEANINGS[DISRUPTION], DISRUPTION)
    if cause is None:
        return Meaning("RestartGang", job_failure, job_failure == HANG_RESULT)
    result = result_of(cause.exit_code, cause.message)
    if result in FINAL:
        return Meaning(BUILT_IN_MEANINGS[result], result)
    if cause.non_finite:
        return Meaning(BUILT_IN_MEANINGS[NON_FINITE_LOSS], NON_FINITE_LOSS)
    if cause.disrupted or result == PREEMPTED_RESULT:
        nodes_fault = cause.disrupted and cause.disruption_reason not in NOT_THE_NODES_FAULT
        return Meaning(BUILT_IN_MEANINGS[DISRUPTION], DISRUPTION, nodes_fault)
    if result == HANG_RESULT or cause.phase == PodPhase.RUNNING:  # a rank that stopped advancing is still running
        return Meaning(BUILT_IN_MEANINGS[HANG_RESULT], HANG_RESULT, nodes_fault=True)
    return Meaning("RestartGang")


def rule_matches(rule: FailurePolicyRule, pod: PodOutcome) -> bool:
    if rule.on_exit_codes is not None:
        listed = pod.exit_code in rule.on_exit_codes.values
        if pod.exit_code is None or listed != (rule.on_exit_codes.operator == "In"):
            return False
    return all((match.type, match.status) in pod.conditions for match in rule.on_pod_conditions)


# A gang that ended with no pod to blame, in words, where "the gang's Job failed (REASON)" would mislead.
GANG_ENDINGS = {
    EventReason.PREEMPTED: "Kueue preempted the gang (it suspended the gang's Job to free its quota)",
    EventReason.FOREIGN_WORKLOAD: "the gang was placed through another Workload than the job's",
}


def judge(
    pods: Sequence[PodOutcome],
    limits: GangLimits,
    restarts: int,
    *,
    disruptions: int = 0,
    crash_loop: int = 0,
    job_complete: bool = False,
    job_failure: str | None = None,
    suspended: bool = False,
) -> Verdict:
    """What the gang's pods mean for the job, after `restarts` counted gang restarts and `disruptions`.
    `crash_loop`: the gangs in a row, this one included, that failed without a newer checkpoint than
    they started from (`crash_loop_length`).

    `job_complete` and `job_failure` are the Job controller's word on the gang's Job (run-local's
    deadline timer speaks for it there), or the operator's (a Job deleted by hand, a silent gang).
    While `suspended`, failed pods were stopped by the suspension, not crashed, but for those whose trainer
    named a failure (`named_failure`: a checkpoint it could not write on its way out, say)."""
    succeeded = {pod.index for pod in pods if pod.phase == PodPhase.SUCCEEDED}
    if job_complete or len(succeeded) >= limits.nodes:
        cause = next((pod for pod in pods if pod.index == 0 and pod.finished_diverged), None)
        if cause is None:
            return Verdict(Action.SUCCEED, f"all {limits.nodes} nodes finished")
    elif job_failure == DEADLINE_EXCEEDED:
        return Verdict(
            Action.FAIL, f"activeDeadlineSeconds ({limits.active_deadline_seconds}) passed", DEADLINE_EXCEEDED
        )
    else:
        cause = root_cause([pod for pod in pods if not suspended or pod.named_failure])
        if cause is None and job_failure is None:
            return Verdict(Action.KEEP_RUNNING)
    ended = GANG_ENDINGS.get(job_failure or "", f"the gang's Job failed ({job_failure})")
    what = cause.describe() if cause is not None else ended
    found = finding(cause)
    meant = meaning(cause, job_failure, limits.rules)
    by_rule = f" (failurePolicy rule {meant.name})" if meant.rule else ""
    avoid = cause.node_name if cause is not None and meant.nodes_fault else ""
    if meant.action == "FailJob":
        message = f"{what}: {f'{found}, ' if found else ''}not retried{by_rule}"
        return Verdict(Action.FAIL, told(message, cause), meant.name, cause, avoid_node=avoid)
    what += f": {found}" if found else ""
    if meant.action == "RestartGangIgnoreLimit":
        if disruptions >= limits.max_disruptions:
            message = f"{what}{by_rule}; maxDisruptions ({limits.max_disruptions}) reached"
            return Verdict(Action.FAIL, told(message, cause), DISRUPTION_LIMIT_REACHED, cause, avoid_node=avoid)
        message = (
            f"{what}{by_rule}: a disruption, not counted against maxRestarts; gang restart from the last "
            f"checkpoint (disruption {disruptions + 1}/{limits.max_disruptions})"
        )
        return Verdict(Action.RESTART, told(message, cause), meant.name, cause, disruption=True, avoid_node=avoid)
    crash_loop_limit = limits.max_restarts_without_progress
    if crash_loop_limit is not None and crash_loop >= crash_loop_limit:
        message = (
            f"{what}{by_rule}; {crash_loop} gangs in a row failed without a checkpoint newer than the one they "
            f"started from (maxRestartsWithoutProgress {crash_loop_limit}): a crash loop"
        )
        return Verdict(Action.FAIL, told(message, cause), NO_PROGRESS, cause, avoid_node=avoid)
    if restarts >= limits.max_restarts:
        message = f"{what}{by_rule}; maxRestarts ({limits.max_restarts}) reached"
        return Verdict(Action.FAIL, told(message, cause), RESTART_LIMIT_REACHED, cause, avoid_node=avoid)
    message = f"{what}{by_rule}; gang restart {restarts + 1}/{limits.max_restarts} from the last checkpoint"
    return Verdict(Action.RESTART, told(message, cause), meant.name, cause, avoid_node=avoid)


def finding(cause: PodOutcome | None) -> str:
    """What the trainer found, when the root-cause pod's exit names it: a loss not finite, with its step and
    the last finite checkpoint, or a final result (exit_codes.FINAL)."""
    if cause is None:
        return ""
    if cause.non_finite:
        return non_finite_text(cause.message)
    result = result_of(cause.exit_code, cause.message)
    return FINAL.get(result, "") if result is not None else ""


def told(message: str, cause: PodOutcome | None) -> str:
    """`message`, ending with what the root-cause pod's termination message says (failure_text): the end
    is what a bounded status message or Event keeps most of (controller/status.bounded)."""
    said = failure_text(cause.message) if cause is not None else ""
    return f"{message}. {said}" if said else message


def ended_gang(
    gang_generation: int, reported: Mapping[str, Any] | None, pods: Sequence[PodOutcome], ended: GangEnding
) -> GangRecord:
    """The record of a gang that ended: from rank 0's last progress report of it (`reported`, /progress's
    fields; None if it never reported) and the step rank 0's termination message gives, if any."""
    reported = reported or {}
    rank_0 = next((pod for pod in pods if pod.index == 0), None)
    steps = [reported.get("step"), final_progress(rank_0.message).get("step") if rank_0 is not None else None]
    reached = [step for step in steps if isinstance(step, int)]
    return GangRecord(
        generation=gang_generation,
        started_from_step=reported.get("resumedFromStep"),
        reached_step=max(reached) if reached else None,
        checkpoint_step=reported.get("checkpointStep"),
        ended=ended,
    )


def crash_loop_length(gangs: Sequence[GangRecord]) -> int:
    """How many gangs in a row, up to the last, failed without leaving a checkpoint newer than the one they
    started from. A disruption or a spec change ends the run of them: neither is the job's crash."""
    count = 0
    for gang in reversed(gangs):
        if gang.ended != GangEnding.FAILED or gang.progressed:
            break
        count += 1
    return count


def recomputed_steps(previous: GangRecord | None, ended: GangRecord) -> int:
    """The steps `ended` trained again: those `previous` had reached past the checkpoint `ended` resumed
    from (0 when either is unknown)."""
    if previous is None or previous.reached_step is None or ended.started_from_step is None:
        return 0
    return max(0, previous.reached_step - ended.started_from_step)


def kept(gangs: Sequence[GangRecord]) -> list[GangRecord]:
    return list(gangs)[-MAX_GANG_RECORDS:]


def restart_backoff(backoff: RestartBackoff, quick_before: int, ran_seconds: float) -> tuple[int, int]:
    """How long the next gang waits after a restart or a disruption (spec.restartBackoff), and the restarts
    in quick succession so far, this one included. As the kubelet backs off a container that keeps crashing:
    a gang that ran resetAfterSeconds ends the run of quick restarts, the first quick restart goes at once,
    and from the second (`quick_before`: those before it) the next gang waits initialSeconds, doubled for
    each, up to maxSeconds."""
    if ran_seconds >= backoff.reset_after_seconds:
        return 0, 0
    quick = quick_before + 1
    if quick < 2 or backoff.initial_seconds == 0:
        return 0, quick
    return min(backoff.initial_seconds * 2 ** min(quick - 2, 32), backoff.max_seconds), quick
