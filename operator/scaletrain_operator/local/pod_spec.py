"""What a kubelet makes of a pod spec before it starts a container, as pure functions: the env
(downward API and `$(VAR)` expansion), the command line, the volumes as directories, the working
directory, and the environment the image and the runtime add. No processes, no I/O.

A container path under a volume mount is in the volume's directory; elsewhere it is in the
container's own filesystem, or where pods share this machine's filesystem, this machine's own path
(the "image" is this machine: its Python, its packages, its files) but for the working directory,
`/tmp` and home, which are under the container's own root directory (pod_filesystem.py).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.validation import PathPart, Problem, ProblemsError

from ..api.conditions import RESTART_ALL_CONTAINERS
from ..validation.kube_rules import DNS_1123_LABEL, DNS_1123_SUBDOMAIN
from .expansion import expand

Container = Mapping[str, Any]
Pod = Mapping[str, Any]
# A Secret's key in the pod's namespace: (Secret name, key) -> the decoded value, None when either is missing.
SecretLookup = Callable[[str, str], str | None]

DEFAULT_GRACE_SECONDS = 30  # terminationGracePeriodSeconds when the pod does not say
# An image's PATH (Debian's, as in the python and pytorch images); this interpreter's directory goes first.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VOLUME_KINDS = ("emptyDir", "persistentVolumeClaim", "hostPath")
SHM_PATH = "/dev/shm"  # a memory-backed emptyDir here is a tmpfs of the container's, or this machine's /dev/shm


@dataclass(frozen=True)
class VolumeDirs:
    """Where volumes live: the pod's own directory (emptyDirs) and the claims' (shared by pods), unless a claim
    is bound to a directory of this machine's (run-local's --claim: a volume with the data already on it)."""

    pod: Path
    claims: Path
    bound_claims: Mapping[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class PodFields:
    """What the downward API reads beyond the pod object: what the node assigned."""

    pod_ip: str
    host_ip: str
    node_name: str


def pod_hostname(pod: Pod) -> str:
    """spec.hostname, else the pod's name (truncated to a DNS label), as the kubelet sets it."""
    return pod["spec"].get("hostname") or pod["metadata"]["name"][:63].rstrip("-.")


def containers_of(pod: Pod, kind: str = "containers") -> list[tuple[tuple[PathPart, ...], Container]]:
    """The pod's `kind` ("containers" or "initContainers"), each with its field path for errors."""
    return [(("spec", kind, index), container) for index, container in enumerate(pod["spec"].get(kind) or [])]


def resolve_env(
    pod: Pod,
    env_spec: Sequence[Mapping[str, Any]],
    fields: PodFields,
    where: tuple,
    secrets: SecretLookup | None = None,
) -> dict[str, str]:
    """A container's env (`env_spec`, the container's `env` list) as the kubelet resolves it: in
    order, each literal value with `$(VAR)` references to the variables before it expanded, each
    `fieldRef` read from the pod, each `secretKeyRef` from `secrets` where there is a cluster to read
    them from (the kubelet stand-in of the tests). Without `secrets`, and for ConfigMaps, a clear
    error names the variable: they do not exist outside a cluster. A missing Secret or key is an
    error naming the variable, unless the reference is optional: then the variable is left unset."""
    values: dict[str, str] = {}
    for index, var in enumerate(env_spec):
        at = (*where, "env", index)
        source = var.get("valueFrom") or {}
        if "secretKeyRef" in source and secrets is not None:
            reference = source["secretKeyRef"]
            value = secrets(reference["name"], reference["key"])
            if value is not None:
                values[var["name"]] = value  # as a fieldRef's: taken as it is, not expanded
            elif not reference.get("optional", False):
                name, key = reference["name"], reference["key"]
                message = f"{var['name']} comes from key {key!r} of Secret {name!r}, which is not there"
                raise ProblemsError([Problem((*at, "valueFrom", "secretKeyRef"), message)])
        elif source and "fieldRef" not in source:
            kind = next(iter(source))
            message = f"{var['name']} comes from a {kind}, which does not exist outside a cluster; give it a value"
            raise ProblemsError([Problem((*at, "valueFrom", kind), message)])
        elif source:
            values[var["name"]] = pod_field(pod, source["fieldRef"]["fieldPath"], fields, (*at, "valueFrom"))
        else:  # a field reference is taken as it is; only literal values are expanded
            values[var["name"]] = expand(str(var.get("value", "")), values)
    return values


def pod_field(pod: Pod, path: str, fields: PodFields, where: tuple = ()) -> str:
    """The downward API's value of `path` (a fieldRef.fieldPath)."""
    metadata, spec = pod["metadata"], pod["spec"]
    for mapping in ("labels", "annotations"):
        prefix = f"metadata.{mapping}['"
        if path.startswith(prefix) and path.endswith("']"):
            return (metadata.get(mapping) or {}).get(path[len(prefix) : -2], "")
    simple = {
        "metadata.name": metadata["name"],
        "metadata.namespace": metadata.get("namespace") or "default",
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or fields.node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": fields.pod_ip,
        "status.hostIP": fields.host_ip,
    }
    if path not in simple:
        known = ", ".join([*simple, "metadata.labels['KEY']", "metadata.annotations['KEY']"])
        raise ProblemsError([Problem((*where, "fieldRef", "fieldPath"), f"{path!r} is not one of {known}")])
    return simple[path]


