"""What the API server would refuse in the Job ScaleTrain renders, found before it is created.

The CRD keeps affinity, volume sources, env valueFrom and podTemplate schemaless (they pass through to the
pods), so a string where a list belongs, an unknown field, a bad quantity or a container name with an
underscore reaches the operator, and the API server refuses the Job it creates. Here those pass-throughs
are checked at the Kubernetes definitions the rendered Job puts them at, against the schemas of the pinned
version (kube_openapi.py, a generated subset: structure, types, required and unknown fields) plus the value
rules the server's validation applies to those types (names, label values, quantities, selector operators;
`DEFINITION_RULES`). podTemplate is checked merged with what ScaleTrain adds (the trainer and rank-env
containers, the spec's volumes), as the pod will be. What ScaleTrain renders itself comes from fields the
models already check (tests/unit/test_render.py validates it against the same schemas).

Checking the user's pieces where they stand, rather than the rendered Job, reports each problem at the field
the user wrote (`spec.podTemplate.spec.containers[1].env`), and keeps this module below the renderer: the
models call it (ScaleTrainJobSpec.problems), so validate, render, run-local and the operator (InvalidSpec)
all refuse such a spec before anything renders it. Results are cached by content: the operator parses every
job on each reconcile.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from scaletrain_trainer.contract.validation import PathPart, Problem

from ..api import naming
from . import kube_rules
from .merge import merge_under
from .zz_generated_kube_openapi import DEFINITIONS

Path = tuple[PathPart, ...]

_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
}
_FORMAT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _has_type(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    python_types = {"object": dict, "array": list, "string": str, "boolean": bool}
    return isinstance(value, python_types[kind])


def _definition_name(schema: Mapping[str, Any]) -> str | None:
    reference = schema.get("$ref")
    return reference.rpartition("/")[2] if reference else None


def schema_problems(value: Any, schema: Mapping[str, Any], at: Path = ()) -> list[Problem]:
    """Every way `value` breaks `schema` (a kube_openapi schema: $ref, type, enum, format, oneOf, required,
    properties, additionalProperties, items), then the server's rules for each definition that is sound."""
    if (name := _definition_name(schema)) is not None:
        found = schema_problems(value, DEFINITIONS[name], at)
        if not found and value is not None and (rule := DEFINITION_RULES.get(name)):
            found = list(rule(value, at))
        return found
    if "oneOf" in schema:
        if any(not schema_problems(value, option, at) for option in schema["oneOf"]):
            return []
        kinds = [kind for option in schema["oneOf"] for kind in _types(option) if kind != "null"]
        return [Problem(at, f"must be {' or '.join(_TYPE_NAMES[k] for k in kinds)}, not {_shown(value)}")]
    kinds = _types(schema)
    if kinds and not any(_has_type(value, kind) for kind in kinds):
        wanted = " or ".join(_TYPE_NAMES[kind] for kind in kinds if kind != "null")
        return [Problem(at, f"must be {wanted}, not {_shown(value)}")]
    if "enum" in schema and value not in schema["enum"]:
        return [Problem(at, f"must be {' or '.join(map(repr, schema['enum']))}")]
    if (limits := _FORMAT_RANGES.get(schema.get("format", ""))) and _has_type(value, "integer"):
        if not limits[0] <= value <= limits[1]:
            return [Problem(at, f"{value} is out of range for a {schema['format']}")]
    if isinstance(value, dict):
        return list(_mapping_problems(value, schema, at))
    if isinstance(value, list) and "items" in schema:
        return [problem for index, item in enumerate(value) for problem in _item_problems(item, schema, (*at, index))]
    return []


def _item_problems(item: Any, schema: Mapping[str, Any], at: Path) -> list[Problem]:
    """A list item: null is no item (the server would decode an empty one, missing its required fields)."""
    if item is None:
        return [Problem(at, "an empty (null) item; remove it or fill it in")]
    return schema_problems(item, schema["items"], at)


def _types(schema: Mapping[str, Any]) -> list[str]:
    kinds = schema.get("type", [])
    return [kinds] if isinstance(kinds, str) else list(kinds)


