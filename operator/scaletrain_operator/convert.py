"""Kubeflow training jobs as ScaleTrainJobs: what `scaletrain convert` runs.

A PyTorchJob (kubeflow.org/v1) or a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1, with the
ClusterTrainingRuntime or TrainingRuntime it references among the same documents) becomes one
ScaleTrainJob. Each source field lands in a first-class spec field where one exists, else in
spec.podTemplate, or is reported as unmapped with its path and why. Input that cannot make a job at all
raises ConversionError listing every problem; the job made is checked with parse_job. The mapping table
is in docs/convert.md.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from scaletrain_trainer.contract.validation import PathPart, ProblemsError, format_path

from .api import naming
from .api.models import PodSecurity, ScaleTrainJobSpec, VolumeMount, parse_job
from .render.children import TRAINER_SECURITY
from .validation import kube_rules
from .validation.merge import merge_under

PYTORCHJOB_API_VERSION = "kubeflow.org/v1"
TRAINJOB_API_VERSION = "trainer.kubeflow.org/v1alpha1"
JOB_API_VERSIONS = {"PyTorchJob": PYTORCHJOB_API_VERSION, "TrainJob": TRAINJOB_API_VERSION}
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")

# The PyTorchJob controller's names: its training container, and the port its Master listens on.
PYTORCHJOB_CONTAINER = "pytorch"
PYTORCHJOB_PORT_NAME = "pytorchjob-port"
PYTORCHJOB_DEFAULT_PORT = 23456  # what the controller declares when the container names no pytorchjob-port
REPLICA_TYPES = {"master": "Master", "worker": "Worker"}  # the controller camel-cases the keys it is given

# Kubeflow Trainer's: the trainer node's replicated Job and container are both named "node", and its
# runtimes mark that Job with the ancestor label.
TRAINER_NODE = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"

DEFAULT_GPU_RESOURCE = ScaleTrainJobSpec.model_fields["gpu_resource"].default
MOUNT_FIELDS = frozenset(f.alias for f in VolumeMount.model_fields.values())
POD_SECURITY_FIELDS = frozenset(f.alias for f in PodSecurity.model_fields.values())
SPEC_ORDER = tuple(f.alias for f in ScaleTrainJobSpec.model_fields.values())
NPROC_WORDS = ("auto", "cpu", "gpu")
RESOURCE_SECTIONS = ("requests", "limits")

# Env a source job may carry that the converted pods get from ScaleTrain (or, with several processes per
# pod, RANK and LOCAL_RANK from torchrun): a value from the source would be replaced or refused.
ENV_SET_FOR_THE_TRAINER = naming.RENDERED_ENV | {
    name: f"{source}, or torchrun for each process with more" for name, source in naming.SINGLE_PROCESS_RANK_ENV.items()
}
ENV_FIELDS = ("name", "value", "valueFrom")

# Metadata the API server sets on the source object: meaningless on a new one, so dropped without a word.
SERVER_SET_METADATA = frozenset(
    {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp"}
)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # describes the source object, not this one

# core/v1 Container fields ScaleTrain does not model: they go to podTemplate's trainer container.
CONTAINER_FIELDS_FOR_TEMPLATE = frozenset(
    "workingDir envFrom livenessProbe readinessProbe startupProbe lifecycle terminationMessagePath "
    "terminationMessagePolicy stdin stdinOnce tty volumeDevices resizePolicy restartPolicy "
    "restartPolicyRules".split()
)
# core/v1 PodSpec fields ScaleTrain has first-class fields for, and the ones it does not model (to podTemplate).
POD_FIELDS_AS_SPEC = {
    "nodeSelector": dict,
    "tolerations": list,
    "affinity": dict,
    "priorityClassName": str,
    "schedulerName": str,
    "serviceAccountName": str,
}
POD_FIELDS_FOR_TEMPLATE = frozenset(
    "initContainers activeDeadlineSeconds terminationGracePeriodSeconds dnsPolicy dnsConfig nodeName "
    "hostNetwork hostPID hostIPC hostUsers shareProcessNamespace imagePullSecrets hostAliases priority "
    "preemptionPolicy readinessGates runtimeClassName enableServiceLinks overhead "
    "topologySpreadConstraints setHostnameAsFQDN os schedulingGates resourceClaims resources".split()
)
POD_FIELDS_SET_BY_SCALETRAIN = {
    "restartPolicy": "ScaleTrain's pods never restart in place: a failed pod restarts the whole gang (maxRestarts)",
    "subdomain": "ScaleTrain's pods find each other through the job's own headless Service",
    "hostname": "ScaleTrain's pods are named NAME-g<G>-<index>, which the rank layout relies on",
    "ephemeralContainers": "a pod template cannot have ephemeral containers (kubectl debug adds them to a pod)",
}
# What ScaleTrain renders into the pod's securityContext regardless of the template: the same profile as
# the trainer's (Pod Security restricted).
POD_SECURITY_SET_BY_SCALETRAIN = {"seccompProfile": TRAINER_SECURITY["seccompProfile"]}

RESTART_POLICY_MESSAGE = (
    "restarts single pods; ScaleTrain restarts the whole gang from its last checkpoint, up to maxRestarts times"
)
GANG_SCHEDULING_MESSAGE = (
    "gang scheduling by Volcano or scheduler-plugins: ScaleTrain starts the gang as one Job; set schedulerName "
    "(and podTemplate labels or annotations) for a gang scheduler, scheduleTimeoutSeconds to fail when unschedulable"
)
RUN_POLICY_UNMAPPED = {
    "cleanPodPolicy": "ScaleTrain keeps a finished gang's pods (none left running) until ttlSecondsAfterFinished "
    "deletes the job",
    "managedBy": "the ScaleTrain operator manages the job",
    "schedulingPolicy": GANG_SCHEDULING_MESSAGE,
}
RENDEZVOUS_MESSAGE = (
    "ScaleTrain's gang meets at its rank-0 pod (PET_MASTER_ADDR, PET_MASTER_PORT, and PET_RDZV_ENDPOINT for "
    "torchrun --rdzv-backend=c10d)"
)
RDZV_BACKEND_ENV = "PET_RDZV_BACKEND"  # torchrun's --rdzv-backend, which the PyTorchJob controller set from rdzvBackend
RDZV_BACKEND_FLAGS = ("--rdzv-backend", "--rdzv_backend")
STATIC_RENDEZVOUS_MESSAGE = (
    f"the PyTorchJob controller set {RDZV_BACKEND_ENV} to it; ScaleTrain's pods do not, so torchrun meets in its "
    "static rendezvous at the rank-0 pod (PET_MASTER_ADDR, PET_MASTER_PORT), each pod's node rank its index: add "
    f"env {RDZV_BACKEND_ENV}=c10d to keep c10d (it meets at PET_RDZV_ENDPOINT, the rank-0 pod, and assigns node "
    "ranks itself)"
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
TRAINJOB_UNMAPPED = {
    "initializer": "ScaleTrain has no initializer step: download the data and model in an init container "
    "(podTemplate) or before the job",
    "runtimePatches": "not applied: add what it patches to the ScaleTrainJob (podTemplate for what has no field)",
    "labels": "labels of the JobSet and its Jobs: ScaleTrain labels its own children; pod labels go in podTemplate",
    "annotations": "annotations of the JobSet and its Jobs; pod annotations go in podTemplate",
    "managedBy": "the ScaleTrain operator manages the job",
}
TRAINER_GROUP = "trainer.kubeflow.org"
# A TrainJob's pod overrides: podTemplateOverrides[] {targetJobs, metadata, spec}, and podSpecOverrides[], its
# earlier form, with the spec's fields beside targetJobs. Kubeflow Trainer merges each, in order, into the pod
# template of the replicated Jobs it targets; of metadata only labels and annotations.
POD_OVERRIDES = ("podTemplateOverrides", "podSpecOverrides")
OVERRIDE_SECTION_FIELDS = {
    "metadata": frozenset({"labels", "annotations"}),
    "spec": frozenset(
        "serviceAccountName nodeSelector affinity tolerations volumes initContainers containers schedulingGates "
        "imagePullSecrets".split()
    ),
}
CONTAINER_OVERRIDE_FIELDS = ("name", "env", "volumeMounts")  # an override changes a runtime's container, never adds one
# How the strategic merge patch Kubeflow Trainer applies merges the lists an override reaches: item by item on
# their core/v1 patchMergeKey, containers field by field and other items whole (volumes are retainKeys);
# lists without a key (tolerations, affinity terms) are replaced.
OVERRIDE_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumes": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
}
OVERRIDE_FIELD_BY_FIELD = frozenset({"containers", "initContainers"})
JOB_SPEC_READ = ("template", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished")
REPLICATED_JOB_UNMAPPED = {
    "replicas": "ScaleTrain runs one Job of `nodes` pods per gang",
    "dependsOn": "ScaleTrain starts the trainer nodes at once: the steps they wait for are not converted",
    "groupName": "ScaleTrain runs one Job of `nodes` pods per gang",
}
JOB_SPEC_SET_BY_SCALETRAIN = ("parallelism", "completions")  # from nodes, as Kubeflow Trainer sets them from numNodes


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


def convert(documents: list[Any]) -> Conversion:
    """The ScaleTrainJob for the one PyTorchJob or TrainJob among `documents` (a TrainJob's runtime is
    another of them); raises ConversionError when there is none, or it cannot be converted."""
    index = _job_index(documents)
    job = documents[index]
    found = _Findings()
    for other, document in enumerate(documents):
        if other != index and _kind(document) not in RUNTIME_KINDS:
            found.drop(Where(document=f"document {other + 1}"), f"{_describe(document)}: not a job; not converted")
    metadata = _metadata(job, found)
    if job["kind"] == "PyTorchJob":
        fields = _pytorchjob_fields(job, found)
    else:
        fields = _trainjob_fields(job, documents, found)
    converted = {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": metadata,
        "spec": {key: fields[key] for key in SPEC_ORDER if fields.get(key) not in (None, [], {})},
    }
    if found.errors:
        raise ConversionError(found.errors)
    _check(converted)
    return Conversion(converted, found.unmapped)


def _job_index(documents: list[Any]) -> int:
    """Where the job is: exactly one PyTorchJob or TrainJob, of the API version convert reads."""
    jobs = [index for index, document in enumerate(documents) if _kind(document) in JOB_API_VERSIONS]
    if not jobs:
        kinds = ", ".join(_describe(document) for document in documents)
        message = f"found {kinds}; convert takes a PyTorchJob ({PYTORCHJOB_API_VERSION}) or a TrainJob "
        raise ConversionError([Finding(Where(("kind",)), message + f"({TRAINJOB_API_VERSION}) with its runtime")])
    if len(jobs) > 1:
        numbers = ", ".join(str(index + 1) for index in jobs)
        message = f"{len(jobs)} jobs (documents {numbers}); convert one job per file"
        raise ConversionError([Finding(Where(("kind",)), message)])
    job = documents[jobs[0]]
    expected = JOB_API_VERSIONS[job["kind"]]
    if job.get("apiVersion") != expected:
        message = f"{_brief(job.get('apiVersion'))}: convert reads {job['kind']} {expected}; export it in that version"
        raise ConversionError([Finding(Where(("apiVersion",)), message)])
    return jobs[0]


def _kind(document: Any) -> str | None:
    kind = _dig(document, "kind")
    return kind if isinstance(kind, str) else None


def _describe(document: Any) -> str:
    if not isinstance(document, dict):
        return f"a {type(document).__name__}"
    name = _dig(document, "metadata", "name")
    return f"{_kind(document) or 'an object without a kind'}{f' {name}' if isinstance(name, str) else ''}"


def _check(converted: dict[str, Any]) -> None:
    """The converted job must be one parse_job accepts: what it refuses stops the conversion."""
    try:
        parse_job(converted)
    except ProblemsError as error:
        where = Where(document="the converted ScaleTrainJob's")
        raise ConversionError([Finding(where.at(*p.path), p.message) for p in error.problems]) from None


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


# Metadata


def _metadata(job: dict[str, Any], found: _Findings) -> dict[str, Any]:
    """name, namespace, labels and annotations; the Kueue queue label becomes spec.queueName instead."""
    where = Where(("metadata",))
    metadata = _mapping(job, "metadata", Where(), found)
    name = _typed(metadata, "name", where, str, found)
    if metadata.get("name") in (None, ""):
        found.error(where.at("name"), "required: the ScaleTrainJob takes the job's name")
    labels = _mapping(metadata, "labels", where, found)
    annotations = _mapping(metadata, "annotations", where, found)
    converted = {
        "name": name,
        "namespace": _typed(metadata, "namespace", where, str, found),
        "labels": {key: value for key, value in labels.items() if key != naming.KUEUE_QUEUE_LABEL},
        "annotations": {key: value for key, value in annotations.items() if key != LAST_APPLIED},
    }
    for key in _others(metadata, {*converted, *SERVER_SET_METADATA}):
        found.drop(where.at(key), "not carried over: it describes the source object")
    return {key: value for key, value in converted.items() if value}


def _queue_name(job: dict[str, Any]) -> Any:
    return _dig(job, "metadata", "labels", naming.KUEUE_QUEUE_LABEL)


# PyTorchJob


def _pytorchjob_fields(job: dict[str, Any], found: _Findings) -> dict[str, Any]:
    where = Where(("spec",))
    spec = _mapping(job, "spec", Where(), found)
    for key in _others(spec, ("runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode")):
        found.drop(where.at(key), "not a PyTorchJob spec field")
    replicas = _replica_specs(spec, where, found)
    counts = {kind: _replica_count(kind, *replicas[kind], found) for kind in replicas}
    nodes = sum(counts.values())
    if replicas and not nodes:
        found.error(where.at("pytorchReplicaSpecs"), "no replicas: give Worker (or Master) 1 replica or more")
    if not nodes:
        return {}
    # ScaleTrain's pods are all alike: the Worker's template describes all the source's pods but rank 0,
    # so it is the one kept; a job without Workers keeps the Master's.
    kept = "Worker" if counts.get("Worker") else "Master"
    kept_spec, kept_where = replicas[kept]
    if "Master" in replicas and "Worker" in replicas:
        _report_master_differences(replicas["Master"], replicas["Worker"][0], found)
    fields, container_where = _pod_fields(
        kept_spec.get("template"), kept_where.at("template"), PYTORCHJOB_CONTAINER, found
    )
    _require_command(fields, container_where, found)
    restart_policy = _typed(kept_spec, "restartPolicy", kept_where, str, found)
    if restart_policy not in (None, "Never"):
        found.drop(kept_where.at("restartPolicy"), f"{restart_policy} {RESTART_POLICY_MESSAGE}")
    elastic = _elastic_policy(spec, where, nodes, fields, found)
    fields |= _run_policy(spec, where, restart_policy, found)
    fields["nodes"] = nodes
    fields["masterPort"] = _pytorchjob_master_port(replicas["Master" if counts.get("Master") else "Worker"][0], elastic)
    fields["procsPerNode"] = _pytorchjob_procs(spec, where, elastic, fields, found)
    fields["queueName"] = _queue_name(job)
    return fields


def _replica_specs(spec: dict[str, Any], where: Where, found: _Findings) -> dict[str, tuple[dict[str, Any], Where]]:
    """Master and Worker, each with where it is (the controller takes the type names in any case)."""
    at = where.at("pytorchReplicaSpecs")
    replica_specs = _mapping(spec, "pytorchReplicaSpecs", where, found)
    if spec.get("pytorchReplicaSpecs") in (None, {}):
        found.error(at, "required: a Worker (and optionally a Master) replica spec")
    replicas = {}
    for key, replica in replica_specs.items():
        kind = REPLICA_TYPES.get(key.lower()) if isinstance(key, str) else None
        if kind is None:
            found.error(at.at(key), "not a PyTorchJob replica type; use Master and Worker")
        elif not isinstance(replica, dict):
            found.error(at.at(key), f"must be a mapping (a replica spec), not {type(replica).__name__}")
        else:
            replicas[kind] = (replica, at.at(key))
    return replicas


def _replica_count(kind: str, replica: dict[str, Any], where: Where, found: _Findings) -> int:
    count = _typed(replica, "replicas", where, int, found)
    count = 1 if count is None else count  # the controller's default
    if count < 0 or (kind == "Master" and count > 1):
        found.error(where.at("replicas"), f"{count}: a PyTorchJob has 0 or 1 Master, and 0 or more Workers")
        return 0
    return count


def _report_master_differences(master: tuple[dict[str, Any], Where], worker: dict[str, Any], found: _Findings) -> None:
    master_spec, where = master
    for path in _differences(_comparable(master_spec), _comparable(worker)):
        here, there = _whole_or_unset(_lookup(master_spec, path)), _whole_or_unset(_lookup(worker, path))
        found.drop(where.at(*path), f"differs from Worker's ({here} here, {there} there): the Worker's is kept")


def _comparable(replica: dict[str, Any]) -> dict[str, Any]:
    """A replica spec without what is not the pods' shape: the replica count, and the pytorchjob-port
    (masterPort, which the controller declares in every replica's container)."""
    shape = copy.deepcopy({key: value for key, value in replica.items() if key != "replicas"})
    container = _named(_dig(shape, "template", "spec", "containers"), PYTORCHJOB_CONTAINER)
    if container is not None and isinstance(container.get("ports"), list):
        container["ports"] = [port for port in container["ports"] if _dig(port, "name") != PYTORCHJOB_PORT_NAME]
    return shape


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


def _whole_or_unset(value: Any) -> str:
    """A value as JSON, whole: two values cut short to a common prefix would hide what differs."""
    return "unset" if value is _MISSING else json.dumps(value, default=str)


def _run_policy(spec: dict[str, Any], where: Where, restart_policy: str | None, found: _Findings) -> dict[str, Any]:
    at = where.at("runPolicy")
    policy = _mapping(spec, "runPolicy", where, found)
    fields: dict[str, Any] = {
        "activeDeadlineSeconds": _typed(policy, "activeDeadlineSeconds", at, int, found),
        "ttlSecondsAfterFinished": _typed(policy, "ttlSecondsAfterFinished", at, int, found),
        "suspend": _typed(policy, "suspend", at, bool, found),
    }
    backoff_limit = _typed(policy, "backoffLimit", at, int, found)
    if backoff_limit is not None:
        fields["maxRestarts"] = _max_restarts(backoff_limit, at.at("backoffLimit"), found)
    elif restart_policy == "Never":  # the source restarts nothing: a failed pod fails the job
        fields["maxRestarts"] = 0
    for key in _others(policy, ("activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend", "backoffLimit")):
        if key == "schedulingPolicy":
            _drop_each_setting(policy[key], at.at(key), GANG_SCHEDULING_MESSAGE, found)
        else:
            found.drop(at.at(key), RUN_POLICY_UNMAPPED.get(key, "not a PyTorchJob runPolicy field"))
    return fields


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


def _elastic_policy(
    spec: dict[str, Any], where: Where, nodes: int, fields: dict[str, Any], found: _Findings
) -> tuple[dict[str, Any], Where]:
    """The elastic policy, its fields ScaleTrain cannot keep reported: nProcPerNode and rdzvPort are read
    by the callers, and replica bounds equal to the gang's size lose nothing. rdzvBackend was the
    controller's PET_RDZV_BACKEND, which ScaleTrain does not set: lost unless the training container
    (`fields`) picks the backend itself, and then kept only for c10d, which the rendered env serves."""
    at = where.at("elasticPolicy")
    policy = _mapping(spec, "elasticPolicy", where, found)
    for key in _others(policy, ("nProcPerNode", "rdzvPort")):
        value = policy[key]
        if key in ("minReplicas", "maxReplicas") and value != nodes:
            found.drop(at.at(key), f"{_brief(value)}: {FIXED_GANG_MESSAGE} ({nodes})")
        elif key == "rdzvBackend" and not _picks_rendezvous_backend(fields):
            found.drop(at.at(key), f"{_brief(value)}: {STATIC_RENDEZVOUS_MESSAGE}")
        elif key == "rdzvBackend" and value != "c10d":
            found.drop(at.at(key), f"{_brief(value)}: {RENDEZVOUS_MESSAGE}")
        elif key not in ("minReplicas", "maxReplicas", "rdzvBackend"):
            found.drop(at.at(key), ELASTIC_UNMAPPED.get(key, "not a PyTorchJob elasticPolicy field"))
    return policy, at


def _picks_rendezvous_backend(fields: dict[str, Any]) -> bool:
    """Whether the training container chooses torchrun's rendezvous backend itself: a flag in its command
    or args (a word of a `bash -c` script too), or env PET_RDZV_BACKEND."""
    words = [word for word in [*(fields.get("command") or []), *(fields.get("args") or [])] if isinstance(word, str)]
    return any(flag in word for word in words for flag in RDZV_BACKEND_FLAGS) or any(
        var["name"] == RDZV_BACKEND_ENV for var in fields.get("env") or []
    )


def _pytorchjob_master_port(host: dict[str, Any], elastic: tuple[dict[str, Any], Where]) -> Any:
    """The rendezvous port: the elastic rdzvPort, else the pytorchjob-port of the replica that hosts
    rank 0 (`host`: the Master, else the Workers), else the controller's default."""
    policy, _ = elastic
    if policy.get("rdzvPort") is not None:
        return policy["rdzvPort"]
    container = _named(_dig(host, "template", "spec", "containers"), PYTORCHJOB_CONTAINER)
    port = _named(_dig(container, "ports"), PYTORCHJOB_PORT_NAME)
    return PYTORCHJOB_DEFAULT_PORT if port is None else port.get("containerPort")


def _pytorchjob_procs(
    spec: dict[str, Any], where: Where, elastic: tuple[dict[str, Any], Where], fields: dict[str, Any], found: _Findings
) -> int | None:
    """spec.nprocPerNode, else the deprecated elasticPolicy.nProcPerNode. Unset is the controller's auto,
    with which it counts one process per pod in WORLD_SIZE, as ScaleTrain's default does on CPU."""
    policy, policy_where = elastic
    given = _first_given(spec, where, "nprocPerNode", policy, policy_where, "nProcPerNode")
    return _procs_per_node(*given, fields.get("gpusPerNode", 0), None, found) if given else None


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


# TrainJob and its runtime


def _trainjob_fields(job: dict[str, Any], documents: list[Any], found: _Findings) -> dict[str, Any]:
    where = Where(("spec",))
    spec = _mapping(job, "spec", Where(), found)
    for key in _others(spec, ("runtimeRef", "trainer", "suspend", "activeDeadlineSeconds", *POD_OVERRIDES)):
        found.drop(where.at(key), TRAINJOB_UNMAPPED.get(key, "not a TrainJob spec field"))
    runtime = _runtime(spec, where, documents, found)
    if runtime is None:
        return {}
    runtime_spec, runtime_where = runtime
    jobset = _jobset_spec(runtime_spec, runtime_where, found)
    node = _trainer_node(*jobset, found)
    if node is None:
        return {}
    job_spec, job_where, node_name = node
    overrides = _pod_overrides(spec, where, job_spec.get("template"), node_name, found)
    fields, container_where = _overridden_pod_fields(
        job_spec.get("template"), job_where.at("template"), overrides, found
    )
    trainer_where = where.at("trainer")
    trainer = _mapping(spec, "trainer", where, found)
    fields |= _trainer_overrides(trainer, trainer_where, fields.get("env", []), found)
    _require_command(fields, container_where, found)
    nodes, torch = _ml_policy(runtime_spec, runtime_where, found)
    trainer_nodes = _typed(trainer, "numNodes", trainer_where, int, found)
    fields["nodes"] = trainer_nodes if trainer_nodes is not None else nodes
    fields["procsPerNode"] = _trainjob_procs(trainer, trainer_where, torch, fields, found)
    fields |= _trainjob_lifecycle(spec, where, (job_spec, job_where), jobset, found)
    fields["queueName"] = _queue_name(job)
    return fields


def _runtime(
    spec: dict[str, Any], where: Where, documents: list[Any], found: _Findings
) -> tuple[dict[str, Any], Where] | None:
    """The spec of the runtime the TrainJob references, found among the documents, with where it is."""
    at = where.at("runtimeRef")
    ref = _mapping(spec, "runtimeRef", where, found)
    name = _typed(ref, "name", at, str, found)
    kind = _typed(ref, "kind", at, str, found) or RUNTIME_KINDS[0]
    group = _typed(ref, "apiGroup", at, str, found)
    if name is None:
        found.error(at.at("name"), "required: the name of the runtime the TrainJob runs on")
        return None
    if kind not in RUNTIME_KINDS or group not in (None, TRAINER_GROUP):
        found.error(at, f"{kind} {name}: convert reads Kubeflow Trainer runtimes, {' or '.join(RUNTIME_KINDS)}")
        return None
    for document in documents:
        if _kind(document) == kind and _dig(document, "metadata", "name") == name:
            runtime_where = Where(document=f"{kind} {name}")
            return _mapping(document, "spec", runtime_where, found), runtime_where.at("spec")
    fix = f"add it as another YAML document (kubectl get {kind.lower()} {name} -o yaml)"
    found.error(at, f"{kind} {name} is not in the input: {fix}")
    return None


def _jobset_spec(runtime_spec: dict[str, Any], where: Where, found: _Findings) -> tuple[dict[str, Any], Where]:
    """The runtime's JobSet spec, with where it is; the JobSet's own metadata is reported."""
    template_where = where.at("template")
    template = _mapping(runtime_spec, "template", where, found)
    for key in _others(template, ("spec",)):
        found.drop(template_where.at(key), "the JobSet's metadata: ScaleTrain labels its own children")
    return _mapping(template, "spec", template_where, found), template_where.at("spec")


def _trainer_node(jobset: dict[str, Any], where: Where, found: _Findings) -> tuple[dict[str, Any], Where, Any] | None:
    """The Job spec of the trainer nodes, with where it is and the name of their replicated Job; the
    runtime's other steps are reported."""
    at = where.at("replicatedJobs")
    node = None
    for index, replicated in enumerate(_list(jobset, "replicatedJobs", where, found)):
        if node is None and _is_trainer_node(replicated):
            node = (*_node_job_spec(replicated, at.at(index), found), replicated.get("name"))
        else:
            step = _dig(replicated, "name") or index
            message = f"the {step} step: ScaleTrain runs the trainer nodes only; run it before the job, or as an "
            found.drop(at.at(index), message + "init container in podTemplate")
    if node is None:
        found.error(at, f"no replicated Job named {TRAINER_NODE} (the trainer nodes): add it to the runtime")
    return node


def _is_trainer_node(replicated: Any) -> bool:
    return _dig(replicated, "name") == TRAINER_NODE or (
        _dig(replicated, "template", "metadata", "labels", ANCESTOR_LABEL) == ANCESTOR_TRAINER
    )


def _node_job_spec(replicated: dict[str, Any], where: Where, found: _Findings) -> tuple[dict[str, Any], Where]:
    """The trainer nodes' Job spec; what of their replicated Job and Job template ScaleTrain does not keep
    is reported (the pod template, backoffLimit and the deadlines are read by the callers)."""
    for key in _others(replicated, ("name", "template")):
        if key != "replicas" or replicated[key] != 1:
            found.drop(where.at(key), REPLICATED_JOB_UNMAPPED.get(key, "not a replicated Job field"))
    template_where = where.at("template")
    template = _mapping(replicated, "template", where, found)
    metadata = _mapping(template, "metadata", template_where, found)
    labels = metadata.get("labels")
    if isinstance(labels, dict):
        metadata = metadata | {"labels": {k: v for k, v in labels.items() if k != ANCESTOR_LABEL}}
    for key in metadata:
        if metadata[key]:
            found.drop(template_where.at("metadata", key), "the Job's metadata: pod labels go in podTemplate")
    job_where = template_where.at("spec")
    job_spec = _mapping(template, "spec", template_where, found)
    for key in _others(job_spec, {*JOB_SPEC_READ, *JOB_SPEC_SET_BY_SCALETRAIN}):
        found.drop(job_where.at(key), "ScaleTrain renders the Job itself: this setting of it is not kept")
    return job_spec, job_where


PodOverride = tuple[str, dict[str, Any], Where]  # the section of the pod template it patches, the patch, where it is


def _pod_overrides(
    spec: dict[str, Any], where: Where, template: Any, node_name: Any, found: _Findings
) -> list[PodOverride]:
    """The TrainJob's pod overrides of the trainer nodes' pod template (`template`), in the order Kubeflow
    Trainer merges them; what of them does not reach the trainer nodes is reported field by field."""
    patches: list[PodOverride] = []
    for key in POD_OVERRIDES:
        at = where.at(key)
        for index, override in enumerate(_list(spec, key, where, found)):
            if not isinstance(override, dict):
                found.error(at.at(index), f"must be a mapping (a pod override), not {type(override).__name__}")
                continue
            sections = _override_sections(override, at.at(index), key, found)
            targets = _override_targets(override, at.at(index), node_name, found)
            for section, patch, section_where in sections:
                if node_name in targets:
                    patches.append(
                        (section, _override_patch(section, patch, section_where, template, found), section_where)
                    )
                else:
                    targeted = ", ".join(map(str, targets)) or "no replicated Job"
                    message = f"this override targets {targeted}, not the trainer nodes ({node_name}), the only pods "
                    for field in patch:
                        found.drop(section_where.at(field), message + "ScaleTrain runs: not applied")
    return patches


def _override_sections(
    override: dict[str, Any], where: Where, kind: str, found: _Findings
) -> list[tuple[str, dict[str, Any], Where]]:
    """(section, its fields, where they are) of a pod override: a podTemplateOverride's metadata and spec,
    a podSpecOverride's own fields (its spec)."""
    if kind == "podSpecOverrides":
        return [("spec", {key: value for key, value in override.items() if key != "targetJobs"}, where)]
    for key in _others(override, ("targetJobs", *OVERRIDE_SECTION_FIELDS)):
        found.drop(where.at(key), "not a PodTemplateOverride field")
    return [
        (section, _mapping(override, section, where, found), where.at(section)) for section in OVERRIDE_SECTION_FIELDS
    ]


def _override_targets(override: dict[str, Any], where: Where, node_name: Any, found: _Findings) -> list[Any]:
    """The names of the replicated Jobs a pod override targets; the targets besides the trainer nodes are
    reported when it targets them too."""
    at = where.at("targetJobs")
    names = []
    for index, target in enumerate(_list(override, "targetJobs", where, found)):
        if not isinstance(target, dict) or not isinstance(target.get("name"), str):
            found.error(at.at(index), "must be a mapping with a name (the replicated Job it targets)")
        else:
            names.append(target["name"])
    if node_name in names:
        for index, name in enumerate(names):
            if name != node_name:
                found.drop(at.at(index), f"{name}: ScaleTrain runs the trainer nodes ({node_name}) only")
    return names


def _override_patch(
    section: str, fields: dict[str, Any], where: Where, template: Any, found: _Findings
) -> dict[str, Any]:
    """The part of a pod override's section that Kubeflow Trainer merges into the pod template; the rest
    is reported field by field."""
    patch = {}
    for key, value in fields.items():
        if key not in OVERRIDE_SECTION_FIELDS[section]:
            found.drop(where.at(key), f"not a field of a pod override's {section}: Kubeflow Trainer does not apply it")
        elif key in OVERRIDE_FIELD_BY_FIELD:
            patch[key] = _container_overrides(fields, key, where, _dig(template, "spec", key), found)
        else:
            patch[key] = value
    return patch


def _container_overrides(
    fields: dict[str, Any], key: str, where: Where, runtime_containers: Any, found: _Findings
) -> list[dict[str, Any]]:
    """A pod override's containers (or initContainers): each changes the runtime's container of its name,
    its env and volumeMounts only; one the runtime lacks is reported, as Kubeflow Trainer refuses it."""
    at = where.at(key)
    present = (
        [_dig(container, "name") for container in runtime_containers] if isinstance(runtime_containers, list) else []
    )
    kept = []
    for index, container in enumerate(_list(fields, key, where, found)):
        if not isinstance(container, dict) or not isinstance(container.get("name"), str):
            found.error(at.at(index), "must be a mapping with a name (a container override)")
        elif container["name"] not in present:
            message = f"the runtime's trainer node pod has no {key} entry named {container['name']}, which Kubeflow "
            found.drop(at.at(index), message + "Trainer requires of an override: not applied")
        else:
            for field in _others(container, CONTAINER_OVERRIDE_FIELDS):
                found.drop(
                    at.at(index, field), "not a field of a container override: Kubeflow Trainer does not apply it"
                )
            kept.append({field: container[field] for field in CONTAINER_OVERRIDE_FIELDS if field in container})
    return kept


def _overridden_pod_fields(
    template: Any, where: Where, overrides: list[PodOverride], found: _Findings
) -> tuple[dict[str, Any], Where | None]:
    """_pod_fields of the trainer nodes' pod template with the pod overrides merged in, as Kubeflow Trainer
    merges them; a finding about a value an override supplied names the override's field."""
    origins: dict[Where, Where] = {}
    for section, patch, patch_where in overrides:
        current = _dig(template, section)
        # A template or section of the wrong type is left as it is, for _pod_fields to report.
        if isinstance(template, dict) and isinstance(current if current is not None else {}, dict):
            merged = _overlay(current or {}, patch, where.at(section), patch_where, origins)
            template = template | {section: merged}
    template_found = _Findings()
    fields, container_where = _pod_fields(template, where, TRAINER_NODE, template_found)
    found.take(template_found, origins)
    return fields, container_where


def _overlay(
    base: Any, patch: Any, where: Where, source: Where, origins: dict[Where, Where], field: PathPart | None = None
) -> Any:
    """`patch` (at `source`) merged over `base` (at `where`) as a strategic merge patch merges a pod
    template: mappings key by key, the lists of OVERRIDE_MERGE_KEYS item by item, anything else replaced.
    Where each value of the patch lands is recorded in `origins`. Neither input is modified."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _overlay(base.get(key), value, where.at(key), source.at(key), origins, key)
        return merged
    key = OVERRIDE_MERGE_KEYS.get(field) if isinstance(field, str) else None
    if key is not None and _keyed(base, key) and _keyed(patch, key):
        merged_list = list(base)
        for index, item in enumerate(patch):
            position = next((i for i, old in enumerate(merged_list) if old[key] == item[key]), len(merged_list))
            if position == len(merged_list):
                merged_list.append(item)
                _record(origins, where.at(position), source.at(index))
            elif field in OVERRIDE_FIELD_BY_FIELD:
                merged_list[position] = _overlay(
                    merged_list[position], item, where.at(position), source.at(index), origins
                )
            else:
                merged_list[position] = item
                _record(origins, where.at(position), source.at(index))
        return merged_list
    _record(origins, where, source)
    return patch


def _keyed(items: Any, key: str) -> bool:
    return isinstance(items, list) and all(isinstance(item, dict) and key in item for item in items)


def _record(origins: dict[Where, Where], where: Where, source: Where) -> None:
    """Record that the value at `where` came from `source`, replacing what was recorded inside it."""
    for inside in [w for w in origins if w.document == where.document and w.path[: len(where.path)] == where.path]:
        del origins[inside]
    origins[where] = source


def _ml_policy(
    runtime_spec: dict[str, Any], where: Where, found: _Findings
) -> tuple[int, tuple[dict[str, Any], Where]]:
    """(numNodes, the torch policy with where it is). A runtime for another launcher cannot be converted;
    elastic scaling is reported."""
    at = where.at("mlPolicy")
    policy = _mapping(runtime_spec, "mlPolicy", where, found)
    for key in _others(policy, ("numNodes", "torch")):
        found.error(at.at(key), "not a torch runtime: ScaleTrain runs torchrun; convert takes torch runtimes")
    for key in _others(runtime_spec, ("mlPolicy", "template")):
        found.drop(where.at(key), GANG_SCHEDULING_MESSAGE if key == "podGroupPolicy" else "not a runtime spec field")
    torch_where = at.at("torch")
    torch = _mapping(policy, "torch", at, found)
    for key in _others(torch, ("numProcPerNode",)):
        if key == "elasticPolicy":
            restarts = {"maxRestarts": ELASTIC_UNMAPPED["maxRestarts"]}
            _drop_each_setting(torch[key], torch_where.at(key), FIXED_GANG_MESSAGE, found, restarts)
        else:
            found.drop(torch_where.at(key), "not a torch mlPolicy field")
    nodes = _typed(policy, "numNodes", at, int, found)
    return (1 if nodes is None else nodes), (torch, torch_where)  # 1: the runtime's default


def _trainer_overrides(
    trainer: dict[str, Any], where: Where, runtime_env: list[dict[str, Any]], found: _Findings
) -> dict[str, Any]:
    """What TrainJob.spec.trainer sets over the runtime's node container: image, command and args replace
    it, env is merged by name, resourcesPerNode replaces the resources (GPUs included)."""
    overrides: dict[str, Any] = {}
    if trainer.get("image") is not None:
        overrides["image"] = _typed(trainer, "image", where, str, found)
    for key in ("command", "args"):
        if trainer.get(key) is not None:
            overrides[key] = _strings(trainer, key, where, found)
    if trainer.get("env") is not None:
        env = _env(_list(trainer, "env", where, found), where.at("env"), found)
        overrides["env"] = list(
            ({var["name"]: var for var in runtime_env} | {var["name"]: var for var in env}).values()
        )
    if trainer.get("resourcesPerNode") is not None:
        at = where.at("resourcesPerNode")
        resource_fields, claims = _resources(_mapping(trainer, "resourcesPerNode", where, found), at, found)
        overrides |= {"gpusPerNode": None, "gpuResource": None} | resource_fields
        if claims:
            found.drop(at.at("claims"), "resource claims: put them in podTemplate's trainer container")
    for key in _others(trainer, ("image", "command", "args", "env", "resourcesPerNode", "numNodes", "numProcPerNode")):
        found.drop(where.at(key), "not a TrainJob trainer field")
    return overrides


def _trainjob_procs(
    trainer: dict[str, Any], where: Where, torch: tuple[dict[str, Any], Where], fields: dict[str, Any], found: _Findings
) -> int | None:
    """spec.trainer.numProcPerNode, else the runtime's torch.numProcPerNode (default auto). With
    resourcesPerNode, Kubeflow Trainer resolves auto and cpu on CPU to a CPU count itself."""
    policy, policy_where = torch
    given = _first_given(trainer, where, "numProcPerNode", policy, policy_where, "numProcPerNode")
    if given is None:
        return None
    counted_cpus = _cpu_count(fields.get("resources", {})) if trainer.get("resourcesPerNode") is not None else None
    return _procs_per_node(*given, fields.get("gpusPerNode", 0), counted_cpus, found)


def _cpu_count(resources: dict[str, Any]) -> int:
    """Whole CPUs, rounded up, from the limit, else the request, and at least 1: Kubeflow Trainer's rule."""
    for section in ("limits", "requests"):
        amount = _dig(resources, section, "cpu")
        if amount is not None:
            try:
                return max(1, math.ceil(kube_rules.parse_quantity(str(amount))))
            except ValueError:
                return 1  # parse_job names the bad quantity
    return 1


def _trainjob_lifecycle(
    spec: dict[str, Any],
    where: Where,
    node: tuple[dict[str, Any], Where],
    jobset: tuple[dict[str, Any], Where],
    found: _Findings,
) -> dict[str, Any]:
    """suspend and the deadline from the TrainJob (else the node Job's); restarts from the JobSet's
    failurePolicy, which restarts the whole set as ScaleTrain restarts the gang (else the node Job's
    backoffLimit); the TTL from the JobSet, else the node Job's."""
    job_spec, job_where = node
    jobset_spec, jobset_where = jobset
    failure_where = jobset_where.at("failurePolicy")
    failure_policy = _mapping(jobset_spec, "failurePolicy", jobset_where, found)
    for key in _others(failure_policy, ("maxRestarts",)):
        found.drop(failure_where.at(key), "ScaleTrain restarts the whole gang on any failure, up to maxRestarts")
    for key in _others(jobset_spec, ("replicatedJobs", "failurePolicy", "ttlSecondsAfterFinished")):
        found.drop(jobset_where.at(key), "a JobSet setting: ScaleTrain renders one Job per gang")
    restarts, restarts_where = _typed(failure_policy, "maxRestarts", failure_where, int, found), failure_where
    if restarts is None:
        restarts, restarts_where = _typed(job_spec, "backoffLimit", job_where, int, found), job_where
    deadlines = (
        _typed(spec, "activeDeadlineSeconds", where, int, found),
        _typed(job_spec, "activeDeadlineSeconds", job_where, int, found),
    )
    ttls = (
        _typed(jobset_spec, "ttlSecondsAfterFinished", jobset_where, int, found),
        _typed(job_spec, "ttlSecondsAfterFinished", job_where, int, found),
    )
    return {
        "suspend": _typed(spec, "suspend", where, bool, found),
        "maxRestarts": None if restarts is None else _max_restarts(restarts, restarts_where, found),
        "activeDeadlineSeconds": _first_set(deadlines),
        "ttlSecondsAfterFinished": _first_set(ttls),
    }


def _first_set(values: tuple[Any, ...]) -> Any:
    return next((value for value in values if value is not None), None)


# The pod template, the same in both kinds


def _pod_fields(template: Any, where: Where, container: str, found: _Findings) -> tuple[dict[str, Any], Where | None]:
    """(ScaleTrainJob spec fields, where the training container is) from a pod template whose training
    container is named `container`: first-class fields where ScaleTrain has them, the rest in podTemplate."""
    if not isinstance(template, dict):
        problem = "required" if template is None else f"must be a mapping, not {type(template).__name__}"
        found.error(where, f"{problem}: the template of the training pods")
        return {}, None
    for key in _others(template, ("metadata", "spec")):
        found.drop(where.at(key), "not a pod template field")
    pod_template: dict[str, Any] = {"metadata": _pod_metadata(template, where, found)}
    pod_spec = _mapping(template, "spec", where, found)
    fields, pod_template["spec"], container_where = _pod_spec_fields(pod_spec, where.at("spec"), container, found)
    fields["podTemplate"] = {key: value for key, value in pod_template.items() if value}
    return fields, container_where


def _pod_metadata(template: dict[str, Any], where: Where, found: _Findings) -> dict[str, Any]:
    at = where.at("metadata")
    metadata = _mapping(template, "metadata", where, found)
    for key in _others(metadata, ("labels", "annotations")):
        if metadata[key] is not None:  # `kubectl get -o yaml` writes creationTimestamp: null
            found.drop(at.at(key), "ScaleTrain names its pods; their labels and annotations are kept")
    return {key: metadata[key] for key in ("labels", "annotations") if metadata.get(key)}


def _pod_spec_fields(
    pod_spec: dict[str, Any], where: Where, container: str, found: _Findings
) -> tuple[dict[str, Any], dict[str, Any], Where | None]:
    """(spec fields, podTemplate.spec, where the training container is) from a PodSpec."""
    fields, containers, container_where = _containers(pod_spec, where, container, found)
    template_spec: dict[str, Any] = {"containers": containers}
    fields |= _volumes(pod_spec, where, _take_shm_mount(fields), found)
    fields["securityContext"], template_spec["securityContext"] = _pod_security(pod_spec, where, found)
    account = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
    for key in _others(pod_spec, ("containers", "volumes", "securityContext")):
        if key in POD_FIELDS_AS_SPEC:
            fields[key] = _typed(pod_spec, key, where, POD_FIELDS_AS_SPEC[key], found)
        elif key == "serviceAccount":  # the deprecated name of serviceAccountName, which wins
            fields.setdefault("serviceAccountName", _typed(pod_spec, key, where, str, found))
        elif key == "automountServiceAccountToken" and pod_spec[key] and not account:
            found.drop(where.at(key), "ScaleTrain mounts no token unless serviceAccountName is set: set it")
        elif key in POD_FIELDS_SET_BY_SCALETRAIN:
            found.drop(where.at(key), POD_FIELDS_SET_BY_SCALETRAIN[key])
        elif key in POD_FIELDS_FOR_TEMPLATE:
            template_spec[key] = pod_spec[key]
        else:
            found.drop(where.at(key), "not a core/v1 PodSpec field")
    return fields, {key: value for key, value in template_spec.items() if value not in (None, [], {})}, container_where


def _containers(
    pod_spec: dict[str, Any], where: Where, name: str, found: _Findings
) -> tuple[dict[str, Any], list[Any], Where | None]:
    """(spec fields from the training container, podTemplate's containers, where the training container
    is): the other containers as they are, and the training container's fields ScaleTrain does not
    model as podTemplate's `trainer` container."""
    at = where.at("containers")
    fields: dict[str, Any] = {}
    containers: list[Any] = []
    container_where = None
    listed = _typed(pod_spec, "containers", where, list, found)
    for index, container in enumerate(listed or []):
        if not isinstance(container, dict) or not isinstance(container.get("name"), str):
            found.error(at.at(index), "must be a mapping with a name (a container)")
        elif container["name"] == name and container_where is None:
            container_where = at.at(index)
            fields, extras = _container_fields(container, container_where, found)
            if extras:
                containers.append({"name": naming.TRAINER_CONTAINER, **extras})
        elif container["name"] == naming.TRAINER_CONTAINER:
            message = f"{naming.TRAINER_CONTAINER} is the name of ScaleTrain's training container: rename this one"
            found.error(at.at(index, "name"), message)
        else:
            containers.append(container)
    if container_where is None and (listed is not None or pod_spec.get("containers") is None):
        found.error(at, f"no container named {name}, the training container: name it {name}")
    return fields, containers, container_where


def _container_fields(
    container: dict[str, Any], where: Where, found: _Findings
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spec fields, the rest for podTemplate's trainer container) from the training container."""
    fields: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for key in _others(container, ("name",)):
        at = where.at(key)
        if key in ("image", "imagePullPolicy"):
            fields[key] = _typed(container, key, where, str, found)
        elif key in ("command", "args"):
            fields[key] = _strings(container, key, where, found)
        elif key == "env":
            fields["env"] = _env(_list(container, key, where, found), at, found)
        elif key == "resources":
            resource_fields, extras["resources"] = _resources(_mapping(container, key, where, found), at, found)
            fields |= resource_fields
        elif key == "volumeMounts":
            fields["volumeMounts"], extras["volumeMounts"] = _mounts(_list(container, key, where, found), at, found)
        elif key == "ports":  # the pytorchjob-port becomes masterPort, which ScaleTrain declares
            extras["ports"] = [
                p for p in _list(container, key, where, found) if _dig(p, "name") != PYTORCHJOB_PORT_NAME
            ]
        elif key == "securityContext":
            extras[key] = _mapping(container, key, where, found)
            _report_overridden(extras[key], TRAINER_SECURITY, at, "trainer container", found)
        elif key in CONTAINER_FIELDS_FOR_TEMPLATE:
            extras[key] = container[key]
        else:
            found.drop(at, "not a core/v1 Container field")
    return fields, {key: value for key, value in extras.items() if value not in (None, [], {})}


def _require_command(fields: dict[str, Any], container_where: Where | None, found: _Findings) -> None:
    """Without a command the pods would run the image's ENTRYPOINT, which ScaleTrain cannot keep: it runs
    its trainer's launcher when command is unset."""
    if container_where is not None and not fields.get("command"):
        found.error(
            container_where.at("command"),
            "not set, so the pods run the image's ENTRYPOINT, which ScaleTrain replaces with its trainer's "
            "launcher: set command to the image's entrypoint (docker inspect -f '{{.Config.Entrypoint}}' IMAGE)",
        )


def _env(variables: list[Any], where: Where, found: _Findings) -> list[dict[str, Any]]:
    """The env without the variables ScaleTrain sets (the source's controller set them, too)."""
    kept = []
    for index, var in enumerate(variables):
        at = where.at(index)
        if not isinstance(var, dict) or not isinstance(var.get("name"), str):
            found.error(at, "must be a mapping with a name (an env var)")
        elif var["name"] in ENV_SET_FOR_THE_TRAINER:
            found.drop(at, f"{var['name']} is set by ScaleTrain from {ENV_SET_FOR_THE_TRAINER[var['name']]}; dropped")
        else:
            for key in _others(var, ENV_FIELDS):
                found.drop(at.at(key), "not a core/v1 EnvVar field")
            kept.append({key: var[key] for key in ENV_FIELDS if key in var})
    return kept


def _resources(resources: dict[str, Any], where: Where, found: _Findings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spec fields, the resource claims): requests and limits without the GPUs (any `<vendor>/gpu`),
    which become gpusPerNode and gpuResource."""
    gpus: dict[str, int] = {}
    sections: dict[str, dict[Any, Any]] = {}
    for section in ("limits", "requests"):  # limits first: an extended resource's count is its limit
        for name, amount in _mapping(resources, section, where, found).items():
            if isinstance(name, str) and name.endswith("/gpu"):
                gpus.setdefault(name, _gpu_count(amount, where.at(section, name), found))
            else:
                sections.setdefault(section, {})[name] = amount
    for key in _others(resources, ("limits", "requests", "claims")):
        found.drop(where.at(key), "not a core/v1 ResourceRequirements field")
    fields: dict[str, Any] = {
        "resources": {section: sections[section] for section in RESOURCE_SECTIONS if section in sections}
    }
    if len(gpus) > 1:
        found.error(where, f"GPUs of {len(gpus)} kinds ({', '.join(gpus)}): a ScaleTrain pod has one (gpuResource)")
    elif gpus:
        ((resource, count),) = gpus.items()
        fields["gpusPerNode"] = count
        fields["gpuResource"] = resource if resource != DEFAULT_GPU_RESOURCE else None
    return fields, {"claims": resources["claims"]} if resources.get("claims") else {}


def _gpu_count(amount: Any, where: Where, found: _Findings) -> int:
    if isinstance(amount, str) and re.fullmatch(r"[0-9]+", amount):
        return int(amount)
    if isinstance(amount, int) and not isinstance(amount, bool) and amount >= 0:
        return amount
    found.error(where, f"{_brief(amount)}: must be a whole number of GPUs")
    return 0


def _mounts(mounts: list[Any], where: Where, found: _Findings) -> tuple[list[Any], list[Any]]:
    """(the mounts spec.volumeMounts models, the others for podTemplate's trainer container)."""
    modelled, others = [], []
    for index, mount in enumerate(mounts):
        if not isinstance(mount, dict):
            found.error(where.at(index), f"must be a mapping (a volume mount), not {type(mount).__name__}")
        else:
            (modelled if mount.keys() <= MOUNT_FIELDS else others).append(mount)
    return modelled, others


def _take_shm_mount(fields: dict[str, Any]) -> Any:
    """Remove the training container's mount at /dev/shm, which ScaleTrain provides (shmSize); the name
    of its volume, if there was one."""
    mounts = fields.get("volumeMounts", [])
    for mount in mounts:
        if str(mount.get("mountPath", "")).rstrip("/") == "/dev/shm":
            mounts.remove(mount)
            return mount.get("name")
    return None


def _volumes(pod_spec: dict[str, Any], where: Where, shm_volume: Any, found: _Findings) -> dict[str, Any]:
    """spec.volumes, and shmSize from the emptyDir the training container mounted at /dev/shm."""
    fields: dict[str, Any] = {"volumes": []}
    at = where.at("volumes")
    for index, volume in enumerate(_list(pod_spec, "volumes", where, found)):
        if not isinstance(volume, dict):
            found.error(at.at(index), f"must be a mapping (a volume), not {type(volume).__name__}")
        elif shm_volume is None or volume.get("name") != shm_volume:
            fields["volumes"].append(volume)
        elif _dig(volume, "emptyDir", "sizeLimit") is not None:
            fields["shmSize"] = volume["emptyDir"]["sizeLimit"]
        else:
            found.drop(
                at.at(index),
                "mounted at /dev/shm, where ScaleTrain mounts a memory-backed emptyDir of "
                "shmSize (default 2Gi): set shmSize to what the training needs",
            )
    return fields


def _pod_security(pod_spec: dict[str, Any], where: Where, found: _Findings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spec.securityContext, the rest for podTemplate). runAsNonRoot is false unless the source set it:
    the source's pods ran as whatever user their image has, and many training images run as root."""
    at = where.at("securityContext")
    security = _mapping(pod_spec, "securityContext", where, found)
    _report_overridden(security, POD_SECURITY_SET_BY_SCALETRAIN, at, "pod", found)
    modelled = {"runAsNonRoot": False} | {key: value for key, value in security.items() if key in POD_SECURITY_FIELDS}
    return modelled, {key: value for key, value in security.items() if key not in POD_SECURITY_FIELDS}


def _report_overridden(
    given: dict[str, Any], rendered: dict[str, Any], where: Where, what: str, found: _Findings
) -> None:
    """Report the settings of `given` that ScaleTrain's `rendered` ones replace when podTemplate is merged."""
    merged = merge_under(given, rendered)
    for path in _differences(given, merged):
        if _lookup(given, path) is not _MISSING:
            value = _brief(_lookup(merged, path))
            found.drop(where.at(*path), f"ScaleTrain's {what} has {value} here (Pod Security restricted)")
