"""The pod template, the same in both kinds: the training container and the pod spec of a source pod
template as the ScaleTrainJob's first-class fields where ScaleTrain has them, the rest in spec.podTemplate,
or reported."""

from __future__ import annotations

import re
from typing import Any

from ..api import naming
from ..api.spec import PodSecurity, ScaleTrainJobSpec, VolumeMount
from ..render.children import TRAINER_SECURITY
from ..validation.merge import merge_under
from .common import (
    _MISSING,
    Where,
    _brief,
    _differences,
    _dig,
    _Findings,
    _list,
    _lookup,
    _mapping,
    _others,
    _strings,
    _typed,
)

# The port the PyTorchJob controller's Master listens on: masterPort, which ScaleTrain declares itself.
PYTORCHJOB_PORT_NAME = "pytorchjob-port"

DEFAULT_GPU_RESOURCE = ScaleTrainJobSpec.model_fields["gpu_resource"].default
MOUNT_FIELDS = frozenset(f.alias for f in VolumeMount.model_fields.values())
POD_SECURITY_FIELDS = frozenset(f.alias for f in PodSecurity.model_fields.values())
RESOURCE_SECTIONS = ("requests", "limits")

# Env a source job may carry that the converted pods get from ScaleTrain (or, with several processes per
# pod, RANK and LOCAL_RANK from torchrun): a value from the source would be replaced or refused.
ENV_SET_FOR_THE_TRAINER = naming.RENDERED_ENV | {
    name: f"{source}, or torchrun for each process with more" for name, source in naming.SINGLE_PROCESS_RANK_ENV.items()
}
ENV_FIELDS = ("name", "value", "valueFrom")

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