def _shown(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"[:80]


def _mapping_problems(value: dict[str, Any], schema: Mapping[str, Any], at: Path) -> Iterator[Problem]:
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if value.get(name) is None:
            yield Problem((*at, name), "required field is missing")
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in properties:
            yield from schema_problems(item, properties[key], (*at, key))
        elif isinstance(extra, dict):
            yield from schema_problems(item, extra, (*at, key))
        elif extra is False:
            close = difflib.get_close_matches(str(key), list(properties), n=1)
            hint = f"did you mean {close[0]}?" if close else f"known fields: {', '.join(sorted(properties))}"
            yield Problem((*at, key), f"unknown field; {hint}")


# The server's value rules for a definition, as core/v1 and apimachinery validation apply them; each runs
# only on a value whose structure is sound, at that value's path.
Rule = Callable[[Any, Path], Iterator[Problem]]
IANA_SERVICE_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def _quantity(value: Any, at: Path) -> Iterator[Problem]:
    try:
        kube_rules.parse_quantity(value) if isinstance(value, str) else None
    except ValueError:
        yield Problem(at, f"{value!r} is not a Kubernetes quantity such as 2Gi, 500m or 4")


def namespace_problems(namespace: str | None, at: Path) -> Iterator[Problem]:
    if namespace and not kube_rules.is_dns_label(namespace):
        yield Problem(at, f"{namespace!r} is not a namespace name (a DNS label: a-z, 0-9 and -)")


def _dns_label(name: Any, at: Path) -> Iterator[Problem]:
    if not kube_rules.is_dns_label(name):
        yield Problem(
            at, f"{name!r} is not a DNS label: at most 63 of a-z, 0-9 and '-', starting and ending alphanumeric"
        )


def _container(container: dict[str, Any], at: Path) -> Iterator[Problem]:
    yield from _dns_label(container.get("name"), (*at, "name"))
    if not container.get("image"):
        yield Problem((*at, "image"), "required: every container needs an image")
    policy = container.get("imagePullPolicy")
    if policy is not None and policy not in ("Always", "IfNotPresent", "Never"):
        yield Problem((*at, "imagePullPolicy"), f"{policy!r} must be Always, IfNotPresent or Never")


def _env_var(var: dict[str, Any], at: Path) -> Iterator[Problem]:
    name = var["name"]
    if not name or "=" in name or not all(" " <= char <= "~" for char in name):
        yield Problem((*at, "name"), f"{name!r} must be printable ASCII characters other than '=' (e.g. MY_VAR)")
    if var.get("value") and var.get("valueFrom") is not None:
        yield Problem((*at, "valueFrom"), "set either value or valueFrom, not both")


def _container_port(port: dict[str, Any], at: Path) -> Iterator[Problem]:
    if not 1 <= port["containerPort"] <= 65535:
        yield Problem((*at, "containerPort"), f"{port['containerPort']} must be a port number from 1 to 65535")
    if not 0 <= port.get("hostPort", 0) <= 65535:
        yield Problem((*at, "hostPort"), f"{port['hostPort']} must be a port number from 1 to 65535, or 0 for none")
    if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
        yield Problem((*at, "protocol"), f"{port['protocol']!r} must be TCP, UDP or SCTP")
    name = port.get("name")
    if name and (
        len(name) > 15 or not IANA_SERVICE_NAME.fullmatch(name) or "--" in name or not re.search("[a-z]", name)
    ):
        message = "must be an IANA service name: at most 15 of a-z, 0-9 and '-', with a letter, e.g. metrics"
        yield Problem((*at, "name"), f"{name!r} {message}")


def _volume(volume: dict[str, Any], at: Path) -> Iterator[Problem]:
    yield from _dns_label(volume["name"], (*at, "name"))
    sources = [key for key, value in volume.items() if key != "name" and value is not None]
    if len(sources) != 1:
        given = ", ".join(sources) or "none"
        yield Problem(at, f"give exactly one volume source, e.g. emptyDir: {{}} (given: {given})")


def _resources(resources: dict[str, Any], at: Path) -> Iterator[Problem]:
    # A null amount is the API server's zero quantity, as if it were not given.
    sections = {section: {name: str(amount) for name, amount in (resources.get(section) or {}).items()
                          if amount is not None}
                for section in ("requests", "limits")}  # fmt: skip
    yield from kube_rules.resources_problems(sections, at)


def _toleration(toleration: dict[str, Any], at: Path) -> Iterator[Problem]:
    key, operator, value = toleration.get("key") or "", toleration.get("operator") or "Equal", toleration.get("value")
    if key and (problem := kube_rules.qualified_name(key)):
        yield Problem((*at, "key"), problem)
    if operator not in ("Exists", "Equal"):
        yield Problem((*at, "operator"), f"{operator!r} must be Exists or Equal")
    elif operator == "Exists" and value:
        yield Problem((*at, "value"), "must be empty when operator is Exists")
    elif operator == "Equal" and not key:
        yield Problem((*at, "operator"), "must be Exists when key is empty (an empty key matches every taint)")
    elif value and (problem := kube_rules.label_value(value)):
        yield Problem((*at, "value"), f"{value!r} {problem}")
    effect = toleration.get("effect")
    if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        yield Problem((*at, "effect"), f"{effect!r} must be NoSchedule, PreferNoSchedule or NoExecute")
    if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
        yield Problem((*at, "tolerationSeconds"), "only applies to effect NoExecute")


def _selector_requirement(operators: dict[str, str]) -> Rule:
    """A node or label selector's requirement: a label key, one of `operators` (each with what its values
    must be: "some", "none" or "one integer"), and label values for a label selector's."""

    def rule(requirement: dict[str, Any], at: Path) -> Iterator[Problem]:
        if problem := kube_rules.qualified_name(requirement["key"]):
            yield Problem((*at, "key"), problem)
        operator, values = requirement["operator"], requirement.get("values") or []
        if operator not in operators:
            yield Problem((*at, "operator"), f"{operator!r} must be one of {', '.join(operators)}")
        elif operators[operator] == "some" and not values:
            yield Problem((*at, "values"), f"must list at least one value for operator {operator}")
        elif operators[operator] == "none" and values:
            yield Problem((*at, "values"), f"must be empty for operator {operator}")
        elif operators[operator] == "one integer" and (len(values) != 1 or not re.fullmatch(r"-?\d+", values[0])):
            yield Problem((*at, "values"), f"must be a single whole number for operator {operator}")

    return rule


_SET_OPERATORS = {"In": "some", "NotIn": "some", "Exists": "none", "DoesNotExist": "none"}


def _label_selector_requirement(requirement: dict[str, Any], at: Path) -> Iterator[Problem]:
    yield from _selector_requirement(_SET_OPERATORS)(requirement, at)
    for index, value in enumerate(requirement.get("values") or []):
        if problem := kube_rules.label_value(value):
            yield Problem((*at, "values", index), f"{value!r} {problem}")


def _weighted(term: dict[str, Any], at: Path) -> Iterator[Problem]:
    if not 1 <= term["weight"] <= 100:
        yield Problem((*at, "weight"), f"{term['weight']} must be from 1 to 100")


def _pod_affinity_term(term: dict[str, Any], at: Path) -> Iterator[Problem]:
    key = term["topologyKey"]
    if problem := (kube_rules.qualified_name(key) if key else "required, e.g. kubernetes.io/hostname"):
        yield Problem((*at, "topologyKey"), problem)


def _pod_spec(pod: dict[str, Any], at: Path) -> Iterator[Problem]:
    """Across the pod: container names unique, and every mount names one of the pod's volumes."""
    volumes = {volume["name"] for volume in pod.get("volumes") or []}
    seen: set[str] = set()
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(pod.get(kind) or []):
            if container["name"] in seen:
                yield Problem((*at, kind, index, "name"), f"{container['name']} names two containers; rename one")
            seen.add(container["name"])
            for position, mount in enumerate(container.get("volumeMounts") or []):
                if mount["name"] not in volumes:
                    message = f"no volume named {mount['name']} in the pod; add it to podTemplate.spec.volumes"
                    yield Problem((*at, kind, index, "volumeMounts", position, "name"), message)


CORE, META = "io.k8s.api.core.v1.", "io.k8s.apimachinery.pkg.apis.meta.v1."
DEFINITION_RULES: dict[str, Rule] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": _quantity,
    CORE + "PodSpec": _pod_spec,
    CORE + "Container": _container,
    CORE + "EnvVar": _env_var,
    CORE + "ContainerPort": _container_port,
    CORE + "Volume": _volume,
    CORE + "ResourceRequirements": _resources,
    CORE + "Toleration": _toleration,
    CORE + "NodeSelectorRequirement": _selector_requirement(
        _SET_OPERATORS | {"Gt": "one integer", "Lt": "one integer"}
    ),
    META + "LabelSelectorRequirement": _label_selector_requirement,
    CORE + "PreferredSchedulingTerm": _weighted,
    CORE + "WeightedPodAffinityTerm": _weighted,
    CORE + "PodAffinityTerm": _pod_affinity_term,
}


