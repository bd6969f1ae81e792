"""A Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1) and the ClusterTrainingRuntime or
TrainingRuntime it references: the runtime's trainer nodes, with the TrainJob's trainer and pod overrides
merged over them as Kubeflow Trainer merges them."""

from __future__ import annotations

import math
from typing import Any

from scaletrain_trainer.contract.validation import PathPart

from ..validation import kube_rules
from .common import (
    ELASTIC_UNMAPPED,
    FIXED_GANG_MESSAGE,
    GANG_SCHEDULING_MESSAGE,
    Where,
    _dig,
    _drop_each_setting,
    _Findings,
    _first_given,
    _kind,
    _list,
    _mapping,
    _max_restarts,
    _others,
    _procs_per_node,
    _queue_name,
    _strings,
    _typed,
)
from .pod_template import _env, _pod_fields, _require_command, _resources

TRAINJOB_API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")

# Kubeflow Trainer's: the trainer node's replicated Job and container are both named "node", and its
# runtimes mark that Job with the ancestor label.
TRAINER_NODE = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"

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
