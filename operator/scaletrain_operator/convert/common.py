"""What the readers of each kind share: the findings (where a field of the input is, what was met there),
typed reads of the input, and what both kinds read alike (the queue, restarts, processes per node, the
differences between two values)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from scaletrain_trainer.contract.validation import PathPart, format_path

from ..api import naming

NPROC_WORDS = ("auto", "cpu", "gpu")

GANG_SCHEDULING_MESSAGE = (
    "gang scheduling by Volcano or scheduler-plugins: ScaleTrain starts the gang as one Job; set schedulerName "
    "(and podTemplate labels or annotations) for a gang scheduler, scheduleTimeoutSeconds to fail when unschedulable"
)
RENDEZVOUS_MESSAGE = (
    "ScaleTrain's gang meets at its rank-0 pod (PET_MASTER_ADDR, PET_MASTER_PORT, and PET_RDZV_ENDPOINT for "
    "torchrun --rdzv-backend=c10d)"
)
FIXED_GANG_MESSAGE = "elastic scaling: ScaleTrain runs a fixed gang of `nodes` pods"
ELASTIC_UNMAPPED = {
    "rdzvHost": RENDEZVOUS_MESSAGE,
    "rdzvId": RENDEZVOUS_MESSAGE,
    "rdzvConf": RENDEZVOUS_MESSAGE,
    "standalone": RENDEZVOUS_MESSAGE,
    "maxRestarts": "torchrun's restarts of the processes in one pod; ScaleTrain restarts the whole gang "
    "(maxRestarts); add env PET_MAX_RESTARTS to keep torchrun's",
    "metrics": "autoscaling: " + FIXED_GANG_MESSAGE,
}


@dataclass(frozen=True)
class Where:
    """A field of the input: its path, in the job's document or in another one (a runtime)."""

    path: tuple[PathPart, ...] = ()
    document: str = ""

    def at(self, *parts: PathPart) -> Where:
        return Where(self.path + parts, self.document)

    def __str__(self) -> str:
        if not self.path:
            return self.document or format_path(())
        return f"{self.document} {format_path(self.path)}" if self.document else format_path(self.path)


@dataclass(frozen=True)
class Finding:
    where: Where
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class ConversionError(ValueError):
    """The input cannot become a ScaleTrainJob; each finding names the field and the fix."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__("; ".join(str(f) for f in findings))


@dataclass(frozen=True)
class Conversion:
    job: dict[str, Any]  # the ScaleTrainJob document, valid under parse_job
    unmapped: list[Finding]  # the source fields it does not carry, each with why


@dataclass
class _Findings:
    """What the conversion met on the way: errors stop it (all reported at once), unmapped fields do not."""

    errors: list[Finding] = field(default_factory=list)
    unmapped: list[Finding] = field(default_factory=list)

    def error(self, where: Where, message: str) -> None:
        self.errors.append(Finding(where, message))

    def drop(self, where: Where, message: str) -> None:
        self.unmapped.append(Finding(where, message))

    def take(self, other: _Findings, origins: dict[Where, Where]) -> None:
        """Add `other`'s findings, each named where its value came from: `origins` maps where a value merged
        in from elsewhere landed to where it came from."""
        for mine, theirs in ((self.errors, other.errors), (self.unmapped, other.unmapped)):
            mine.extend(Finding(_origin(finding.where, origins), finding.message) for finding in theirs)


def _origin(where: Where, origins: dict[Where, Where]) -> Where:
    """Where the value at `where` came from: the source recorded for it or for the nearest field holding it."""
    for length in range(len(where.path), -1, -1):
        origin = origins.get(Where(where.path[:length], where.document))
        if origin is not None:
            return origin.at(*where.path[length:])
    return where


def _kind(document: Any) -> str | None:
    kind = _dig(document, "kind")
    return kind if isinstance(kind, str) else None


# Typed access: the input is any YAML, so each read checks the type it expects and reports another.

KIND_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "a whole number", bool: "true or false"}


def _typed(parent: dict[str, Any], key: str, where: Where, kind: type, found: _Findings) -> Any:
    """parent[key] when it is of `kind`; None when absent or null, and also (with an error) when of another kind."""
    value = parent.get(key)
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    found.error(where.at(key), f"must be {KIND_NAMES[kind]}, not {type(value).__name__} {_brief(value)}")
    return None


def _mapping(parent: dict[str, Any], key: str, where: Where, found: _Findings) -> dict[str, Any]:
    return _typed(parent, key, where, dict, found) or {}


def _list(parent: dict[str, Any], key: str, where: Where, found: _Findings) -> list[Any]:
    return _typed(parent, key, where, list, found) or []


def _strings(parent: dict[str, Any], key: str, where: Where, found: _Findings) -> list[str] | None:
    values = _typed(parent, key, where, list, found)
    for index, value in enumerate(values or []):
        if not isinstance(value, str):
            found.error(where.at(key, index), f"must be a string, not {type(value).__name__} {_brief(value)}")
    return values


def _others(mapping: dict[str, Any], known: Collection[str]) -> list[Any]:
    """The keys of `mapping` that are not `known`, in their order."""
    return [key for key in mapping if key not in known]


def _dig(value: Any, *keys: str) -> Any:
    """value[k1][k2]...: None where a level is missing or not a mapping (reads whose errors are reported elsewhere)."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _named(items: Any, name: str) -> dict[str, Any] | None:
    """The mapping named `name` in a list of them (a container, a port), if any."""
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return None


