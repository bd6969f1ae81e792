"""What a local pod's container sees as its filesystem: its own, as in a container, or this machine's.

**Contained** (root, with overlayfs): each container starts in a mount namespace of its own, made by
container_root.py before its command runs. Its root is this machine's root filesystem (the "image":
its Python, its packages, its files) with a writable layer of the container's own above it, in the
pod's directory, so a write anywhere outside the volumes lands there and never in this machine's
files. Each volume is bound at its mountPath, the termination message file at its
terminationMessagePath (`/dev/termination-log`), /dev and /dev/shm are the container's own, and /tmp
is this machine's with a writable layer of the container's own above it, as /.
The executor's root (every pod's files) is hidden. Paths are the container's: the training config is
passed as it is, HOME is /root, and a new container (a new pod) starts from the image again.

**Shared** (anything else): the processes see this machine's filesystem. A path under a volume mount
in the training config is moved to the volume's directory, the termination message file is passed in
SCALETRAIN_TERMINATION_LOG (and an env value that is its terminationMessagePath is moved to it), and
HOME, TMPDIR and the default working directory are the container's own directories; but a script
that writes an absolute path itself writes this machine's path. `reason` says why this mode was
chosen, and what is not contained.
"""

from __future__ import annotations

import abc
import json
import os
import posixpath
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaletrain_trainer.contract import wire

from ..validation.kube_rules import parse_quantity
from . import container_root
from .pod_spec import (
    SHM_PATH,
    Container,
    Pod,
    is_shared_memory,
    mount_path_of,
    under_mount,
    working_dir,
)

CONTAINED, SHARED, AUTO = "contained", "shared", "auto"
DEFAULT_SHM_SIZE = "64Mi"  # containerd's /dev/shm when no memory-backed emptyDir is mounted there
UNLIMITED_SHM_SIZE = "50%"  # a memory-backed emptyDir without sizeLimit: tmpfs's default, half the memory
TRIAL_TIMEOUT_SECONDS = 30  # an interpreter's start and a few mounts, on a busy machine
NOT_CONTAINED = (
    "a script's writes to absolute paths outside its volumes (an output_dir, /dev/termination-log) land "
    "in this machine's files, and /dev/shm is this machine's"
)


class FilesystemError(OSError):
    """The pod filesystem asked for is unknown, or cannot be had here; the message says why."""


@dataclass(frozen=True)
class ContainerFiles:
    """A container's files as its process is started: what differs between the modes."""

    image_env: dict[str, str]  # HOME and TMPDIR, as an image defines them (the pod's env may override)
    runtime_env: dict[str, str]  # what the runtime adds after the pod's env
    config_mounts: Mapping[str, Path]  # training config paths under these move to their directories
    moved_files: Mapping[str, Path]  # an env value that is one of these container paths moves to its file
    start_dir: Path  # the process starts here on this machine
    lookup_dir: Path  # where a command with a slash is looked for on this machine
    own_dirs: list[Path]  # made before it starts
    layout: dict[str, Any] | None  # container_root.py's layout; None: this machine's filesystem

    def command(self, executable: str, argv: list[str]) -> list[str]:
        """The command line that runs `argv` (`executable`: argv[0] as found on this machine)."""
        if self.layout is None:
            return [executable, *argv[1:]]
        return [sys.executable, "-I", "-S", container_root.__file__, json.dumps(self.layout), *argv]


class PodFilesystem(abc.ABC):
    """The interface of both modes (ContainedFilesystem, SharedFilesystem)."""

    mode: str
    reason: str  # why this mode, in words, for a log line

    @abc.abstractmethod
    def files(self, pod: Pod, container: Container, mounts: Mapping[str, Path], own: Path) -> ContainerFiles:
        """The container's files; `mounts` maps its mount paths to their directories, `own` is its directory."""

    @abc.abstractmethod
    def host_path(self, path: str, mounts: Mapping[str, Path], own: Path) -> Path:
        """Where the container's path `path` lies on this machine."""


class SharedFilesystem(PodFilesystem):
    mode = SHARED

    def __init__(self, reason: str):
        self.reason = reason

    def files(self, pod: Pod, container: Container, mounts: Mapping[str, Path], own: Path) -> ContainerFiles:
        rootfs = own / "rootfs"
        cwd = working_dir(container, mounts, rootfs)
        image = {"HOME": str(rootfs / "root"), "TMPDIR": str(rootfs / "tmp")}
        # No file is at its terminationMessagePath: the file's path is passed instead.
        termination_log = own / "termination-log"
        moved = {container.get("terminationMessagePath") or wire.TERMINATION_MESSAGE_PATH: termination_log}
        moved |= node_written_files(pod, container, mounts)
        runtime = {wire.TERMINATION_LOG_ENV: str(termination_log)}
        dirs = [rootfs / "root", rootfs / "tmp", cwd]
        return ContainerFiles(image, runtime, mounts, moved, cwd, cwd, dirs, None)

    def host_path(self, path: str, mounts: Mapping[str, Path], own: Path) -> Path:
        return under_mount(path, mounts) or Path(path)


NODE_WRITTEN = frozenset({"projected", "secret", "configMap", "downwardAPI"})  # volumes of files the node writes


