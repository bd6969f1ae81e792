"""A ScaleTrainJob's pods as local processes, the way the cluster would run them.

The rendered Job is expanded into its indexed pods as the Job controller does; each pod's trainer
container runs as a process with the env the kubelet would give it (downward API resolved), the
master's DNS name pointed at 127.0.0.1, and its volumes mapped to directories. `scaletrain run-local`
(local/gang.py) and the tests' node agent both run pods through this module.

A pod is more than its main process: torchrun starts its workers in new sessions, so killing
torchrun's process group would leave them running. Every process of a pod carries a marker in its
environment, and stopping a pod kills everything that carries it, as a container runtime kills a
container's cgroup.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from scaletrain_trainer.config import CONFIG_ENV
from scaletrain_trainer.metrics import TERMINATION_LOG_ENV
from scaletrain_trainer.validation import Problem, ProblemsError

from ..api import naming
from ..api.gang_policy import PodOutcome

LOCALHOST = "127.0.0.1"
POD_MARKER_ENV = "SCALETRAIN_LOCAL_POD"  # in the env of every process of a local pod
MASTER_ADDRESS_ENV = ("PET_MASTER_ADDR", "MASTER_ADDR")
MASTER_PORT_ENV = ("PET_MASTER_PORT", "MASTER_PORT")
JOB_COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
STOP_GRACE_SECONDS = 10.0  # SIGTERM, then SIGKILL, as terminationGracePeriodSeconds would


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return sock.getsockname()[1]


def indexed_pods(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods the Job controller creates for an Indexed Job, one per completion index: named
    `<job>-<index>-<suffix>`, with hostname `<job>-<index>`, the template's subdomain, the
    completion index as annotation and label, and JOB_COMPLETION_INDEX in every container."""
    name, template = job["metadata"]["name"], job["spec"]["template"]
    pods = []
    for index in range(job["spec"]["completions"]):
        metadata = template.get("metadata") or {}
        index_entry = {naming.COMPLETION_INDEX_ANNOTATION: str(index)}
        spec = json.loads(json.dumps(template["spec"]))  # a deep copy
        spec["hostname"] = f"{name}-{index}"
        for container in spec["containers"]:
            container["env"] = [*container.get("env", []), {"name": JOB_COMPLETION_INDEX_ENV, "value": str(index)}]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{index}-{uuid.uuid4().hex[:5]}",
                    "namespace": job["metadata"].get("namespace"),
                    "labels": (metadata.get("labels") or {}) | index_entry | {"batch.kubernetes.io/job-name": name},
                    "annotations": (metadata.get("annotations") or {}) | index_entry,
                },
                "spec": spec,
            }
        )
    return pods


def trainer_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == naming.TRAINER_CONTAINER)


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet resolves it: literal values, and downward-API fields of the
    pod. Secrets and ConfigMaps do not exist here: a clear error names the variable."""
    values: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            values[var["name"]] = str(var["value"])
        elif "fieldRef" in (source := var.get("valueFrom") or {}):
            values[var["name"]] = _pod_field(pod, source["fieldRef"]["fieldPath"])
        elif source:
            kind = next(iter(source))
            message = f"{var['name']} comes from a {kind}, which does not exist outside a cluster; give it a value"
            raise ProblemsError([Problem(("spec", "env"), message)])
        else:
            values[var["name"]] = ""
    return values


def _pod_field(pod: Mapping[str, Any], path: str) -> str:
    metadata = pod["metadata"]
    for mapping in ("annotations", "labels"):
        prefix = f"metadata.{mapping}['"
        if path.startswith(prefix):
            return (metadata.get(mapping) or {}).get(path[len(prefix) : -2], "")
    simple = {
        "metadata.name": metadata["name"],
        "metadata.namespace": metadata.get("namespace") or "default",
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": socket.gethostname(),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.hostIP": LOCALHOST,
        "status.podIP": LOCALHOST,
    }
    return simple.get(path, "")


def volume_paths(container: Mapping[str, Any], volumes_dir: Path) -> dict[str, Path]:
    """Each of the container's mount paths, mapped to a directory per volume under `volumes_dir`.
    The memory-backed /dev/shm stays the machine's own."""
    return {
        mount["mountPath"].rstrip("/"): volumes_dir / mount["name"] / mount.get("subPath", "")
        for mount in container.get("volumeMounts") or []
        if mount["name"] != naming.SHM_VOLUME
    }


def relocate(value: Any, mounts: Mapping[str, Path]) -> Any:
    """`value` (a training config) with every path under a mount path moved to its local directory."""
    if isinstance(value, dict):
        return {key: relocate(item, mounts) for key, item in value.items()}
    if isinstance(value, list):
        return [relocate(item, mounts) for item in value]
    if isinstance(value, str):
        for mount_path, local in sorted(mounts.items(), key=lambda item: -len(item[0])):
            if value == mount_path or value.startswith(mount_path + "/"):
                return str(local) + value[len(mount_path) :]
    return value


