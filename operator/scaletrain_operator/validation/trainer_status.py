"""What of a job's own script's pushed report status.progress takes. The report is the Kubeflow Trainer status
protocol's (KEP-2779), which transformers' KubeflowCallback and the Kubeflow SDK's update_trainjob_status() post:

    {"trainerStatus": {"lastUpdatedTime": RFC 3339, "progressPercentage": 0-100,
                       "estimatedRemainingSeconds": int, "metrics": [{"name": str, "value": str}]}}

Its fields become the ones rank 0's /progress answer has (wire.PROGRESS_FIELDS), and then go through the same
checks (progress_answer.progress_of): a report is the tenant's, and whatever it holds, the status patch made
from it is never refused."""

from __future__ import annotations

import math
from typing import Any

from scaletrain_trainer.contract import wire

from .progress_answer import METRIC_NAME, Unreadable, json_object, progress_of

# The metrics a progress field of its own stands for, by the names KubeflowCallback gives them.
AS_FIELDS = {"current_step": "step", "total_steps": "maxSteps", "loss": "loss", "eval_loss": "evalLoss"}
INTEGER_FIELDS = {field.name for field in wire.PROGRESS_FIELDS if field.kind == "integer"}
MAX_REPORT_BYTES = 64 * 1024  # a real report is a few hundred bytes


def parse_trainer_status(body: bytes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """status.progress from a pushed report's body: its known fields, each only when of its type and range;
    and the names of the metrics beyond the MAX_METRICS that status.progress.metrics holds, which it leaves
    out. Which are kept is a choice that stays the same from report to report: the first MAX_METRICS in name
    order (HF's Trainer reports every number it ever logged, about a dozen, more with compute_metrics).
    Unreadable when the body is not a JSON object with a trainerStatus object."""
    status = json_object(body, MAX_REPORT_BYTES, "a report").get("trainerStatus")
    if not isinstance(status, dict):
        raise Unreadable('not a report: a JSON object with a "trainerStatus" object is expected')
    answer: dict[str, Any] = {}
    for name, field in (
        ("lastUpdatedTime", "updatedAt"),
        ("progressPercentage", "progressPercentage"),
        ("estimatedRemainingSeconds", "etaSeconds"),
    ):
        if name in status:
            answer[field] = status[name]
    named: dict[str, float] = {}
    for name, number in _metrics(status.get("metrics")):
        if name in AS_FIELDS:
            field = AS_FIELDS[name]
            answer[field] = int(number) if field in INTEGER_FIELDS and number.is_integer() else number
        elif math.isfinite(number):
            named[name] = number
    if named:
        answer["metrics"] = dict(list(named.items())[: wire.MAX_METRICS])
    return progress_of(answer), tuple(list(named)[wire.MAX_METRICS :])


def _metrics(metrics: Any) -> list[tuple[str, float]]:
    """The report's metrics that are numbers (a value is a string, as the protocol has it, or a number), in
    name order, whatever order the script sends them in."""
    if not isinstance(metrics, list):
        return []
    numbers = {}
    for metric in metrics:
        if not isinstance(metric, dict) or not isinstance(name := metric.get("name"), str):
            continue
        value = metric.get("value")
        if isinstance(value, bool) or not isinstance(value, str | int | float) or not METRIC_NAME.match(name):
            continue
        try:
            numbers[name] = float(value)
        except (ValueError, OverflowError):  # a value that is not a number: nothing the status could show
            continue
    return sorted(numbers.items())