def node_written_files(pod: Pod, container: Container, mounts: Mapping[str, Path]) -> dict[str, Path]:
    """Each file of the container's volumes that the node wrote (a projected token, a Secret's keys), by its path
    in the container: with no mount to put it there, an env value that names one (KUBEFLOW_TRAINER_SERVER_TOKEN)
    is moved to it. A few small files, unlike a claim's."""
    written = {volume["name"] for volume in pod["spec"].get("volumes") or [] if NODE_WRITTEN & volume.keys()}
    files = {}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] in written and (local := mounts.get(mount_path_of(mount))) is not None:
            files |= {f"{mount_path_of(mount)}/{f.relative_to(local)}": f for f in local.rglob("*") if f.is_file()}
    return files


class ContainedFilesystem(PodFilesystem):
    mode = CONTAINED
    reason = (
        "a mount namespace per container: this machine's files below a writable layer of its own, the "
        "volumes at their mountPaths, its own /dev and /dev/shm"
    )

    def __init__(self, executor_root: Path):
        self.executor_root = executor_root  # hidden from the containers

    def files(self, pod: Pod, container: Container, mounts: Mapping[str, Path], own: Path) -> ContainerFiles:
        path = posixpath.normpath(posixpath.join("/", container.get("workingDir") or "/"))
        shm = shm_volume(pod, container)
        termination = container.get("terminationMessagePath") or wire.TERMINATION_MESSAGE_PATH
        read_only = {mount_path_of(mount) for mount in container.get("volumeMounts") or [] if mount.get("readOnly")}
        volumes = [
            {"path": mount_path, "source": str(source), "readOnly": mount_path in read_only}
            for mount_path, source in mounts.items()
            if not (shm is not None and mount_path == SHM_PATH)
        ] + [{"path": termination, "source": str(own / "termination-log"), "readOnly": False}]
        layout = {
            "root": str(own / "mnt"),
            "layer": str(own / "rootfs"),
            "layerWork": str(own / "rootfs-work"),
            "tmpLayer": str(own / "tmp"),
            "tmpLayerWork": str(own / "tmp-work"),
            "hidden": [str(self.executor_root)],
            "shmSize": shm_size(shm),
            "workingDir": path,
            "volumes": volumes,
        }
        dirs = [own / part for part in ("mnt", "rootfs", "rootfs-work", "tmp", "tmp-work")]
        lookup_dir = under_mount(path, mounts) or Path(path)  # the image is this machine's filesystem
        return ContainerFiles({"HOME": "/root"}, {}, {}, {}, own, lookup_dir, dirs, layout)

    def host_path(self, path: str, mounts: Mapping[str, Path], own: Path) -> Path:
        return under_mount(path, mounts) or own / "rootfs" / posixpath.normpath(path).lstrip("/")


def shm_volume(pod: Pod, container: Container) -> Mapping[str, Any] | None:
    """The memory-backed emptyDir the container mounts at /dev/shm, if it does."""
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"]) or {}
        if is_shared_memory(volume, mount_path_of(mount)):
            return volume["emptyDir"] or {}
    return None


def shm_size(empty_dir: Mapping[str, Any] | None) -> str:
    """The container's /dev/shm size as tmpfs takes it: the emptyDir's sizeLimit in bytes, else the defaults."""
    if empty_dir is None:
        return str(int(parse_quantity(DEFAULT_SHM_SIZE)))
    limit = empty_dir.get("sizeLimit")
    return str(int(parse_quantity(str(limit)))) if limit else UNLIMITED_SHM_SIZE


def open_filesystem(executor_root: Path, preference: str = AUTO) -> PodFilesystem:
    """The pods' filesystem: `contained`, `shared`, or `auto` (contained where it can be made here,
    which a trial container finds out)."""
    if preference not in (AUTO, CONTAINED, SHARED):
        raise FilesystemError(f"pod filesystem {preference!r}: expected one of {AUTO}, {CONTAINED}, {SHARED}")
    if preference == SHARED:
        return SharedFilesystem(f"as asked: {NOT_CONTAINED}")
    contained = ContainedFilesystem(executor_root)
    missing = why_not_contained() or trial(contained, executor_root)
    if missing is None:
        return contained
    if preference == CONTAINED:
        raise FilesystemError(f"contained pods are not available: {missing}")
    return SharedFilesystem(f"{missing}, which contained pods need: {NOT_CONTAINED}")


def why_not_contained() -> str | None:
    if sys.platform != "linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not running as root"
    return None


def trial(filesystem: ContainedFilesystem, executor_root: Path) -> str | None:
    """Why a container's filesystem cannot be made here (the kernel refuses a step), or None."""
    executor_root.mkdir(parents=True, exist_ok=True)
    own = Path(tempfile.mkdtemp(prefix=".trial-", dir=executor_root))
    try:
        files = filesystem.files({"spec": {}}, {}, {}, own)
        for directory in files.own_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        (own / "termination-log").touch()
        command = files.command("", [sys.executable, "-I", "-S", "-c", ""])
        result = subprocess.run(command, capture_output=True, text=True, timeout=TRIAL_TIMEOUT_SECONDS, cwd=own)
    except subprocess.TimeoutExpired:
        return f"a trial container did not start in {TRIAL_TIMEOUT_SECONDS} s"
    finally:
        shutil.rmtree(own, ignore_errors=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        return last.removeprefix("scaletrain: ")
    return None