def command_line(container: Container, env: Mapping[str, str], where: tuple) -> list[str]:
    """The container's command and args with `$(VAR)` expanded from its env. Without a command the
    image's entrypoint would run, and this machine has none to offer."""
    command = [expand(part, env) for part in container.get("command") or []]
    if not command:
        message = "give the container a command: there is no image entrypoint to fall back on outside a cluster"
        raise ProblemsError([Problem((*where, "command"), message)])
    return command + [expand(part, env) for part in container.get("args") or []]


def mount_dirs(
    pod: Pod, container: Container, dirs: VolumeDirs, where: tuple, prepared: Mapping[str, Path] | None = None
) -> dict[str, Path]:
    """Each of the container's mount paths, mapped to its directory on this machine (see
    volume_source; `prepared` has the directories a caller made for other volumes, by name)."""
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    mounts = {}
    for index, mount in enumerate(container.get("volumeMounts") or []):
        at = (*where, "volumeMounts", index)
        volume = volumes.get(mount["name"])
        if volume is None:
            raise ProblemsError([Problem((*at, "name"), f"no volume named {mount['name']!r} in spec.volumes")])
        if "subPathExpr" in mount:
            raise ProblemsError([Problem((*at, "subPathExpr"), "not supported by the local pod executor; use subPath")])
        mount_path = mount_path_of(mount)
        source = (prepared or {}).get(volume["name"]) or volume_source(pod, volume, mount_path, dirs)
        if source is None:
            kind = next((key for key in volume if key != "name"), "(none)")
            message = f"volume {volume['name']!r} is a {kind}; the local pod executor has {', '.join(VOLUME_KINDS)}"
            raise ProblemsError([Problem((*at, "name"), message)])
        mounts[mount_path] = inside(source, mount.get("subPath", ""), (*at, "subPath"))
    return mounts


def mount_path_of(mount: Mapping[str, Any]) -> str:
    """A volumeMount's mountPath as the mounts are keyed: without a trailing slash."""
    return mount["mountPath"].rstrip("/") or "/"


def inside(directory: Path, relative: str, where: tuple) -> Path:
    """`directory / relative`, refused (naming the field at `where`) when `relative` is absolute or
    leaves `directory`, as Kubernetes refuses such a subPath: nothing may land outside a volume."""
    parts = PurePosixPath(relative).parts
    if relative.startswith("/") or ".." in parts:
        raise ProblemsError([Problem(where, f"{relative!r} must be a relative path that stays inside its volume")])
    return directory.joinpath(*parts)


def volume_source(pod: Pod, volume: Mapping[str, Any], mount_path: str, dirs: VolumeDirs) -> Path | None:
    """A volume's directory: an emptyDir in the pod's directory (a memory-backed one mounted at
    /dev/shm is this machine's /dev/shm, which `shm_open` uses whatever a mount says, unless the
    container has a /dev/shm of its own: pod_filesystem.py), a
    persistentVolumeClaim in `claims/NAMESPACE/CLAIM` (one directory for every pod that claims it) or the
    directory it is bound to, a
    hostPath the path itself; None for other kinds."""
    where = ("spec", "volumes", (pod["spec"].get("volumes") or []).index(volume))
    if "emptyDir" in volume:
        if is_shared_memory(volume, mount_path):
            return Path(SHM_PATH)
        return dirs.pod / "volumes" / dns_name(volume["name"], (*where, "name"))
    if "persistentVolumeClaim" in volume:
        namespace = dns_name(pod["metadata"].get("namespace") or "default", ("metadata", "namespace"))
        claim = volume["persistentVolumeClaim"]["claimName"]
        if claim in dirs.bound_claims:
            return dirs.bound_claims[claim]
        return dirs.claims / namespace / dns_name(claim, (*where, "persistentVolumeClaim", "claimName"), subdomain=True)
    if "hostPath" in volume:
        return Path(volume["hostPath"]["path"])
    return None


def is_shared_memory(volume: Mapping[str, Any], mount_path: str) -> bool:
    """Whether `volume` mounted at `mount_path` is the pod's shared memory: a memory-backed emptyDir
    at /dev/shm, where `shm_open` looks."""
    return mount_path == SHM_PATH and "emptyDir" in volume and (volume["emptyDir"] or {}).get("medium") == "Memory"


def dns_name(name: str, where: tuple, subdomain: bool = False) -> str:
    """`name`, which becomes a directory here: refused unless a DNS label (subdomain: dotted labels), as
    Kubernetes has volume, claim and namespace names; so never `..` or a path."""
    pattern = DNS_1123_SUBDOMAIN if subdomain else DNS_1123_LABEL
    if not re.fullmatch(pattern, name):
        raise ProblemsError([Problem(where, f"{name!r} is not a valid name (lowercase letters, digits and -)")])
    return name