def _brief(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _queue_name(job: dict[str, Any]) -> Any:
    return _dig(job, "metadata", "labels", naming.KUEUE_QUEUE_LABEL)


_MISSING = object()


def _differences(a: Any, b: Any, path: tuple[PathPart, ...] = ()) -> Iterator[tuple[PathPart, ...]]:
    """The paths at which `a` and `b` differ: mappings key by key, lists of one length item by item; a
    null, an empty list or an empty mapping is the same as nothing."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *_others(b, a)]:
            yield from _differences(a.get(key, _MISSING), b.get(key, _MISSING), (*path, key))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _differences(x, y, (*path, index))
    elif a != b and not (_unset(a) and _unset(b)):
        yield path


def _unset(value: Any) -> bool:
    return value is _MISSING or value in (None, [], {})


def _lookup(value: Any, path: tuple[PathPart, ...]) -> Any:
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return _MISSING
    return value


def _drop_each_setting(
    policy: Any, where: Where, message: str, found: _Findings, messages: dict[str, str] | None = None
) -> None:
    """Report each setting of a policy ScaleTrain has no counterpart for (with its own message from
    `messages`, else `message`), or the policy itself when it holds none."""
    if not isinstance(policy, dict) or not policy:
        found.drop(where, message)
    for setting in policy if isinstance(policy, dict) else ():
        found.drop(where.at(setting), (messages or {}).get(setting, message))


def _max_restarts(limit: int, where: Where, found: _Findings) -> int:
    if limit > naming.MAX_RESTARTS:
        found.drop(
            where, f"{limit}: ScaleTrain restarts a gang at most {naming.MAX_RESTARTS} times; maxRestarts is that"
        )
        return naming.MAX_RESTARTS
    return limit


def _first_given(
    own: dict[str, Any], where: Where, key: str, fallback: dict[str, Any], fallback_where: Where, fallback_key: str
) -> tuple[Any, Where] | None:
    """`own[key]` with its path if set, else `fallback[fallback_key]` with its path if set."""
    if own.get(key) is not None:
        return own[key], where.at(key)
    if fallback.get(fallback_key) is not None:
        return fallback[fallback_key], fallback_where.at(fallback_key)
    return None


def _procs_per_node(value: Any, where: Where, gpus: int, counted_cpus: int | None, found: _Findings) -> int | None:
    """torchrun's --nproc-per-node as procsPerNode: a number as is, auto and gpu with GPUs as ScaleTrain's
    default (one process per GPU). On CPU, `counted_cpus` is what the source's controller resolves auto
    and cpu to itself; without it torchrun counts the node's cores at run time, which no field can say."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if value not in NPROC_WORDS:
        found.error(where, f"{_brief(value)}: must be a whole number, or one of {', '.join(NPROC_WORDS)}")
        return None
    if gpus:
        if value == "cpu":
            found.drop(where, "cpu: one process per CPU core; ScaleTrain runs one per GPU (procsPerNode)")
        return None
    if value == "gpu":
        found.drop(where, "gpu without GPUs, with which torchrun fails; ScaleTrain runs 1 process per pod")
        return None
    if counted_cpus is not None:
        return counted_cpus
    found.drop(
        where, f"{value} on CPU: torchrun starts one process per CPU core of the node; procsPerNode is 1: set it"
    )
    return None
