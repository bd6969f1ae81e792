"""Generate the ScaleTrainJob CustomResourceDefinition from the pydantic models.

Pydantic emits JSON Schema (draft 2020-12, with $refs and anyOf-null for optional fields); the API
server wants a *structural* OpenAPI v3 schema. `structural_schema` converts one into the other:
refs inlined, optional fields as plain types, bounds in OpenAPI 3.0 spelling, and a default on each
nested object (its fields' defaults) so the API server fills those in too.
"""

from __future__ import annotations

from typing import Any

import yaml

from scaletrain_trainer.contract import wire

from ..validation.kube_rules import DNS_1035_LABEL
from . import naming
from .cel import CrdJsonSchema
from .job import ScaleTrainJob

# Keys pydantic emits that a structural schema must not carry.
_DROPPED_KEYS = {"title", "$defs"}

DESCRIPTION = "A distributed PyTorch training job: a gang of indexed pods running torchrun."


def _progress_columns() -> list[dict[str, Any]]:
    """kubectl's columns of status.progress, as `wire` names them: -o wide only for those marked wide."""
    return [
        {"name": field.column.header, "type": field.kind, "jsonPath": f".status.progress.{field.name}"}
        | ({"priority": 1} if field.column.wide else {})
        for field in wire.PROGRESS_FIELDS
        if field.column is not None
    ]


PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes.current"},
    {"name": "Desired", "type": "integer", "jsonPath": ".spec.nodes"},
    *_progress_columns(),
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

# `kubectl scale stj/NAME --replicas=K` sets spec.nodes (the schema's rules hold: K must keep the global
# batch exact); the gang stops at a step boundary and the next starts at K nodes (reconcile.py). An elastic
# gang takes a smaller K so, and a larger one once a capacity probe finds room for it.
SCALE = {
    "specReplicasPath": ".spec.nodes",
    "statusReplicasPath": ".status.nodes.current",
    "labelSelectorPath": ".status.selector",
}

# CEL on the root may read metadata.name; keep the name short enough for every child's hostname.
NAME_RULES = [
    {
        "rule": f"self.metadata.name.size() <= {naming.MAX_NAME_LENGTH}",
        "message": f"metadata.name must be at most {naming.MAX_NAME_LENGTH} characters: pod hostnames "
        "<name>-g<generation>-<index> must fit in 63",
    },
    {
        "rule": f"self.metadata.name.matches('{DNS_1035_LABEL}')",
        "message": "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter)",
    },
]


def structural_schema(node: Any, defs: dict[str, Any]) -> Any:
    """Convert one pydantic JSON Schema node (and everything below it) to structural OpenAPI v3."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"a structural schema cannot express the union {node['anyOf']}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return structural_schema({**variants[0], **rest}, defs)  # converted once: a $ref is resolved there
    out: dict[str, Any] = {}
    unset_by_default: set[str] = set()  # optional objects whose default is None: left out, not filled in
    for key, value in node.items():
        if key in _DROPPED_KEYS or (key == "default" and value is None):
            continue
        if key == "additionalProperties" and isinstance(value, bool):
            continue  # unknown fields are pruned by the API server (and refused by kubectl's strict validation)
        if key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: structural_schema(prop, defs) for name, prop in value.items()}
            unset_by_default = {name for name, prop in value.items() if "default" in prop and prop["default"] is None}
        elif key in ("items", "additionalProperties"):
            out[key] = structural_schema(value, defs)
        else:
            out[key] = value
    for name, prop in out.get("properties", {}).items():
        defaulted = name not in out.get("required", []) and name not in unset_by_default
        if defaulted and "default" not in prop and _all_fields_defaulted(prop):
            prop["default"] = _defaults_of(prop)
    return out


def _defaults_of(schema: dict[str, Any]) -> dict[str, Any]:
    """An object with its fields' defaults filled in. Not `{}`: the API server checks a default against
    the object's CEL rules as it stands, and a rule such as `self.width % self.heads == 0` fails on `{}`
    with "no such key"."""
    return {name: prop["default"] for name, prop in schema["properties"].items() if "default" in prop}


def _all_fields_defaulted(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" and "properties" in schema and not schema.get("required")


def _without_defaults(schema: Any) -> Any:
    """The operator owns status: the API server must not fill in fields it has not written."""
    if isinstance(schema, dict):
        return {key: _without_defaults(value) for key, value in schema.items() if key != "default"}
    return schema


def _model_schema(model: type, name: str) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=CrdJsonSchema)
    return structural_schema(raw["properties"][name], raw.get("$defs", {}))


def status_schema() -> dict[str, Any]:
    """The CRD's schema of status (validation/status_schema.py holds every status write to it)."""
    return _without_defaults(_model_schema(ScaleTrainJob, "status"))


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition, as a plain dict."""
    spec_schema = _model_schema(ScaleTrainJob, "spec")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{naming.PLURAL}.{naming.GROUP}"},
        "spec": {
            "group": naming.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": naming.KIND,
                "listKind": f"{naming.KIND}List",
                "plural": naming.PLURAL,
                "singular": naming.SINGULAR,
                "shortNames": list(naming.SHORT_NAMES),
            },
            "versions": [
                {
                    "name": naming.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": SCALE},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": DESCRIPTION,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema(),
                            },
                            "x-kubernetes-validations": NAME_RULES,
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated from the models in operator/scaletrain_operator/api/ by `scaletrain crd`; do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120, allow_unicode=True)
