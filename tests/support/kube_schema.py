"""What the API server does with a CRD schema, for tests: structural checks, defaulting, CEL rules,
and a JSON Schema (draft 4, as OpenAPI 3.0 is) for validating instances with jsonschema."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import celpy
import jsonschema

_K8S_EXTENSIONS = ("x-kubernetes-", "nullable")
_BRANCH_FORBIDDEN = {"type", "properties", "items", "additionalProperties", "default", "description"}


def structural_violations(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """The rules of a structural schema (apiextensions.k8s.io/v1) that `schema` breaks."""
    if "$ref" in schema:
        yield f"{path}: $ref is not allowed"
    special = schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields")
    if "type" not in schema and not special:
        yield f"{path}: no type"
    if schema.get("x-kubernetes-int-or-string") and schema.get("anyOf") != [{"type": "integer"}, {"type": "string"}]:
        yield f"{path}: int-or-string must use anyOf integer/string"
    for combinator in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(combinator, []) if not schema.get("x-kubernetes-int-or-string") else []:
            if _BRANCH_FORBIDDEN & set(branch):
                yield f"{path}: {combinator} branch sets {sorted(_BRANCH_FORBIDDEN & set(branch))}"
    if "properties" in schema and "additionalProperties" in schema:
        yield f"{path}: properties and additionalProperties together"
    if isinstance(schema.get("additionalProperties"), bool):
        yield f"{path}: boolean additionalProperties"
    for name, prop in schema.get("properties", {}).items():
        yield from structural_violations(prop, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from structural_violations(schema[key], f"{path}[{key}]")


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """The API server's defaulting: fill in `default` for absent properties, recursively."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                value[name] = apply_defaults(prop, value[name])
        if isinstance(schema.get("additionalProperties"), dict):
            for key in value:
                value[key] = apply_defaults(schema["additionalProperties"], value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


def cel_failures(schema: dict[str, Any], value: Any, path: str = "") -> list[tuple[str, str]]:
    """(path + fieldPath, message) of each x-kubernetes-validations rule that `value` breaks."""
    failures = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        program = env.program(env.compile(rule["rule"]))
        result = program.evaluate({"self": celpy.json_to_cel(value)})
        if isinstance(result, Exception) or not bool(result):
            failures.append((path + rule.get("fieldPath", ""), rule["message"]))
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value:
                failures += cel_failures(prop, value[name], f"{path}.{name}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            failures += cel_failures(schema["items"], item, f"{path}[{index}]")
    return failures


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