def pass_through_problems(
    *,
    pod_template: dict[str, Any] | None,
    affinity: dict[str, Any] | None,
    volumes: list[dict[str, Any]],
    env_sources: dict[int, dict[str, Any]],
    tolerations: list[dict[str, Any]],
    rendered_containers: dict[str, str],
) -> list[Problem]:
    """What the API server would refuse in the spec's pass-throughs, at their spec paths. `volumes` are
    spec.volumes, `env_sources` spec.env's valueFrom by index, and `rendered_containers` the containers
    ScaleTrain renders into the pod (name -> image) that podTemplate's merge into."""
    pieces = {
        "podTemplate": pod_template,
        "affinity": affinity,
        "volumes": volumes,
        "env": env_sources,
        "tolerations": tolerations,
        "containers": rendered_containers,
    }
    content = json.dumps(pieces, sort_keys=True, default=str)
    return _CACHE.get(hashlib.sha256(content.encode()).hexdigest(), lambda: list(_problems(**pieces)))


def _problems(
    podTemplate: dict[str, Any] | None,  # noqa: N803 (the spec's names)
    affinity: dict[str, Any] | None,
    volumes: list[dict[str, Any]],
    env: dict[int, dict[str, Any]],
    tolerations: list[dict[str, Any]],
    containers: dict[str, str],
) -> Iterator[Problem]:
    if affinity is not None:
        yield from schema_problems(affinity, _definition("Affinity"), ("affinity",))
    for index, volume in enumerate(volumes):
        yield from schema_problems(volume, _definition("Volume"), ("volumes", index))
    for index, source in env.items():
        yield from schema_problems(source, _definition("EnvVarSource"), ("env", index, "valueFrom"))
    for index, toleration in enumerate(tolerations):
        yield from schema_problems(toleration, _definition("Toleration"), ("tolerations", index))
    if podTemplate is not None:
        if duplicates := [*_names_given_twice(podTemplate), *_paths_mounted_twice(podTemplate)]:
            yield from duplicates  # the merge keeps one item per name: it would hide them, and shift indices
            return
        # Merged as the renderer merges it: podTemplate's own items keep their indices, ScaleTrain's come after.
        shm = {"name": naming.SHM_VOLUME, "emptyDir": {"medium": "Memory"}}
        added = {"containers": [{"name": name, "image": image} for name, image in containers.items()]}
        pod = merge_under(podTemplate, {"spec": added | {"volumes": [*volumes, shm]}})
        yield from schema_problems(pod, _definition("PodTemplateSpec"), ("podTemplate",))


