"""ScaleTrain's checks of what a spec passes through to its pods, on the spec's fields as plain values: podTemplate's
shape and what it may not set beside the spec, env and volume names against what ScaleTrain renders, and
Kubernetes' rules (kube_rules.py) for the fields the pods get. The spec's model calls them
(ScaleTrainJobSpec.problems); kube_schema.py then checks the same pieces against the Kubernetes schemas."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from scaletrain_trainer.contract.validation import Problem

from ..api import naming
from . import kube_rules


def template_containers(pod_template: Any) -> list[tuple[int, dict[str, Any]]]:
    """The containers of a podTemplate, with their index, as far as they are mappings (other shapes are
    pod_template_problems')."""
    pod_spec = pod_template.get("spec") if isinstance(pod_template, dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    return [
        (i, item) for i, item in enumerate(containers if isinstance(containers, list) else []) if isinstance(item, dict)
    ]


def template_grace_period(pod_template: Any) -> int | None:
    """podTemplate's terminationGracePeriodSeconds, when it sets a whole number of seconds."""
    pod_spec = pod_template.get("spec") if isinstance(pod_template, dict) else None
    value = pod_spec.get("terminationGracePeriodSeconds") if isinstance(pod_spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def grace_period_problems(termination_grace_period_seconds: int | None, pod_template: Any) -> Iterator[Problem]:
    """terminationGracePeriodSeconds set both in the spec and in podTemplate, to different values."""
    templated = template_grace_period(pod_template)
    if None not in (templated, termination_grace_period_seconds) and templated != termination_grace_period_seconds:
        message = f"terminationGracePeriodSeconds is {termination_grace_period_seconds} in spec; set it in one place"
        yield Problem(("podTemplate", "spec", "terminationGracePeriodSeconds"), message)


def env_problems(
    env_names: list[str], pod_template: Any, rank_env_containers: list[str], procs_per_node: int
) -> Iterator[Problem]:
    """spec.env, and the env in podTemplate of each container that gets the rank env: none of the
    names ScaleTrain sets (naming.env_set_by_scaletrain), each named once."""
    set_by_scaletrain = naming.env_set_by_scaletrain(procs_per_node)
    sources: list[tuple[tuple[Any, ...], list[Any]]] = [(("env",), env_names)]
    for index, container in template_containers(pod_template):
        if container.get("name") in rank_env_containers and isinstance(container.get("env"), list):
            names = [var.get("name") if isinstance(var, dict) else None for var in container["env"]]
            sources.append((("podTemplate", "spec", "containers", index, "env"), names))
    for where, names in sources:
        seen: set[str] = set()
        for index, name in enumerate(names):
            if name in set_by_scaletrain:
                message = f"{name} is set by ScaleTrain from {set_by_scaletrain[name]}; remove it"
                yield Problem((*where, index, "name"), message)
            elif name in seen:
                yield Problem((*where, index, "name"), f"{name} is set twice; keep one")
            seen.add(name)


def rank_env_container_problems(rank_env_containers: list[str], pod_template: Any) -> Iterator[Problem]:
    """Each name is the trainer or a container of podTemplate, once: a name that matches nothing would
    leave the script it meant without ranks, silently."""
    containers = template_containers(pod_template)
    in_template = {container["name"] for _, container in containers if isinstance(container.get("name"), str)}
    for index, name in enumerate(rank_env_containers):
        if name in rank_env_containers[:index]:
            yield Problem(("rankEnvContainers", index), f"{name} is listed twice; keep one")
        elif name != naming.TRAINER_CONTAINER and name not in in_template:
            message = (
                f"no container {name} in podTemplate.spec.containers; name the trainer "
                f"({naming.TRAINER_CONTAINER}) or a container the template defines"
            )
            yield Problem(("rankEnvContainers", index), message)


def pod_template_problems(pod_template: dict[str, Any] | None, gpu_resource: str) -> Iterator[Problem]:
    """The shape of a PodTemplateSpec, as far as rendering reads it; its contents are the cluster's to
    judge (docs/api.md)."""
    template = pod_template or {}
    for key in template.keys() - {"metadata", "spec"}:
        yield Problem(("podTemplate", key), "unknown field; a pod template has metadata and spec")
    for key in ("metadata", "spec"):
        if key in template and not isinstance(template[key], dict):
            yield Problem(("podTemplate", key), f"must be a mapping, not {type(template[key]).__name__}")
    pod_spec = template.get("spec")
    for key in ("containers", "initContainers", "volumes") if isinstance(pod_spec, dict) else ():
        items = pod_spec.get(key, [])
        if not isinstance(items, list):
            yield Problem(("podTemplate", "spec", key), f"must be a list, not {type(items).__name__}")
            continue
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                yield Problem(("podTemplate", "spec", key, index), "must be a mapping with a name")
            elif key != "volumes":
                yield from _template_gpu_problems(item, ("podTemplate", "spec", key, index), gpu_resource)


def _template_gpu_problems(container: dict[str, Any], where: tuple[Any, ...], gpu_resource: str) -> Iterator[Problem]:
    """GPUs come from gpusPerNode, which also sets the backend, the process count and the toleration: a
    GPU limit in the template would give a gloo job GPUs it never uses, on nodes it cannot tolerate."""
    resources = container.get("resources")
    for section in ("limits", "requests"):
        values = resources.get(section) if isinstance(resources, dict) else None
        if isinstance(values, dict) and gpu_resource in values:
            message = "set gpusPerNode instead of giving a container GPUs in podTemplate"
            yield Problem((*where, "resources", section, gpu_resource), message)


def kubernetes_problems(
    *,
    resources: Mapping[str, Mapping[str, str]],
    shm_size: str,
    node_selector: Mapping[str, str],
    queue_name: str | None,
    names: Mapping[str, str | None],
    volume_mounts: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    toleration_keys: list[str | None],
    pod_template: dict[str, Any] | None,
) -> Iterator[Problem]:
    """Kubernetes' rules for what the pods get, which the API server would apply to the Job. `resources` are
    spec.resources' requests and limits by section, `names` the names of other objects by their spec field,
    `volume_mounts` and `volumes` spec's (core/v1 VolumeMount and Volume, as mappings)."""
    yield from kube_rules.resources_problems(resources, ("resources",))
    if kube_rules.parse_quantity(shm_size) <= 0:  # the emptyDir's sizeLimit
        yield Problem(("shmSize",), f"{shm_size} must be more than 0, e.g. 2Gi")
    yield from kube_rules.labels_problems(node_selector, ("nodeSelector",))
    if queue_name is not None and (problem := kube_rules.label_value(queue_name)):
        yield Problem(("queueName",), problem)  # it becomes the Job's kueue.x-k8s.io/queue-name label
    yield from kube_rules.name_problems(names)
    yield from kube_rules.mounts_problems(volume_mounts, ("volumeMounts",))
    for index, volume in enumerate(volumes):
        yield from kube_rules.volume_source_problems(volume, ("volumes", index))
    for index, key in enumerate(toleration_keys):
        if key and (problem := kube_rules.qualified_name(key)):
            yield Problem(("tolerations", index, "key"), problem)
    if isinstance(pod_template, dict):
        yield from kube_rules.metadata_problems(pod_template.get("metadata"), ("podTemplate", "metadata"))


def _template_volume_names(pod_template: dict[str, Any] | None) -> set[str]:
    pod_spec = (pod_template or {}).get("spec")
    volumes = pod_spec.get("volumes") if isinstance(pod_spec, dict) else None
    return {v.get("name") for v in volumes if isinstance(v, dict)} if isinstance(volumes, list) else set()


def volume_problems(
    volumes: list[dict[str, Any]], volume_mounts: list[dict[str, Any]], pod_template: dict[str, Any] | None
) -> Iterator[Problem]:
    """spec.volumes and spec.volumeMounts (core/v1 Volume and VolumeMount, as mappings) beside podTemplate's
    volumes and the /dev/shm ScaleTrain provides."""
    names = [v["name"] for v in volumes]
    template_names = _template_volume_names(pod_template)
    for index, name in enumerate(names):
        if name == naming.SHM_VOLUME:
            yield Problem(("volumes", index, "name"), f"{name} is reserved for /dev/shm; use shmSize to size it")
        elif name in template_names:
            yield Problem(("volumes", index, "name"), f"{name} is also defined in podTemplate; define it once")
        elif name in names[:index]:
            yield Problem(("volumes", index, "name"), f"{name} is used by another volume; volume names must be unique")
        elif len(volumes[index].keys() - {"name"}) != 1:
            yield Problem(
                ("volumes", index), "give exactly one volume source, e.g. persistentVolumeClaim: {claimName: ...}"
            )
    for index, mount in enumerate(volume_mounts):
        if mount["mountPath"].rstrip("/") == "/dev/shm":
            yield Problem(
                ("volumeMounts", index, "mountPath"), "/dev/shm is provided by ScaleTrain; size it with shmSize"
            )
        if mount["name"] not in names and mount["name"] not in template_names:
            yield Problem(("volumeMounts", index, "name"), f"no volume named {mount['name']}; add it to volumes")
