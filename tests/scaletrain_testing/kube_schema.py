"""Reading a CRD's OpenAPI schema: as a JSON Schema (draft 4, as OpenAPI 3.0 is), for validating objects
with jsonschema where no API server answers (the chart's kopf peering objects against kopf's CRDs), and
for the fields `kubectl explain` would show without a description."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema

_K8S_EXTENSIONS = ("x-kubernetes-", "nullable")


def to_json_schema(schema: Any) -> Any:
    """Drop Kubernetes extensions; make unknown fields errors, as kubectl's strict field validation does."""
    if isinstance(schema, list):
        return [to_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: to_json_schema(v) for k, v in schema.items() if not k.startswith(_K8S_EXTENSIONS)}
    if "properties" in out and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def schema_errors(schema: dict[str, Any], instance: Any) -> list[str]:
    validator = jsonschema.Draft4Validator(to_json_schema(schema))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def fields_without_description(schema: dict[str, Any], path: str) -> Iterator[str]:
    """The paths of the fields below `schema` (at `path`) that have no description, at every depth: the
    fields of nested objects, of list items ([]) and of map values ({})."""
    for name, field in schema.get("properties", {}).items():
        if "description" not in field:
            yield f"{path}.{name}"
        yield from fields_without_description(field, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(inner := schema.get(key), dict):
            yield from fields_without_description(inner, path + suffix)
