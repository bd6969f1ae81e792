"""How deep and how large a ScaleTrainJob's spec may be, checked before anything walks it recursively.

Much of the spec is passed through as free-form Kubernetes objects or options (affinity, podTemplate,
env valueFrom, volume sources, model and data options): the CRD keeps them with
`x-kubernetes-preserve-unknown-fields`, which no schema bound and no CEL rule can reach (CEL does not see
preserved unknown fields). The API server stores such a subtree up to its own JSON nesting limit, 10,000
levels. Python code that recurses over one (pydantic, json.dumps, deepcopy, ==) stops at the
interpreter's recursion limit, so one tenant's deeply nested object would break every reconcile that
touches it, or the operator itself.

So the spec is walked here once, iteratively, and refused with the field path when it nests deeper than
MAX_NESTING or when one of its fields is larger than MAX_FIELD_BYTES. No real Kubernetes object comes
close: a pod spec nests about 10 levels (affinity's match expressions are the deepest), a Hugging Face
config 3 or 4. The operator can still decode what the API server can store (controller/main.py), and
then reports the job InvalidSpec instead of failing on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scaletrain_trainer.contract.validation import PathPart, Problem, format_path

MAX_NESTING = 32  # levels below spec
MAX_FIELD_BYTES = 1024 * 1024  # the JSON size of one top-level spec field, about (etcd holds 1.5 MB an object)
SHOWN_PATH_PARTS = 4  # of a too-deep path, the first parts the message shows


def spec_bound_problems(document: dict[str, Any]) -> list[Problem]:
    """The spec's nesting and size problems, one per top-level spec field at most; [] when within bounds."""
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return []
    return [problem for key, value in spec.items() if (problem := _field_problem(("spec", key), value)) is not None]


def _field_problem(path: tuple[PathPart, ...], value: Any) -> Problem | None:
    size = 0
    for trail, depth, key, node in _walk(value):
        if depth > MAX_NESTING:
            shown = format_path((*path, *_first_parts(trail, SHOWN_PATH_PARTS)))
            return Problem(
                path,
                f"nested more than {MAX_NESTING} levels deep (at {shown}…); no Kubernetes object or model option "
                "needs that many: flatten it",
            )
        size += len(str(key)) + (len(node) if isinstance(node, str) else 8)  # about what it adds to the JSON
        if size > MAX_FIELD_BYTES:
            return Problem(
                path,
                f"larger than {MAX_FIELD_BYTES // 1024} KiB; keep large data in a ConfigMap, a volume or a file "
                "the job reads",
            )
    return None


# The way down to a node, as (the way to its parent, its key): a path that costs one pair per node.
Trail = tuple[Any, PathPart] | None


def _walk(value: Any) -> Iterator[tuple[Trail, int, PathPart, Any]]:
    """Every node under `value` (itself at depth 1, below a top-level spec field) with the trail to it,
    its depth and its key, depth first, without recursion."""
    pending: list[tuple[Trail, int, PathPart, Any]] = [(None, 1, "", value)]
    while pending:
        trail, depth, key, node = pending.pop()
        yield trail, depth, key, node
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        pending.extend(((trail, child_key), depth + 1, child_key, child) for child_key, child in children)


def _first_parts(trail: Trail, count: int) -> list[PathPart]:
    """The first `count` keys on the way to the node `trail` leads to."""
    parts: list[PathPart] = []
    while trail is not None:
        trail, key = trail
        parts.append(key)
    return parts[::-1][:count]
