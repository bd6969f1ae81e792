"""What of rank 0's progress answer (its /progress body, or its termination message after it succeeded) status.progress
takes: only the known fields, each of its type and range (contract/wire.py defines them), so that a status patch is
never refused. A non-finite number never gets through: Go's JSON decoder, and so the API server, refuses NaN in a
status patch."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from scaletrain_operator.api.timestamps import parse_timestamp, timestamp
from scaletrain_trainer.contract import wire

# The fields rank 0 reports, by name (contract/wire.py defines each: its type and range).
REPORTED = {field.name: field for field in wire.REPORTED}
SET_ASIDE_NAME = re.compile(wire.SET_ASIDE_NAME)
METRIC_NAME = re.compile(wire.METRIC_NAME)
NAMED_NUMBER = wire.ProgressField("metric", "number", "trainer", "One of the named numbers.")


class Unreadable(Exception):
    """The endpoint answered, or failed to, in a way that is not progress."""


def json_object(body: bytes, limit: int, what: str) -> dict[str, Any]:
    """`body` (`what`: "a report", "a call") as the JSON object it must be, of at most `limit` bytes; else
    Unreadable, saying why."""
    if len(body) > limit:
        raise Unreadable(f"{what} over {limit} bytes")
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise Unreadable(f"not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise Unreadable(f"{what}: a JSON object is expected")
    return raw


def parse_progress(body: bytes) -> dict[str, Any]:
    """status.progress from a /progress body: a JSON object, of which only the known fields are kept,
    each only when it is of its type and range (status.progress's schema, so that the status patch is
    never refused). A loss that is not finite, or that the trainer says is not (`lossFinite: false`, its
    loss then null), is left out and reported as `lossFinite: false`."""
    return progress_of(json.loads(body))


def progress_of(raw: Any) -> dict[str, Any]:
    """status.progress from a decoded answer (parse_progress), or from a script's pushed report translated
    into the same fields (trainer_status.py)."""
    if not isinstance(raw, dict):
        raise Unreadable(f"a JSON {type(raw).__name__}, not an object")
    progress = {key: raw[key] for key in REPORTED if key in raw and fits(REPORTED[key], raw[key])}
    loss = raw.get("loss")
    diverged = raw.get("lossFinite") is False or (isinstance(loss, float) and not math.isfinite(loss))
    if diverged:
        progress.pop("loss", None)
        progress["lossFinite"] = False
    return progress


def status_patch(
    progress: dict[str, Any], generation: int, stored: Mapping[str, Any], read_at: datetime | None = None
) -> dict[str, Any]:
    """`progress`, reported by rank 0 of gang `generation` and read at `read_at` (None: from its termination
    message), as the operator writes it over `stored` (the status.progress it was decided from): a merge patch
    that replaces it whole, with timestamps in RFC 3339 and the numbers kubectl shows rounded to SHOWN_DIGITS
    significant digits (metrics.jsonl keeps them whole). Its nulls remove every field this answer lacks, and
    every name of a map (metrics) that this answer's map lacks: a merge patch merges maps, and names that
    piled up from report to report would pass the schema's MAX_METRICS and have every later status write
    refused. The patch is sent only onto the version `stored` is of (Cluster.patch_status), so that it is
    exact."""
    patch = {field.name: None for field in wire.PROGRESS_FIELDS} | progress | {"generation": generation}
    if read_at is not None:
        patch["readAt"] = timestamp(read_at)
    for field in wire.PROGRESS_FIELDS:
        if field.kind == "named numbers":
            held = stored.get(field.name) if isinstance(stored.get(field.name), Mapping) else {}
            named = {name: shown(value) for name, value in (patch[field.name] or {}).items()}
            patch[field.name] = ({name: None for name in held} | named) if named else None
        elif patch[field.name] is None:
            continue
        elif field.kind == "timestamp":
            patch[field.name] = timestamp(parse_timestamp(patch[field.name]).astimezone(timezone.utc))
        elif field.rounded:
            patch[field.name] = shown(patch[field.name])
    return patch


def shown(number: float) -> float:
    """`number` rounded to SHOWN_DIGITS significant digits, as kubectl shows it."""
    rounded = float(f"{number:.{wire.SHOWN_DIGITS}g}")
    # Near the largest float, rounding up overflows: the status could not hold that, and the field would be
    # left out of the patch, keeping an older answer's value beside this one's.
    return rounded if math.isfinite(rounded) else number


def final_progress(termination_message: str) -> dict[str, Any]:
    """status.progress from rank 0's termination message after it succeeded: the trainer's summary
    (its `result`, `step`, `maxSteps`, `loss`, ...), kept and checked as a /progress answer
    is. {} when the message holds no progress (a custom command's, or none)."""
    try:
        return parse_progress(termination_message.encode())
    except (Unreadable, ValueError, RecursionError):  # the message is the tenant's too
        return {}


def fits(field: wire.ProgressField, value: Any) -> bool:
    """Whether `value` is of `field`'s type and within its range."""
    if field.kind == "set-aside names":
        names = value if isinstance(value, list) and len(value) <= wire.MAX_SET_ASIDE else [None]
        return all(
            isinstance(name, str) and len(name) <= wire.MAX_TEXT and SET_ASIDE_NAME.match(name) for name in names
        )
    if field.kind == "named numbers":
        return (
            isinstance(value, dict)
            and len(value) <= wire.MAX_METRICS
            and all(isinstance(name, str) and METRIC_NAME.match(name) for name in value)
            and all(fits(NAMED_NUMBER, number) for number in value.values())
        )
    if field.kind == "timestamp":
        return isinstance(value, str) and len(value) <= wire.MAX_TEXT and is_timestamp(value)
    if field.kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    minimum = -math.inf if field.minimum is None else field.minimum
    maximum = math.inf if field.maximum is None else field.maximum
    if field.kind == "integer":
        return isinstance(value, int) and minimum <= value < 2**63
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float64, which no status field can hold
        return False
    return math.isfinite(number) and minimum <= number <= maximum


def is_timestamp(text: str) -> bool:
    try:
        moment = parse_timestamp(text)
        moment.astimezone(timezone.utc)  # written in UTC (status_patch); a year 1 or 9999 may not convert
    except (ValueError, OverflowError):
        return False
    return moment.tzinfo is not None  # RFC 3339 requires the offset