def localize(
    env: Mapping[str, str], *, master_port: int, mounts: Mapping[str, Path], metrics_port: int | None = None
) -> dict[str, str]:
    """A pod's env for this machine: the master's DNS name is 127.0.0.1 and its port a free one;
    config paths on volumes point at their local directories, and the metrics port may move."""
    local = dict(env)
    for name in MASTER_ADDRESS_ENV:
        if name in local:
            local[name] = LOCALHOST
    for name in MASTER_PORT_ENV:
        if name in local:
            local[name] = str(master_port)
    if CONFIG_ENV in local:
        config = relocate(json.loads(local[CONFIG_ENV]), mounts)
        if metrics_port is not None:
            config["metricsPort"] = metrics_port
        local[CONFIG_ENV] = json.dumps(config)
    return local


def exit_code(returncode: int) -> int:
    """A container's exit code: a process killed by signal N exits 128 + N, as the kubelet reports."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class LocalPod:
    """One pod's container, running as local processes."""

    name: str
    index: int  # the completion index: the node rank
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    finished_at: datetime | None = None  # when its exit was first seen
    _log: IO[bytes] | None = None
    _rest_killed: bool = False  # the pod's other processes, once its main process ended

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], env: Mapping[str, str], log_dir: Path) -> LocalPod:
        container = trainer_container(pod)
        command = [*container.get("command", []), *container.get("args", [])]
        name, index = pod["metadata"]["name"], int(pod["metadata"]["annotations"][naming.COMPLETION_INDEX_ANNOTATION])
        return cls(name, index, command, dict(env), log_dir / f"{name}.log")

    @property
    def termination_log(self) -> Path:
        return self.log_path.with_suffix(".termination-log")

    def start(self) -> None:
        """Raises OSError when the command cannot be started (the pod then has no process)."""
        # The image's `python` and `torchrun` are this interpreter's: its directory goes first on PATH.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        # The kubelet provides an empty terminationMessagePath file; its content ends up in the pod status.
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.termination_log.write_text("")
        pod_env = {"PATH": path, POD_MARKER_ENV: self.marker, TERMINATION_LOG_ENV: str(self.termination_log)}
        self._log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self.command, env=os.environ | self.env | pod_env, stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError:
            self._log.close()
            raise

    def poll(self) -> int | None:
        """The container's exit code once its main process has ended (the rest of the pod is then
        stopped, as when a container's main process exits), else None."""
        if self.process is None or self.process.poll() is None:
            return None
        if not self._rest_killed:  # once: each pass scans /proc
            self.signal_all(signal.SIGKILL)
            self._rest_killed = True
            self.finished_at = datetime.now(timezone.utc)
        return exit_code(self.process.returncode)

    def outcome(self) -> PodOutcome:
        """This pod as the gang policy sees it (the kubelet's reasons: Completed, or Error)."""
        code = self.poll()
        if code is None:
            return PodOutcome(self.name, self.index, "Running" if self.process else "Pending")
        if code == 0:
            return PodOutcome(self.name, self.index, "Succeeded", 0, "Completed", finished_at=self.finished_at)
        message = self.termination_message()
        return PodOutcome(self.name, self.index, "Failed", code, "Error", message, self.finished_at)

    def stop(self, sig: signal.Signals = signal.SIGTERM, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        stop_pods([self], sig, grace_seconds)

    def pids(self) -> list[int]:
        """Every live process of this pod: the ones whose environment carries its marker."""
        return processes_with_env(f"{POD_MARKER_ENV}={self.marker}")

    def signal_all(self, sig: signal.Signals) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def reap(self) -> None:
        """Collect the killed main process and close the log."""
        if self.process is not None:
            try:
                self.process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:  # unkillable (uninterruptible I/O): leave it to init
                pass
        if self._log is not None:
            self._log.close()

    def termination_message(self) -> str:
        try:
            return self.termination_log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_pods(
    pods: list[LocalPod], sig: signal.Signals = signal.SIGTERM, grace_seconds: float = STOP_GRACE_SECONDS
) -> None:
    """Stop every process of `pods` together, as the kubelet stops a pod's containers: `sig` to all,
    one shared grace period, then SIGKILL until none is left (processes forked meanwhile included)."""
    for pod in pods:
        pod.signal_all(sig)
    deadline = time.monotonic() + grace_seconds
    while any(pod.pids() for pod in pods) and time.monotonic() < deadline:
        for pod in pods:
            if pod.process is not None:
                pod.process.poll()  # reap main processes as they exit
        time.sleep(0.05)
    for _ in range(100):  # a few seconds at most; SIGKILL cannot be ignored
        if not any(pod.pids() for pod in pods):
            break
        for pod in pods:
            pod.signal_all(signal.SIGKILL)
        time.sleep(0.05)
    for pod in pods:
        pod.reap()


def processes_with_env(entry: str) -> list[int]:
    """The live (not zombie) processes whose environment holds `entry` ("NAME=value")."""
    needle = entry.encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                stat = (proc / "stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    found.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found
