"""An in-memory Kubernetes API server for tests: kmock's KubernetesEmulator, made realistic enough for
kopf, the official `kubernetes` client and the real `kubectl`, served over HTTP on 127.0.0.1.

    with EmulatedCluster() as cluster:          # or `async with`; or the `k8s_cluster` fixture
        api = cluster.api_client()              # a kubernetes.client.ApiClient from cluster.kubeconfig
        cluster.kubectl("get", "stj", "-n", "team-a")
        with cluster.operator(registry, namespaces=["team-a"]):   # kopf in a thread, or in the test's
            cluster.wait_until(lambda: cluster.get("stj", "team-a", "demo"))  # loop: cluster.async_operator

The server runs in a background thread with its own event loop, so blocking clients (the `kubernetes`
client, kubectl, KopfRunner) and asyncio code (kopf in the test's loop) can all use it. The helpers
(`get/list/create/patch/set_status/create_pod/set_pod_phase/delete`) write objects directly, as the Job
controller or the kubelet would; they are thread-safe and emit watch events like API writes do.

What kmock 0.8 lacks and `ClusterEmulator` adds: server-side metadata (uid, resourceVersion, generation,
creationTimestamp, namespace, generateName), 201 on create, merge/JSON/strategic-merge patches and PUT with
optimistic concurrency, the status subresource, label and field selectors, typed lists, resourceVersion-aware
watches (timeoutSeconds, bookmarks, sendInitialEvents), finalizers, garbage collection through
ownerReferences, the namespaces resource, CRDs that register their resource (with structural pruning and
defaulting), core discovery as "v1" (not "/v1"), Table responses with printer columns, and a minimal
OpenAPI v3 document so that kubectl leaves validation to the server.
Not emulated: schema validation (types, enums, CEL), admission, RBAC, server-side apply, dryRun, pagination,
protobuf bodies (so not `kubectl create job|namespace|deployment NAME`; `-f` manifests are fine), graceful
pod termination, foreground deletion (treated as background); garbage collection is synchronous; namespaces
are created on first use instead of being required.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import datetime
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import attrs
import kmock
import pytest
import yaml

T = TypeVar("T")
Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "crds" / "scaletrainjob.yaml"
STJ = kmock.resource("scaletrain.io", "v1alpha1", "scaletrainjobs")
CRDS = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACES = kmock.resource("", "v1", "namespaces")
BUILTIN_RESOURCES = (
    "v1/namespaces",
    "v1/pods",
    "v1/services",
    "v1/events",
    "events.k8s.io/v1/events",
    "batch/v1/jobs",
    "coordination.k8s.io/v1/leases",
    "apiextensions.k8s.io/v1/customresourcedefinitions",
)
# Printer columns of built-in kinds (a real server has more); every other kind gets Name and Age.
BUILTIN_COLUMNS: dict[str, list[Obj]] = {
    "pods": [{"name": "Status", "type": "string", "jsonPath": ".status.phase"}],
    "jobs": [
        {"name": "Active", "type": "integer", "jsonPath": ".status.active"},
        {"name": "Succeeded", "type": "integer", "jsonPath": ".status.succeeded"},
        {"name": "Failed", "type": "integer", "jsonPath": ".status.failed"},
    ],
    "services": [
        {"name": "Type", "type": "string", "jsonPath": ".spec.type"},
        {"name": "Cluster-IP", "type": "string", "jsonPath": ".spec.clusterIP"},
    ],
    "namespaces": [{"name": "Status", "type": "string", "jsonPath": ".status.phase"}],
}
AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# batch/v1 Jobs orphan their pods unless the client asks for a cascade (kept for backward compatibility).
ORPHAN_BY_DEFAULT = {kmock.resource("batch", "v1", "jobs")}
# Strategic merge patch, approximated: these lists merge by key (or as sets); all other lists are replaced.
SMP_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
}
SMP_SET_LISTS = {"finalizers"}
NAMESPACES_PATH = re.compile(r"/api/v1/namespaces(?:/(?P<name>[^/]+)(?:/(?P<sub>status|finalize))?)?/?")


# --- errors -----------------------------------------------------------------------------------------------


def api_error(code: int, reason: str, message: str, **details: Any) -> kmock.KubernetesError:
    """An error that the server renders as a `Status` with this code (the clients raise their API errors)."""
    return kmock.KubernetesError(status=code, reason=reason, message=message, details=details)


def _not_found(resource: kmock.resource, name: str) -> kmock.KubernetesError:
    return api_error(404, "NotFound", f'{_qualified(resource)} "{name}" not found', name=name)


def _conflict(resource: kmock.resource, name: str) -> kmock.KubernetesError:
    message = (
        f'Operation cannot be fulfilled on {_qualified(resource)} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    return api_error(409, "Conflict", message, name=name)


def _qualified(resource: kmock.resource) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else str(resource.plural)


def _api_version(resource: kmock.resource) -> str:
    return f"{resource.group}/{resource.version}" if resource.group else str(resource.version)


def _wants_table(request: kmock.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")  # kubectl's human-readable output


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- patches, selectors, JSONPath ---------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, None removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str | None = None) -> Any:
    """A strategic merge patch without the OpenAPI schema: SMP_MERGE_KEYS lists merge by key, finalizers as a
    set (honouring $deleteFromPrimitiveList), other `$` directives are dropped, the rest is a merge patch."""
    if isinstance(patch, list) and isinstance(target, list) and field in SMP_SET_LISTS:
        return list(target) + [item for item in patch if item not in target]
    if isinstance(patch, list) and isinstance(target, list) and field in SMP_MERGE_KEYS:
        key, merged = SMP_MERGE_KEYS[field], copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                merged.append(copy.deepcopy(item))
                continue
            index = next(
                (i for i, old in enumerate(merged) if isinstance(old, dict) and old.get(key) == item[key]), None
            )
            if item.get("$patch") == "delete":
                if index is not None:
                    del merged[index]
            elif index is None:
                merged.append(strategic_merge_patch({}, item))
            else:
                merged[index] = strategic_merge_patch(merged[index], item)
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/") and isinstance(result.get(key.split("/", 1)[1]), list):
            name = key.split("/", 1)[1]
            result[name] = [item for item in result[name] if item not in value]
        elif key.startswith("$"):
            continue
        elif value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def json_patch(doc: Any, ops: list[Obj]) -> Any:
    """RFC 6902 JSON patch; a failed `test` or a missing path raises 422 Invalid, as a real server does."""
    doc = copy.deepcopy(doc)
    for op in ops:
        try:
            kind, path = op["op"], _pointer(op["path"])
            if kind == "test":
                if _lookup(doc, path) != op.get("value"):
                    raise ValueError(f"test failed at {op['path']}")
            elif kind in ("add", "replace"):
                doc = _put(doc, path, copy.deepcopy(op["value"]), insert=kind == "add")
            elif kind == "remove":
                doc, _ = _take(doc, path)
            elif kind in ("move", "copy"):
                source = _pointer(op["from"])
                value = copy.deepcopy(_lookup(doc, source))
                if kind == "move":
                    doc, _ = _take(doc, source)
                doc = _put(doc, path, value, insert=True)
            else:
                raise ValueError(f"unknown op {kind!r}")
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise api_error(422, "Invalid", f"the server rejected our request: json patch {op!r}: {error}") from None
    return doc


def _pointer(path: str) -> list[str]:
    if path and not path.startswith("/"):
        raise ValueError(f"bad JSON pointer {path!r}")
    return [token.replace("~1", "/").replace("~0", "~") for token in path.split("/")[1:]]


def _lookup(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc


def _put(doc: Any, tokens: list[str], value: Any, *, insert: bool) -> Any:
    if not tokens:
        return value
    parent, last = _lookup(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if insert:
            parent.insert(index, value)
        else:
            parent[index] = value
    elif isinstance(parent, dict):
        if not insert and last not in parent:
            raise KeyError(last)
        parent[last] = value
    else:
        raise TypeError(f"cannot set {last!r} in a {type(parent).__name__}")
    return doc


def _take(doc: Any, tokens: list[str]) -> tuple[Any, Any]:
    if not tokens:
        return None, doc
    parent, last = _lookup(doc, tokens[:-1]), tokens[-1]
    return doc, parent.pop(int(last) if isinstance(parent, list) else last)


def label_selector(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """Compile a label selector: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`, comma = AND."""
    requirements: list[tuple[str, str, set[str]]] = []
    for term in re.split(r",(?![^()]*\))", selector or ""):
        if not term.strip():
            continue
        match = re.fullmatch(r"\s*(!?)([\w./-]+)\s*(?:(==|=|!=)\s*([\w./-]*)|\s(in|notin)\s*\(([^)]*)\))?\s*", term)
        if match is None or (match[1] and (match[3] or match[5])):
            raise api_error(400, "BadRequest", f"unable to parse requirement: {term!r}")
        negated, key, op, value, set_op, values = match.groups()
        allowed = {value} if op else {item.strip() for item in (values or "").split(",")}
        requirements.append((key, "!" if negated else op or set_op or "exists", allowed))

    def matches(labels: dict[str, str]) -> bool:
        return all(
            key in labels
            if op == "exists"
            else key not in labels
            if op == "!"
            else (labels.get(key) in allowed) == (op in ("=", "==", "in"))  # != and notin match absent keys
            for key, op, allowed in requirements
        )

    return matches


def field_selector(selector: str | None) -> Callable[[Obj], bool]:
    """Compile a field selector: `metadata.name=x`, `status.phase!=Running`, ... (any dotted path)."""
    checks: list[Callable[[Obj], bool]] = []
    for term in (selector or "").split(","):
        if term.strip():
            match = re.fullmatch(r"\s*([\w.]+)\s*(==|=|!=)\s*(.*?)\s*", term)
            if match is None:
                raise api_error(400, "BadRequest", f"invalid field selector: {term!r}")
            path, op, value = match.groups()
            equal = op != "!="
            checks.append(lambda obj, p=path, v=value, e=equal: (str(jsonpath(obj, "." + p) or "") == v) == e)
    return lambda obj: all(check(obj) for check in checks)


def jsonpath(obj: Any, path: str) -> Any:
    """The value at a simple JSONPath as used in printer columns: `.status.progress.step`, `.a[0].b`."""
    for name, index in re.findall(r"\.([^.\[\]]+)|\[(\d+)\]", path.strip("{}")):
        if name and isinstance(obj, dict):
            obj = obj.get(name)
        elif index and isinstance(obj, list) and int(index) < len(obj):
            obj = obj[int(index)]
        else:
            return None
    return obj


def human_age(timestamp: str | None) -> str:
    """Like kubectl's AGE column (k8s.io/apimachinery duration.HumanDuration), e.g. 42s, 5m10s, 3h, 2d4h."""
    if not timestamp:
        return "<unknown>"
    then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = max(0, int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds()))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def prune(value: Any, schema: Obj) -> Any:
    """Drop the fields that a structural schema does not know (unless x-kubernetes-preserve-unknown-fields)."""
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    if not isinstance(value, dict) or not (schema.get("type") == "object" or "properties" in schema):
        return value
    properties, extra = schema.get("properties") or {}, schema.get("additionalProperties")
    keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
    pruned = {}
    for key, item in value.items():
        if key in properties:
            pruned[key] = prune(item, properties[key])
        elif isinstance(extra, dict):
            pruned[key] = prune(item, extra)
        elif keep_unknown:
            pruned[key] = item
    return pruned


def apply_defaults(value: Any, schema: Obj) -> None:
    """Fill in the schema's `default`s in place, recursively (a defaulted `{}` gets its own defaults)."""
    if isinstance(value, dict):
        properties, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        for key, subschema in properties.items():
            if key not in value and "default" in subschema:
                value[key] = copy.deepcopy(subschema["default"])
            if key in value:
                apply_defaults(value[key], subschema)
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in properties:
                    apply_defaults(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


# --- the emulator -------------------------------------------------------------------------------------------


@attrs.define
class Change:
    """One committed write: ADDED (old is None), MODIFIED, or DELETED (new is None, old is the final state)."""

    rv: int
    resource: kmock.resource
    old: Obj | None
    new: Obj | None


@attrs.define(eq=False)
class Watch:
    resource: kmock.resource
    namespace: str | None
    matches: Callable[[Obj], bool]
    queue: asyncio.Queue[Obj | None] = attrs.field(factory=asyncio.Queue)

    def event(self, change: Change) -> Obj | None:
        """The event this watcher sees for a change: objects entering or leaving its selection become
        ADDED or DELETED, as on a real server."""
        if change.resource != self.resource:
            return None
        was = change.old is not None and self.matches(change.old)
        now = change.new is not None and self.matches(change.new)
        if was and now:
            return {"type": "MODIFIED", "object": change.new}
        if now:
            return {"type": "ADDED", "object": change.new}
        if was:
            return {"type": "DELETED", "object": change.new or change.old}
        return None


@attrs.define(kw_only=True)
class ClusterEmulator(kmock.KubernetesEmulator):
    """kmock's KubernetesEmulator with the state handling of a real API server.

    Objects live in kmock's `self.objects` (with their history); every write goes through `create`,
    `patch`, `replace` or `delete` here, whether it comes over HTTP (api=True) or from a test helper.
    Only registered resources (`self.resources`) are served; a CRD object registers its resource.
    """

    printer_columns: dict[kmock.resource, list[Obj]] = attrs.field(factory=dict)
    schemas: dict[kmock.resource, Obj] = attrs.field(factory=dict)
    calls: list[tuple[str, str, str | None, str | None]] = attrs.field(factory=list)  # verb, resource, ns, name
    changes: list[Change] = attrs.field(factory=list)
    custom: set[kmock.resource] = attrs.field(factory=set)  # resources defined by CRDs
    _rv: int = attrs.field(default=1000, init=False)
    _watches: set[Watch] = attrs.field(factory=set, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()  # discovery and the list/watch/get/create/patch/delete fallbacks
        self.fallback[kmock.method.PUT] << self._serve_replace
        self.fallback["get /api/"] << self._serve_api  # discovery also answers with a trailing slash
        self.fallback["get /apis/"] << self._serve_apis
        self.fallback["get /openapi/v3"] << self._serve_openapi_index
        self.fallback["get", re.compile(r"/openapi/v3/.+")] << self._serve_openapi

    # ---- registration

    def register_builtins(self, names: Iterable[str] = BUILTIN_RESOURCES) -> None:
        bundled = kmock.ResourcesArray()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # kmock 0.8 uses importlib.resources.read_binary
            bundled.load_bundled()
        for name in names:
            resource = kmock.resource(name)
            self.resources[resource] = bundled[resource]
            self.printer_columns[resource] = BUILTIN_COLUMNS.get(str(resource.plural), []) + [AGE_COLUMN]

    def _install_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        names = spec["names"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            resource = kmock.resource(spec["group"], version["name"], names["plural"])
            self.resources[resource] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular", names["kind"].lower()),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                shortnames=names.get("shortNames", []),
                categories=names.get("categories", []),
                subresources=set(version.get("subresources") or {}),
                verbs=ALL_VERBS,
            )
            self.custom.add(resource)
            self.printer_columns[resource] = version.get("additionalPrinterColumns") or [AGE_COLUMN]
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
                self.schemas[resource] = schema

    def _uninstall_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        for version in spec["versions"]:
            resource = kmock.resource(spec["group"], version["name"], spec["names"]["plural"])
            for key in [key for key in self._live_keys() if key[0] == resource]:
                self._remove(key, self._current(key) or {})
            for registry in (self.resources, self.printer_columns, self.schemas):
                registry.pop(resource, None)
            self.custom.discard(resource)

    def resolve(self, name: str | kmock.resource) -> kmock.resource:
        """A registered resource by kmock notation ('batch/v1/jobs') or by plural, singular, kind or short
        name ('jobs', 'job', 'Job', 'stj'); the core group wins ties, as in kubectl."""
        if isinstance(name, kmock.resource) and name in self.resources:
            return name
        if isinstance(name, str) and "/" in name and kmock.resource(name) in self.resources:
            return kmock.resource(name)
        wanted = str(name).lower()
        found = [
            resource
            for resource in self.resources
            for info in [self.resources[resource]]
            if wanted in {resource.plural, info.singular, (info.kind or "").lower(), *info.shortnames}
        ]
        found.sort(key=lambda resource: resource.group != "")
        if not found:
            raise KeyError(f"unknown resource {name!r}")
        return found[0]

    def _known(self, resource: kmock.resource | None) -> kmock.resource:
        if resource is None or resource not in self.resources:
            raise api_error(404, "NotFound", "the server could not find the requested resource")
        return resource

    # ---- storage

    def _key(self, resource: kmock.resource, namespace: str | None, name: str) -> tuple[Any, ...]:
        return (resource, namespace if self.resources[resource].namespaced else None, name)

    def _current(self, key: tuple[Any, ...]) -> Obj | None:
        if key in self.objects and not self.objects[key].deleted:
            return self.objects[key].last.raw
        return None

    def _live_keys(self) -> list[tuple[Any, ...]]:
        return [key for key, obj in self.objects.items() if not obj.deleted]

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _commit(self, key: tuple[Any, ...], old: Obj | None, new: Obj) -> Obj:
        rv = self._next_rv()
        new["metadata"]["resourceVersion"] = str(rv)
        if key in self.objects:
            self.objects[key].history.append(new)
        else:
            self.objects[key] = new
        self._publish(Change(rv, key[0], old, new))
        return new

    def _remove(self, key: tuple[Any, ...], old: Obj) -> Obj:
        final = copy.deepcopy(old)
        rv = self._next_rv()
        final["metadata"]["resourceVersion"] = str(rv)
        self.objects[key].delete()
        self._publish(Change(rv, key[0], final, None))  # DELETED carries the final state and resourceVersion
        if key[0] == CRDS:
            self._uninstall_crd(final)
        if key[0] == NAMESPACES:
            for other in [other for other in self._live_keys() if other[1] == key[2]]:
                self.delete(other[0], other[1], other[2])
        self._collect_garbage(final)
        return final

    def _publish(self, change: Change) -> None:
        self.changes.append(change)
        for watch in list(self._watches):
            event = watch.event(change)
            if event is not None:
                watch.queue.put_nowait(event)

    def _structural(self, resource: kmock.resource, obj: Obj) -> Obj:
        schema = self.schemas.get(resource)
        if schema is None:
            return obj
        # apiVersion, kind and metadata are never pruned, whether the schema lists them or not.
        kept = {key: obj[key] for key in ("apiVersion", "kind", "metadata") if key in obj}
        obj = prune(obj, schema)
        apply_defaults(obj, schema)
        return obj | kept

    def _ensure_namespace(self, namespace: str | None) -> None:
        if namespace is not None and NAMESPACES in self.resources and not self._current((NAMESPACES, None, namespace)):
            self.create(NAMESPACES, {"metadata": {"name": namespace}})

    # ---- reads

    def get(self, resource: kmock.resource, namespace: str | None, name: str) -> Obj:
        obj = self._current(self._key(resource, namespace, name))
        if obj is None:
            raise _not_found(resource, name)
        return obj

    def select(
        self,
        resource: kmock.resource,
        namespace: str | None = None,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[Obj]:
        matches = self._matcher(namespace, None, labels, fields)
        return [
            obj
            for key in self._live_keys()
            if key[0] == resource
            for obj in [self._current(key)]
            if obj is not None and matches(obj)
        ]

    def _matcher(
        self, namespace: str | None, name: str | None, labels: str | None, fields: str | None
    ) -> Callable[[Obj], bool]:
        by_labels, by_fields = label_selector(labels), field_selector(fields)

        def matches(obj: Obj) -> bool:
            meta = obj.get("metadata", {})
            return (
                (namespace is None or meta.get("namespace") == namespace)
                and (name is None or meta.get("name") == name)
                and by_labels(meta.get("labels") or {})
                and by_fields(obj)
            )

        return matches

    # ---- writes

    def create(self, resource: kmock.resource, body: Obj, namespace: str | None = None, *, api: bool = False) -> Obj:
        info = self.resources[self._known(resource)]
        if not isinstance(body, dict):
            raise api_error(400, "BadRequest", "the body of the request must be an object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if info.namespaced:
            if namespace and meta.get("namespace") not in (None, namespace):
                message = "the namespace of the provided object does not match the namespace sent on the request"
                raise api_error(400, "BadRequest", message)
            meta["namespace"] = namespace = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
            namespace = None
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise api_error(422, "Invalid", "name or generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = self._key(resource, namespace, meta["name"])
        if self._current(key) is not None:
            message = f'{_qualified(resource)} "{meta["name"]}" already exists'
            raise api_error(409, "AlreadyExists", message, name=meta["name"])
        if api and "status" in info.subresources:
            obj.pop("status", None)  # a real server ignores the status on create
        if resource == NAMESPACES:
            obj["status"] = {"phase": "Active"}
        obj["apiVersion"], obj["kind"] = _api_version(resource), info.kind
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(field, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        obj = self._structural(resource, obj)
        self._ensure_namespace(namespace)
        created = self._commit(key, None, obj)
        if resource == CRDS:
            self._install_crd(created)
            status = {
                "acceptedNames": created["spec"]["names"],
                "storedVersions": [v["name"] for v in created["spec"]["versions"] if v.get("storage")],
                "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}],
            }
            created = self.patch(CRDS, None, meta["name"], {"status": status}, subresource="status")
        return created

    def patch(
        self,
        resource: kmock.resource,
        namespace: str | None,
        name: str,
        patch: Obj | list[Obj],
        *,
        content_type: str | None = None,
        subresource: str | None = None,
        api: bool = False,
    ) -> Obj:
        """Patch an object. The content type defaults to a JSON patch for lists, a merge patch for dicts."""
        self._known(resource)
        old = self.get(resource, namespace, name)
        content_type = (content_type or "").split(";")[0].strip() or (
            "application/json-patch+json" if isinstance(patch, list) else "application/merge-patch+json"
        )
        if content_type == "application/json-patch+json" and isinstance(patch, list):
            candidate = json_patch(old, patch)
        elif content_type == "application/merge-patch+json" and isinstance(patch, dict):
            candidate = merge_patch(old, patch)
        elif content_type == "application/strategic-merge-patch+json" and isinstance(patch, dict):
            if resource in self.custom:  # as on a real server: custom resources have no strategic merge
                raise api_error(
                    415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}"
                )
            candidate = strategic_merge_patch(old, patch)
        else:
            message = f"the body of the request was in an unknown format - accepted media types include: {content_type}"
            raise api_error(415, "UnsupportedMediaType", message)
        requested_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
        if requested_rv is not None and requested_rv != old["metadata"]["resourceVersion"]:
            raise _conflict(resource, name)
        return self._update(resource, old, candidate, subresource=subresource, api=api)

    def replace(
        self,
        resource: kmock.resource,
        namespace: str | None,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        api: bool = False,
    ) -> Obj:
        """PUT: replace the whole object; a resourceVersion in the body must match the stored one."""
        old = self.get(self._known(resource), namespace, name)
        requested_rv = (body.get("metadata") or {}).get("resourceVersion")
        if requested_rv and requested_rv != old["metadata"]["resourceVersion"]:
            raise _conflict(resource, name)
        return self._update(resource, old, copy.deepcopy(body), subresource=subresource, api=api)

    def _update(self, resource: kmock.resource, old: Obj, candidate: Obj, *, subresource: str | None, api: bool) -> Obj:
        info = self.resources[resource]
        if subresource not in (None, "status") or (subresource == "status" and "status" not in info.subresources):
            raise api_error(404, "NotFound", "the server could not find the requested resource")
        if not isinstance(candidate, dict):
            raise api_error(422, "Invalid", "the patched object is not an object")
        if subresource == "status":  # only the status changes
            new = copy.deepcopy(old)
            new.pop("status", None)
            if candidate.get("status") is not None:
                new["status"] = candidate["status"]
        else:
            new = candidate
            if api and "status" in info.subresources:  # the main resource ignores status changes
                new.pop("status", None)
                if old.get("status") is not None:
                    new["status"] = copy.deepcopy(old["status"])
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        for field in ("name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion"):
            if field in old_meta:
                meta[field] = old_meta[field]
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
            if field in old_meta:
                meta[field] = old_meta[field]
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        new = self._structural(resource, new)
        if new == old:
            return old  # a no-op write changes nothing, not even the resourceVersion
        if {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
            k: v for k, v in old.items() if k not in ("metadata", "status")
        }:
            meta["generation"] = old_meta.get("generation", 1) + 1
        key = self._key(resource, old_meta.get("namespace"), old_meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(key, new)
        updated = self._commit(key, old, new)
        if resource == CRDS:
            self._install_crd(updated)
        return updated

    def delete(
        self,
        resource: kmock.resource,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: Obj | None = None,
    ) -> Obj:
        """Delete an object: with finalizers, only mark it (deletionTimestamp); otherwise remove it and let
        the garbage collector delete its dependents (or orphan them with propagation="Orphan")."""
        old = self.get(self._known(resource), namespace, name)
        meta = old["metadata"]
        for field, value in (preconditions or {}).items():
            if value is not None and meta.get(field) != value:
                raise _conflict(resource, name)
        propagation = propagation or ("Orphan" if resource in ORPHAN_BY_DEFAULT else "Background")
        if propagation not in ("Orphan", "Background", "Foreground"):
            raise api_error(400, "BadRequest", f"invalid propagationPolicy {propagation!r}")
        key = self._key(resource, meta.get("namespace"), name)
        if propagation == "Orphan":
            self._orphan(meta["uid"])
        if meta.get("deletionTimestamp"):
            return old
        if meta.get("finalizers"):
            new = copy.deepcopy(old)
            new["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0)
            new["metadata"]["generation"] = meta.get("generation", 1) + 1
            return self._commit(key, old, new)
        return self._remove(key, old)

    def _collect_garbage(self, owner: Obj) -> None:
        """Delete the dependents whose owners are all gone; drop the dangling reference from the others."""
        uid = owner["metadata"]["uid"]
        live_uids = {obj["metadata"]["uid"] for key in self._live_keys() for obj in [self._current(key)] if obj}
        for key in self._live_keys():
            obj = self._current(key)
            refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
            if obj is None or not any(ref.get("uid") == uid for ref in refs):
                continue
            if any(ref.get("uid") in live_uids for ref in refs):
                self._drop_owner(key, refs, uid)
            else:
                self.delete(key[0], key[1], key[2], propagation="Background")

    def _orphan(self, uid: str) -> None:
        for key in self._live_keys():
            refs = (self._current(key) or {}).get("metadata", {}).get("ownerReferences") or []
            if any(ref.get("uid") == uid for ref in refs):
                self._drop_owner(key, refs, uid)

    def _drop_owner(self, key: tuple[Any, ...], refs: list[Obj], uid: str) -> None:
        remaining = [ref for ref in refs if ref.get("uid") != uid]
        self.patch(key[0], key[1], key[2], {"metadata": {"ownerReferences": remaining or None}})

    # ---- watching

    def open_watch(
        self,
        resource: kmock.resource,
        namespace: str | None = None,
        name: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
        since: str | None = None,
        initial_events: bool = False,
    ) -> tuple[Watch, list[Obj]]:
        """Register a watcher; returns it with the backlog: the changes after `since`, or the current
        objects as ADDED (plus a BOOKMARK ending the initial events, if asked)."""
        watch = Watch(resource, namespace, self._matcher(namespace, name, labels, fields))
        backlog: list[Obj]
        if since not in (None, "", "0") and not initial_events:
            try:
                since_rv = int(str(since))
            except ValueError:
                raise api_error(400, "BadRequest", f"invalid resourceVersion {since!r}") from None
            backlog = [e for change in self.changes if change.rv > since_rv for e in [watch.event(change)] if e]
        else:
            objs = self.select(resource, namespace, labels, fields)
            backlog = [{"type": "ADDED", "object": obj} for obj in objs if watch.matches(obj)]
            if initial_events:
                backlog.append(self._bookmark(resource, {"k8s.io/initial-events-end": "true"}))
        self._watches.add(watch)
        return watch, backlog

    def close_watches(self) -> None:
        for watch in list(self._watches):
            watch.queue.put_nowait(None)

    def _bookmark(self, resource: kmock.resource, annotations: dict[str, str] | None = None) -> Obj:
        meta: Obj = {"resourceVersion": str(self._rv)}
        if annotations:
            meta["annotations"] = annotations
        kind = self.resources[resource].kind
        return {"type": "BOOKMARK", "object": {"apiVersion": _api_version(resource), "kind": kind, "metadata": meta}}

    async def _stream(
        self, watch: Watch, backlog: list[Obj], timeout: float | None, bookmarks: bool, table: str | None
    ) -> AsyncIterator[Obj | bytes]:
        yield b""  # send the headers now, even if no events come
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            for event in backlog:
                yield self._as_table(watch.resource, event, table)
            while True:
                wait = 30.0 if deadline is None else min(30.0, deadline - loop.time())
                if wait <= 0:
                    return
                try:
                    event = await asyncio.wait_for(watch.queue.get(), wait)
                except asyncio.TimeoutError:
                    if bookmarks and (deadline is None or loop.time() < deadline):
                        yield self._bookmark(watch.resource)
                    continue
                if event is None:
                    return
                yield self._as_table(watch.resource, event, table)
        finally:
            self._watches.discard(watch)

    def _as_table(self, resource: kmock.resource, event: Obj, table: str | None) -> Obj:
        if table is None or event["type"] == "BOOKMARK":
            return event
        return {"type": event["type"], "object": self._table(resource, [event["object"]], table)}

    # ---- HTTP

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.content_type in ("application/vnd.kubernetes.protobuf", "application/cbor"):
            # kubectl's generators (create job/namespace/...) send protobuf; a 415 makes them retry with JSON.
            message = f"the body of the request was in an unknown format: {raw_request.content_type}"
            return await self._render_error(api_error(415, "UnsupportedMediaType", message))
        match = NAMESPACES_PATH.fullmatch(raw_request.path)
        if match is None:
            return await super().__call__(raw_request)
        # kmock's URL parser reads /api/v1/namespaces/{x} as a namespace prefix, never as the namespaces
        # resource, and fails on /api/v1/namespaces; so these requests are parsed here.
        body = await raw_request.read()
        name, sub, method = match.group("name"), match.group("sub"), raw_request.method.upper()
        params = dict(raw_request.query)
        action = None
        if method == "GET":
            watching = params.get("watch", "").lower() in ("true", "1")
            action = kmock.action.WATCH if watching else kmock.action.FETCH if name else kmock.action.LIST
        elif method == "POST" and name is None:
            action = kmock.action.CREATE
        elif method in ("PATCH", "DELETE") and name is not None:
            action = kmock.action.UPDATE if method == "PATCH" else kmock.action.DELETE
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        request = kmock.Request(
            id=len(self._requests),
            raw_request=raw_request,
            url=raw_request.url,
            method=raw_request.method,
            params=params,
            headers=dict(raw_request.headers),
            cookies=dict(raw_request.cookies),
            body=body,
            text=body.decode("utf-8", "replace"),
            data=data,
            action=action,
            resource=NAMESPACES,
            name=name,
            subresource=sub,
        )
        self._requests.append(request)
        try:
            return await self._handle(request)
        except kmock.KubernetesError as error:
            return await self._render_error(error)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # Skip KubernetesEmulator._handle, which stores request bodies as they are: the fallbacks below
        # do the writes. User-defined kmock reactions (e.g. injected failures) still take precedence.
        self._record(request)
        return await super(kmock.KubernetesEmulator, self)._handle(request)

    def _record(self, request: kmock.Request) -> None:
        resource = request.resource
        if resource is None or resource.plural is None:
            self.calls.append((str(request.method.value).lower(), request.url.path, None, None))
            return
        verbs = {
            kmock.action.LIST: "list",
            kmock.action.WATCH: "watch",
            kmock.action.FETCH: "get",
            kmock.action.CREATE: "create",
            kmock.action.UPDATE: "patch",
            kmock.action.DELETE: "delete",
        }
        verb = verbs.get(request.action) or ("update" if request.method == kmock.method.PUT else "unknown")
        name = _qualified(resource) + (f"/{request.subresource}" if request.subresource else "")
        self.calls.append((verb, name, request.namespace, request.name))

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if not isinstance(exc, kmock.KubernetesError):
            return await super()._render_error(exc)
        status = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": exc.message,
            "reason": exc.reason,
            "details": exc.details or {},
            "code": exc.status,
        }
        return aiohttp.web.json_response(status, status=exc.status)

    @staticmethod
    def _reply(payload: Any, status: int = 200) -> kmock.Response:
        # Always with an explicit status: kmock keeps the last one on the (shared) fallback reaction.
        return kmock.Response(status=status, payload=payload)

    async def _serve_list(self, request: kmock.Request) -> kmock.Response:
        if request.resource is not None and request.resource.plural is None:  # /api/v1/, /apis/{group}/...
            discovery = self._serve_group if request.resource.version is None else self._serve_version
            return self._reply(await discovery(request))
        resource = self._known(request.resource)
        params = request.params
        items = self.select(resource, request.namespace, params.get("labelSelector"), params.get("fieldSelector"))
        if _wants_table(request):
            return self._reply(self._table(resource, items, params.get("includeObject")))
        kind = f"{self.resources[resource].kind}List"
        listing = {"apiVersion": _api_version(resource), "kind": kind, "metadata": {"resourceVersion": str(self._rv)}}
        return self._reply({**listing, "items": items})

    async def _serve_watch(self, request: kmock.Request) -> kmock.Response:
        resource = self._known(request.resource)
        params = request.params
        watch, backlog = self.open_watch(
            resource,
            request.namespace,
            request.name,
            labels=params.get("labelSelector"),
            fields=params.get("fieldSelector"),
            since=params.get("resourceVersion"),
            initial_events=params.get("sendInitialEvents") == "true",
        )
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        bookmarks = params.get("allowWatchBookmarks") == "true"
        table = params.get("includeObject", "Metadata") if _wants_table(request) else None
        stream = self._stream(watch, backlog, timeout, bookmarks, table)
        return kmock.Response(status=200, headers={"Content-Type": "application/json"}, payload=stream)

    async def _serve_fetch(self, request: kmock.Request) -> kmock.Response:
        resource = self._known(request.resource)
        if request.subresource not in (None, "status"):
            raise api_error(404, "NotFound", "the server could not find the requested resource")
        obj = self.get(resource, request.namespace, str(request.name))
        if _wants_table(request):
            return self._reply(self._table(resource, [obj], request.params.get("includeObject")))
        return self._reply(obj)

    async def _serve_create(self, request: kmock.Request) -> kmock.Response:
        return self._reply(self.create(self._known(request.resource), request.data, request.namespace, api=True), 201)

    async def _serve_update(self, request: kmock.Request) -> kmock.Response:
        content_type = request.headers.get("Content-Type", "")
        obj = self.patch(
            self._known(request.resource),
            request.namespace,
            str(request.name),
            request.data,
            content_type=content_type or "application/unknown",
            subresource=request.subresource,
            api=True,
        )
        return self._reply(obj)

    async def _serve_replace(self, request: kmock.Request) -> kmock.Response:
        if request.resource is None or request.name is None:
            raise kmock.KubernetesEndpointNotFoundError()
        if not isinstance(request.data, dict):
            raise api_error(400, "BadRequest", "the body of the request must be an object")
        obj = self.replace(
            self._known(request.resource),
            request.namespace,
            request.name,
            request.data,
            subresource=request.subresource,
            api=True,
        )
        return self._reply(obj)

    async def _serve_delete(self, request: kmock.Request) -> kmock.Response:
        resource = self._known(request.resource)
        options = request.data if isinstance(request.data, dict) else {}
        propagation = options.get("propagationPolicy") or request.params.get("propagationPolicy")
        orphan = options.get("orphanDependents", request.params.get("orphanDependents"))
        if propagation is None and orphan is not None:
            propagation = "Orphan" if str(orphan).lower() == "true" else "Background"
        obj = self.delete(
            resource,
            request.namespace,
            str(request.name),
            propagation=propagation,
            preconditions=options.get("preconditions"),
        )
        if self._current(self._key(resource, request.namespace, str(request.name))) is not None:
            return self._reply(obj)  # still there, waiting for its finalizers
        details = {
            "name": request.name,
            "group": resource.group,
            "kind": resource.plural,
            "uid": obj["metadata"]["uid"],
        }
        return self._reply({"apiVersion": "v1", "kind": "Status", "status": "Success", "details": details})

    def _table(self, resource: kmock.resource, objs: list[Obj], include: str | None) -> Obj:
        columns = [{"name": "Name", "type": "string", "jsonPath": ".metadata.name", "format": "name"}]
        columns += self.printer_columns.get(resource) or [AGE_COLUMN]
        rows = []
        for obj in objs:
            cells = []
            for column in columns:
                value = jsonpath(obj, column["jsonPath"])
                cells.append(human_age(value) if column.get("type") == "date" else value)
            row: Obj = {"cells": cells}
            if include == "Object":
                row["object"] = obj
            elif include != "None":
                metadata = {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                }
                row["object"] = metadata
            rows.append(row)
        definitions = [
            {
                "name": column["name"],
                "type": column.get("type", "string"),
                "format": column.get("format", ""),
                "description": column.get("description", ""),
                "priority": column.get("priority", 0),
            }
            for column in columns
        ]
        return {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "Table",
            "metadata": {"resourceVersion": str(self._rv)},
            "columnDefinitions": definitions,
            "rows": rows,
        }

    # ---- discovery

    # kubectl apply/create/replace validate by default: if the OpenAPI v3 document of the kind has a PATCH
    # operation that takes `fieldValidation`, kubectl leaves validation to the server; otherwise it wants
    # OpenAPI v2 as protobuf. So serve just that: one PATCH operation per kind, with no schemas.
    async def _serve_openapi_index(self, request: kmock.Request) -> Obj:
        paths = {"api/v1" if not r.group else f"apis/{r.group}/{r.version}" for r in self.resources}
        return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}"} for path in sorted(paths)}}

    async def _serve_openapi(self, request: kmock.Request) -> Obj:
        group_version = request.url.path.removeprefix("/openapi/v3/")
        paths = {}
        for resource in self.resources:
            if group_version == ("api/v1" if not resource.group else f"apis/{resource.group}/{resource.version}"):
                gvk = {"group": resource.group, "version": resource.version, "kind": self.resources[resource].kind}
                parameter = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                operation = {"x-kubernetes-group-version-kind": gvk, "parameters": [parameter], "responses": {}}
                paths[f"/{group_version}/{resource.plural}/{{name}}"] = {"patch": operation}
        if not paths:
            raise kmock.KubernetesResourceNotFoundError()
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.30.0"}, "paths": paths}

    async def _serve_api(self, request: kmock.Request) -> Obj:
        address = {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{request.url.host}:{request.url.port}"}
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [address]}

    def _get_resources(self) -> list[kmock.resource]:
        return list(self.resources)  # only what is registered, not whatever objects were stored

    async def _serve_version(self, request: kmock.Request) -> Obj:
        assert request.resource is not None
        group, version = request.resource.group, request.resource.version
        resources = [r for r in self.resources if r.group == group and r.version == version]
        if not resources and group != "":
            raise kmock.KubernetesResourceNotFoundError()
        entries = []
        for resource in resources:
            info = self.resources[resource]
            entries.append(
                {
                    "name": resource.plural,
                    "singularName": info.singular or "",
                    "namespaced": bool(info.namespaced),
                    "kind": info.kind,
                    "verbs": sorted(info.verbs),
                    "shortNames": sorted(info.shortnames),
                    "categories": sorted(info.categories),
                }
            )
            for sub in sorted(info.subresources):
                entries.append(
                    {
                        "name": f"{resource.plural}/{sub}",
                        "singularName": "",
                        "namespaced": bool(info.namespaced),
                        "kind": info.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        group_version = f"{group}/{version}" if group else str(version)  # kmock says "/v1" for the core group
        return {"apiVersion": "v1", "kind": "APIResourceList", "groupVersion": group_version, "resources": entries}


# --- the cluster: a server thread, a kubeconfig, helpers ---------------------------------------------------


class EmulatedCluster:
    """A ClusterEmulator served on 127.0.0.1 from a background thread, with a kubeconfig and helpers.

    Use `with EmulatedCluster() as cluster:` (or `async with`). The helpers are synchronous and
    thread-safe; `resource` arguments take kmock notation ('batch/v1/jobs') or names ('jobs', 'stj').
    """

    def __init__(
        self,
        *,
        crds: Iterable[Path | Obj] = (CRD_PATH,),
        builtins: Iterable[str] = BUILTIN_RESOURCES,
        namespaces: Iterable[str] = ("default",),
        timeout: float = 10.0,
    ) -> None:
        self.emulator = ClusterEmulator()
        self.emulator.register_builtins(builtins)
        self._crds = [yaml.safe_load(crd.read_text()) if isinstance(crd, Path) else crd for crd in crds]
        self._namespaces = list(namespaces)
        self.timeout = timeout
        self.url = ""
        self.kubeconfig = ""
        self._dir: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self.internal_errors: list[Exception] = []
        self._registries: weakref.WeakSet[Any] = weakref.WeakSet()

    # ---- lifecycle

    def start(self) -> EmulatedCluster:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="k8s-emulator", daemon=True)
        self._thread.start()
        if not ready.wait(self.timeout) or self._failure is not None:
            raise RuntimeError("the emulated cluster did not start") from self._failure
        try:
            self._dir = Path(tempfile.mkdtemp(prefix="k8s-emulator-"))
            self.kubeconfig = str(self._dir / "kubeconfig")
            Path(self.kubeconfig).write_text(yaml.safe_dump(self.kubeconfig_dict()))
            for crd in self._crds:
                self.create(CRDS, crd)
            for namespace in self._namespaces:
                self.call(self.emulator._ensure_namespace, namespace)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self.emulator.close_watches)
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(self.timeout)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._loop = self._thread = None

    def _run(self, ready: threading.Event) -> None:
        async def serve() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            async with self.emulator, kmock.Server(self.emulator) as server:
                self.url = f"http://{server.host}:{server.port}"
                ready.set()
                await self._stop.wait()
                self.internal_errors = [e for e in self.emulator.errors if not isinstance(e, kmock.KubernetesError)]

        try:
            asyncio.run(serve())
        except BaseException as error:  # reported by start()
            self._failure = error
            ready.set()

    def __enter__(self) -> EmulatedCluster:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
        if exc_info[0] is None and self.internal_errors:
            raise RuntimeError(f"the emulator failed while serving: {self.internal_errors!r}")

    async def __aenter__(self) -> EmulatedCluster:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: Any) -> None:
        await asyncio.to_thread(self.__exit__, *exc_info)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn` in the emulator's event loop (where the state lives) and return its result."""
        if self._loop is None or self._thread is None:
            raise RuntimeError("the emulated cluster is not running")
        if threading.get_ident() == self._thread.ident:
            return fn(*args, **kwargs)

        async def invoke() -> T:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(self.timeout)

    # ---- clients

    def kubeconfig_dict(self) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {}}],
            "contexts": [
                {"name": "emulator", "context": {"cluster": "emulator", "user": "emulator", "namespace": "default"}}
            ],
            "current-context": "emulator",
        }

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` built from the kubeconfig (the global default stays untouched)."""
        import kubernetes

        return kubernetes.config.new_client_from_config(config_file=self.kubeconfig)

    def make_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make this cluster the default of the kubernetes client (`client.ApiClient()`, `load_kube_config()`,
        so also kopf's default login) and of $KUBECONFIG, until monkeypatch undoes it. The client reads
        $KUBECONFIG once, on import, so setting the variable alone is not enough."""
        import kubernetes

        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
        monkeypatch.setenv("KUBECONFIG", self.kubeconfig)
        monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", self.kubeconfig)
        monkeypatch.setattr(kubernetes.client.Configuration, "_default", configuration)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this cluster (with a private discovery cache)."""
        binary = Path(sys.executable).parent / "kubectl"
        command = [str(binary) if binary.exists() else "kubectl", f"--kubeconfig={self.kubeconfig}"]
        command += [f"--cache-dir={self._dir}/cache", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    # ---- objects (as a controller or the kubelet would write them: status included, no admission)

    def resource(self, resource: str | kmock.resource) -> kmock.resource:
        return self.emulator.resolve(resource)

    def get(self, resource: str | kmock.resource, namespace: str | None, name: str) -> Obj | None:
        """A copy of the object, or None if it does not exist."""
        try:
            return copy.deepcopy(self.call(self.emulator.get, self.resource(resource), namespace, name))
        except kmock.KubernetesError as error:
            if error.status == 404:
                return None
            raise

    def list(
        self,
        resource: str | kmock.resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        objs = self.call(self.emulator.select, self.resource(resource), namespace, label_selector, field_selector)
        return copy.deepcopy(objs)

    def create(self, resource: str | kmock.resource, body: Obj, namespace: str | None = None) -> Obj:
        return copy.deepcopy(self.call(self.emulator.create, self.resource(resource), body, namespace))

    def patch(
        self,
        resource: str | kmock.resource,
        namespace: str | None,
        name: str,
        patch: Obj | list[Obj],
        *,
        subresource: str | None = None,
        content_type: str | None = None,
    ) -> Obj:
        """A merge patch (dict) or JSON patch (list); unlike over HTTP, it may change the status too."""
        obj = self.call(
            self.emulator.patch,
            self.resource(resource),
            namespace,
            name,
            patch,
            subresource=subresource,
            content_type=content_type,
        )
        return copy.deepcopy(obj)

    def set_status(self, resource: str | kmock.resource, namespace: str | None, name: str, status: Obj) -> Obj:
        """Merge `status` into the object's status (through the status subresource, if it has one)."""
        resource = self.resource(resource)
        subresource = "status" if "status" in self.emulator.resources[resource].subresources else None
        return self.patch(resource, namespace, name, {"status": status}, subresource=subresource)

    def delete(
        self, resource: str | kmock.resource, namespace: str | None, name: str, *, propagation: str | None = None
    ) -> Obj:
        return copy.deepcopy(
            self.call(self.emulator.delete, self.resource(resource), namespace, name, propagation=propagation)
        )

    def create_pod(
        self,
        namespace: str,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        phase: str = "Running",
        exit_code: int | None = None,
        owner: Obj | None = None,
        container: str = "trainer",
        image: str = "busybox",
    ) -> Obj:
        """A pod as the Job controller and the kubelet would leave it: labelled, owned, in a phase."""
        metadata: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if annotations:
            metadata["annotations"] = dict(annotations)
        if owner is not None:
            metadata["ownerReferences"] = [owner_reference(owner)]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {"containers": [{"name": container, "image": image}], "restartPolicy": "Never"},
            "status": pod_status(phase, container, exit_code, image),
        }
        return self.create("v1/pods", body)

    def set_pod_phase(
        self, namespace: str, name: str, phase: str, *, exit_code: int | None = None, message: str = ""
    ) -> Obj:
        """Move a pod to a phase; Succeeded/Failed terminate its first container with `exit_code` (0/1)
        and the termination `message`."""
        pod = self.get("v1/pods", namespace, name)
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        container = pod["spec"]["containers"][0]
        status = pod_status(phase, container["name"], exit_code, container.get("image", ""), message)
        return self.set_status("v1/pods", namespace, name, status)

    # ---- waiting and counting

    def wait_until(self, condition: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T:
        """Poll until `condition()` is truthy; return that value, or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        while not (result := condition()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)
        return result

    async def await_until(self, condition: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T:
        """As wait_until, but yields to the caller's event loop (e.g. to kopf running there) while polling."""
        deadline = time.monotonic() + timeout
        while not (result := condition()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            await asyncio.sleep(interval)
        return result

    def request_counts(self) -> collections.Counter[tuple[str, str]]:
        """API requests so far by (verb, resource), e.g. ('patch', 'scaletrainjobs.scaletrain.io/status'),
        ('watch', 'pods'), ('create', 'jobs.batch'); non-resource requests count as (method, path)."""
        return collections.Counter((verb, resource) for verb, resource, _, _ in list(self.emulator.calls))

    def reset_request_counts(self) -> None:
        self.call(self.emulator.calls.clear)

    # ---- kopf

    def connection_info(self) -> Any:
        import kopf

        return kopf.ConnectionInfo(server=self.url, default_namespace="default")

    def kopf_login(self, **_: Any) -> Any:
        """A kopf login handler: `kopf.on.login(registry=registry)(cluster.kopf_login)`."""
        return self.connection_info()

    def _log_in(self, registry: Any) -> None:
        import kopf

        if registry not in self._registries:  # once per registry, even if the operator runs several times
            kopf.on.login(registry=registry, id="k8s-emulator-login")(self.kopf_login)
            self._registries.add(registry)

    @contextlib.asynccontextmanager
    async def async_operator(
        self,
        registry: Any,
        *,
        namespaces: Iterable[str] = (),
        clusterwide: bool = False,
        settings: Any = None,
        timeout: float = 10.0,
    ) -> AsyncIterator[asyncio.Task[None]]:
        """Run `kopf.operator(...)` as a task of the current event loop until the block ends."""
        import kopf

        self._log_in(registry)
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            kopf.operator(
                registry=registry,
                settings=settings or kopf_test_settings(),
                namespaces=list(namespaces),
                clusterwide=clusterwide,
                stop_flag=stop,
                ready_flag=ready,
            )
        )
        waiter = asyncio.create_task(ready.wait())
        try:
            await asyncio.wait({task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # re-raise its failure
                raise RuntimeError("kopf exited before it was ready")
            if not ready.is_set():
                raise TimeoutError(f"kopf was not ready within {timeout}s")
            yield task
        finally:
            waiter.cancel()
            stop.set()
            await asyncio.wait_for(task, timeout)

    @contextlib.contextmanager
    def operator(
        self,
        registry: Any,
        *,
        namespaces: Iterable[str] = (),
        clusterwide: bool = False,
        settings: Any = None,
        memo: Any = None,
        timeout: float = 10.0,
    ) -> Iterator[threading.Thread]:
        """Run kopf in a thread with its own event loop until the block ends (for synchronous tests)."""
        import kopf

        self._log_in(registry)
        stop, ready = threading.Event(), threading.Event()
        failures: list[BaseException] = []
        kwargs = dict(
            registry=registry, settings=settings or kopf_test_settings(), stop_flag=stop, ready_flag=ready, memo=memo
        )

        def run() -> None:
            try:
                asyncio.run(kopf.operator(namespaces=list(namespaces), clusterwide=clusterwide, **kwargs))
            except BaseException as error:
                failures.append(error)

        thread = threading.Thread(target=run, name="kopf", daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + timeout
            while not ready.wait(0.02):
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError("kopf did not become ready") from (failures[0] if failures else None)
            yield thread
        finally:
            stop.set()
            thread.join(timeout)
        if failures:
            raise failures[0]


def kopf_test_settings(prefix: str = "scaletrain.io") -> Any:
    """kopf settings for tests: standalone (no peering), no cluster scanning (namespaces and CRDs are not
    watched), kopf's state in annotations (as the operator does; a CRD's schema would prune status.kopf)."""
    import kopf

    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    settings.scanning.disabled = True
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=prefix)
    settings.networking.request_timeout = 10
    return settings


def owner_reference(owner: Obj, *, controller: bool = True) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def pod_status(
    phase: str, container: str = "trainer", exit_code: int | None = None, image: str = "busybox", message: str = ""
) -> Obj:
    """A pod status in `phase`; Succeeded/Failed (or an explicit exit_code) mean a terminated container,
    with `message` as its termination message."""
    if exit_code is None and phase in ("Succeeded", "Failed"):
        exit_code = 0 if phase == "Succeeded" else 1
    if exit_code is not None:
        reason = "Completed" if exit_code == 0 else "Error"
        state: Obj = {"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": _now()}}
        if message:
            state["terminated"]["message"] = message
    elif phase == "Running":
        state = {"running": {"startedAt": _now()}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    running = phase == "Running" and exit_code is None
    status = {"name": container, "image": image, "imageID": image, "ready": running, "restartCount": 0}
    status.update(started=running, state=state)
    return {"phase": phase, "containerStatuses": [status]}


@pytest.fixture
def k8s_cluster() -> Iterator[EmulatedCluster]:
    """A fresh emulated cluster per test (import this fixture into a conftest or test module)."""
    with EmulatedCluster() as cluster:
        yield cluster