def _names_given_twice(pod_template: dict[str, Any]) -> Iterator[Problem]:
    """Containers (init containers included) and volumes the server refuses for a name used before."""
    spec = pod_template.get("spec")
    if not isinstance(spec, dict):
        return
    for lists in (("initContainers", "containers"), ("volumes",)):
        seen: set[str] = set()
        for field in lists:
            items = spec.get(field)
            for index, item in enumerate(items if isinstance(items, list) else []):
                name = item.get("name") if isinstance(item, dict) else None
                if isinstance(name, str) and name in seen:
                    yield Problem(
                        ("podTemplate", "spec", field, index, "name"), f"{name!r} is used twice; names must be unique"
                    )
                seen.add(name)


def _paths_mounted_twice(pod_template: dict[str, Any]) -> Iterator[Problem]:
    """A container of podTemplate (a sidecar, an init container) that mounts two volumes at one path."""
    spec = pod_template.get("spec")
    for field in ("initContainers", "containers"):
        items = spec.get(field) if isinstance(spec, dict) else None
        for index, container in enumerate(items if isinstance(items, list) else []):
            mounts = container.get("volumeMounts") if isinstance(container, dict) else None
            if isinstance(mounts, list):
                paths = [mount.get("mountPath") if isinstance(mount, dict) else None for mount in mounts]
                yield from kube_rules.repeated_mount_paths(paths, ("podTemplate", "spec", field, index, "volumeMounts"))


def _definition(core_v1_type: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{CORE}{core_v1_type}"}


class _BoundedCache:
    """The last `size` results by key, for the threads of one process."""

    def __init__(self, size: int):
        self.size, self._items, self._lock = size, OrderedDict[str, list[Problem]](), threading.Lock()

    def get(self, key: str, compute: Callable[[], list[Problem]]) -> list[Problem]:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value


_CACHE = _BoundedCache(size=4096)  # a digest and (mostly) an empty list each
