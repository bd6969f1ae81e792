"""Every status write checked against the CRD's own status schema before it is sent.

Much of what the operator writes into a job's status comes from the tenant's pods: rank 0's /progress
answers and termination messages. The API server refuses a whole status patch (422) for one value its
schema does not take (a timestamp Python parses but RFC 3339 does not, a name over its maxLength, an
integer beyond int64), and a patch refused every time wedges the job: it never records a restart or
its end. So the patch is first held against the very schema the CRD is generated from (api/crd.py), and
every field that does not fit is left out, and named, instead of failing the rest.

The checks are those of a structural OpenAPI v3 schema as the API server applies them: type, enum,
bounds, lengths, item counts, patterns and the date-time format, with int64 integers and finite
float64 numbers, as Go's JSON decoder reads them. A None in the patch removes a field (JSON merge
patch): it always fits.
"""

from __future__ import annotations

import math
import re
from typing import Any

INT64 = range(-(2**63), 2**63)
# strfmt's date-time, which the API server checks `format: date-time` with (RFC 3339)
DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def fit_status(patch: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`patch` less every field that the status `schema` (api/crd.py's status_schema()) refuses, and what was
    left out, with why. A field of an object is left out alone (say progress.loss); a field whose item is
    refused goes whole (conditions)."""
    return _fit_object(patch, schema, "status")


def _fit_object(patch: dict[str, Any], schema: dict[str, Any], path: str) -> tuple[dict[str, Any], list[str]]:
    kept, left_out = {}, []
    properties = schema.get("properties") or {}
    for key, value in patch.items():
        where = f"{path}.{key}"
        field_schema = properties.get(key, schema.get("additionalProperties"))
        if value is None:
            kept[key] = None
        elif not isinstance(field_schema, dict):
            left_out.append(f"{where}: not in the schema")
        elif isinstance(value, dict) and field_schema.get("type") == "object" and "properties" in field_schema:
            kept[key], inner = _fit_object(value, field_schema, where)
            left_out += inner
            missing = [name for name in field_schema.get("required", []) if kept[key].get(name) is None]
            if missing:
                del kept[key]
                left_out.append(f"{where}: lacks {', '.join(missing)}")
        elif (problem := schema_problem(value, field_schema, where)) is not None:
            left_out.append(problem)
        else:
            kept[key] = value
    return kept, left_out


def schema_problem(value: Any, schema: dict[str, Any], path: str) -> str | None:
    """Why `value` does not fit `schema`, or None."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
        return None
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool) and value in INT64)):
            return f"{path}: not an integer or a string"
        return None
    kind = schema.get("type")
    if (problem := _type_problem(value, kind)) is not None:
        return f"{path}: {problem}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: not one of {schema['enum']}"
    if kind in ("integer", "number") and (problem := _bound_problem(value, schema)) is not None:
        return f"{path}: {problem}"
    if kind == "string" and (problem := _string_problem(value, schema)) is not None:
        return f"{path}: {problem}"
    if kind == "array":
        if len(value) > schema.get("maxItems", math.inf) or len(value) < schema.get("minItems", 0):
            return f"{path}: {len(value)} items"
        items = schema.get("items") or {}
        return next((p for i, v in enumerate(value) if (p := schema_problem(v, items, f"{path}[{i}]"))), None)
    if kind == "object":
        properties = schema.get("properties") or {}
        missing = [name for name in schema.get("required", []) if value.get(name) is None]
        if missing:
            return f"{path}: lacks {', '.join(missing)}"
        if len([item for item in value.values() if item is not None]) > schema.get("maxProperties", math.inf):
            return f"{path}: more than {schema['maxProperties']} names"
        for key, item in value.items():
            item_schema = properties.get(key, schema.get("additionalProperties"))
            if item is None:
                continue
            if not isinstance(item_schema, dict):
                if schema.get("x-kubernetes-preserve-unknown-fields"):
                    continue
                return f"{path}.{key}: not in the schema"  # the API server would prune it
            if (problem := schema_problem(item, item_schema, f"{path}.{key}")) is not None:
                return problem
    return None


def _type_problem(value: Any, kind: str | None) -> str | None:
    fits = {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool) and value in INT64,
        "number": _is_finite_number(value),
    }.get(kind, True)
    return None if fits else f"not a {kind} the API server takes: {str(value)[:40]!r}"


def _is_finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond float64
        return False


def _bound_problem(value: float, schema: dict[str, Any]) -> str | None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
        return f"below its minimum {low}"
    if high is not None and (value > high or (schema.get("exclusiveMaximum") and value == high)):
        return f"above its maximum {high}"
    return None


def _string_problem(value: str, schema: dict[str, Any]) -> str | None:
    if len(value) > schema.get("maxLength", math.inf):
        return f"longer than {schema['maxLength']} characters"
    if len(value) < schema.get("minLength", 0):
        return f"shorter than {schema['minLength']} characters"
    if "pattern" in schema and not re.search(schema["pattern"], value):
        return f"does not match {schema['pattern']}"
    if schema.get("format") == "date-time" and not DATE_TIME.match(value):
        return f"not an RFC 3339 time: {value[:40]!r}"
    return None