def under_mount(path: str, mounts: Mapping[str, Path], where: tuple = ()) -> Path | None:
    """Where the container path `path` lies on this machine when it is under a mount, else None. The path
    is normalised first, as the container's kernel would resolve it: `/ckpt/../../x` is not under
    `/ckpt`, and one that names a mount but resolves outside it is refused, naming the field."""
    normalized = posixpath.normpath(path)
    for mount_path, local in sorted(mounts.items(), key=lambda item: -len(item[0])):
        if mount_path == "/" or normalized == mount_path or normalized.startswith(mount_path + "/"):
            return local / normalized[len(mount_path) :].lstrip("/")
    if any(path == mount or path.startswith(mount + "/") for mount in mounts):
        raise ProblemsError([Problem(where, f"{path!r} leaves the volume it names; resolved it is {normalized!r}")])
    return None


def working_dir(container: Container, mounts: Mapping[str, Path], rootfs: Path) -> Path:
    """The container's working directory on this machine. A relative workingDir is relative to the
    container's filesystem root; one under a volume mount is in that volume. Any other one (and the
    default, the image's `/`) is under the container's own root directory `rootfs`, not this
    machine's path of that name: a shared directory would give every pod one cwd, and creating it
    would write outside the executor's directory."""
    path = posixpath.normpath(posixpath.join("/", container.get("workingDir") or "/"))
    return under_mount(path, mounts) or rootfs / path.lstrip("/")


def relocate(value: Any, mounts: Mapping[str, Path], where: tuple = ()) -> Any:
    """`value` (a training config) with every path under a mount path moved to its directory."""
    if isinstance(value, dict):
        return {key: relocate(item, mounts, (*where, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [relocate(item, mounts, (*where, index)) for index, item in enumerate(value)]
    if isinstance(value, str) and value.startswith("/"):
        local = under_mount(value, mounts, where)
        return value if local is None else str(local)
    return value


def relocate_config_env(env_spec: Sequence[Mapping[str, Any]], mounts: Mapping[str, Path]) -> list[dict[str, Any]]:
    """The env list with the training config's paths under a mount moved to their directories: the
    trainer reads its checkpoint and output paths from there, and no mount puts them in place."""
    relocated = []
    for var in env_spec:
        if var["name"] == wire.CONFIG_ENV and "value" in var:  # its fields are named as spec.training's
            var = {**var, "value": json.dumps(relocate(json.loads(var["value"]), mounts, ("spec", "training")))}
        relocated.append(dict(var))
    return relocated


def move_files_env(env_spec: Sequence[Mapping[str, Any]], files: Mapping[str, Path]) -> list[dict[str, Any]]:
    """The env list with each literal value that is one of `files`' container paths moved to its file
    on this machine (TORCHELASTIC_ERROR_FILE=/dev/termination-log, where no file is at that path)."""
    return [
        {**var, "value": str(files[var["value"]])} if "value" in var and var["value"] in files else dict(var)
        for var in env_spec
    ]


def image_env(interpreter_dir: Path, hostname: str) -> dict[str, str]:
    """What an image and the runtime define before the pod's env (which may override it): PATH with
    the image's Python first (here: this interpreter's) and HOSTNAME. HOME and TMPDIR depend on the
    container's filesystem (pod_filesystem.py)."""
    return {"PATH": f"{interpreter_dir}:{IMAGE_PATH}", "HOSTNAME": hostname}


def grace_seconds(pod: Pod) -> float:
    return float(pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))


def restart_rules(container: Container, where: tuple) -> list[Mapping[str, Any]]:
    """The container's restartPolicyRules, which the kubelet reads only beside a container restartPolicy; a rule
    this executor cannot carry out (one that restarts the container alone) is an error naming it."""
    if container.get("restartPolicy") is None:
        return []
    rules = list(container.get("restartPolicyRules") or [])
    for index, rule in enumerate(rules):
        if rule.get("action") != RESTART_ALL_CONTAINERS:
            message = (
                f"{rule.get('action')} is not supported: the local pod executor restarts a pod's containers only "
                f"all together ({RESTART_ALL_CONTAINERS})"
            )
            raise ProblemsError([Problem((*where, "restartPolicyRules", index, "action"), message)])
    return rules


def restarts_all_containers(rules: Sequence[Mapping[str, Any]], exit_code: int) -> bool:
    """Whether a container's exit with `exit_code` restarts every container of its pod: the first of its `rules`
    whose exitCodes match the code decides (In: one of the values; NotIn: none of them), as the kubelet reads
    them; none matching, the container's own restartPolicy (Never, here) does."""
    for rule in rules:
        codes = rule.get("exitCodes") or {}
        listed = exit_code in (codes.get("values") or [])
        if (codes.get("operator") == "In" and listed) or (codes.get("operator") == "NotIn" and not listed):
            return rule.get("action") == RESTART_ALL_CONTAINERS
    return False
