"""The pod executor: a pod's containers as local processes, with a kubelet's semantics.

`PodExecutor.start(pod)` makes the pod's sandbox (its place in the pod network, pod_network.py),
resolves each container as the kubelet would (pod_spec.py: env with the downward API and `$(VAR)`,
command, volumes, working directory), then runs the init containers one after the other and the
containers together, each in a clean environment with its own log and termination message file.
`RunningPod.poll()` moves the pod on, as the kubelet's pod worker does, and `status()` reports it
as the kubelet would (phase, podIP, conditions, containerStatuses). `stop()` deletes it:
SIGTERM to each container's main process, the pod's terminationGracePeriodSeconds, then SIGKILL to
whatever of the pod is left. Should the executor's process die without stopping its pods (SIGKILL),
its orphan guard kills them (processes.OrphanGuard).

Under the executor's root directory: `pods/NAMESPACE_NAME_UID/` (per container: its own files in
`rootfs/`, its writable layer or its HOME, TMPDIR and default working directory, and its termination
message file; per emptyDir volume a directory), `volumes/NAMESPACE/CLAIM/` (persistentVolumeClaims, shared
by every pod that claims them) and `logs/POD_CONTAINER.log`.

Each container's filesystem is its own where this machine allows it (root: a mount namespace with
this machine's root as the image, a writable layer of its own, the volumes at their mountPaths and
its own /dev, /dev/shm and /tmp), else this machine's (pod_filesystem.py says which and why).

A container's restartPolicyRules may restart every container of its pod where it stands (the action
RestartAllContainers, KEP-5532): the pod keeps its sandbox, its volumes and its phase, each container loses its
writable layer, and the init containers run again (`RunningPod.poll`).

What a kubelet does and this does not: images (a container runs this machine's programs), resource
limits and securityContext (every process runs as this user), other restarts (restartPolicy Never, and
no container restarted alone), and a PID namespace (the main process is not PID 1, so it does not ignore
an unhandled SIGTERM). A RunningPod is driven by one thread at a time, as the kubelet's pod worker drives
its pod.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.validation import Problem, ProblemsError

from ..api.conditions import (
    ALL_CONTAINERS_RESTARTING,
    CONTAINER_COMPLETED,
    CONTAINER_ERROR,
    CONTAINERS_READY,
    INITIALIZED,
    POD_INITIALIZING,
    POD_READY_TO_START_CONTAINERS,
    READY,
    RESTARTING_ALL_CONTAINERS,
    START_ERROR,
    PodPhase,
)
from ..api.timestamps import timestamp
from .pod_filesystem import ContainerFiles, PodFilesystem, open_filesystem
from .pod_network import PodIdentity, PodNetwork, PodSandbox, open_network
from .pod_spec import (
    Pod,
    PodFields,
    SecretLookup,
    VolumeDirs,
    command_line,
    containers_of,
    grace_seconds,
    image_env,
    mount_dirs,
    move_files_env,
    pod_hostname,
    relocate_config_env,
    resolve_env,
    restart_rules,
    restarts_all_containers,
)
from .processes import (
    KILL_WAIT_SECONDS,
    MARKER_ENV,
    POLL_SECONDS,
    OrphanGuard,
    ProcessInfo,
    exit_code,
    scan_processes,
    signal_processes,
)

TERMINAL_PHASES = (PodPhase.SUCCEEDED, PodPhase.FAILED)
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
FALLBACK_LOG_LINES = 80  # terminationMessagePolicy FallbackToLogsOnError: the log's last 80 lines
START_ERROR_EXIT_CODE = 128  # a command that cannot be executed, as containerd reports it
# A container removed for a restart of all its pod's containers, as the kubelet reports it in its lastState (every
# container's, the one whose exit asked for the restart included).
REMOVED_FOR_RESTART = {
    "exitCode": 137,
    "reason": RESTARTING_ALL_CONTAINERS,
    "message": "The container is removed because RestartAllContainers in place",
}


@dataclass(frozen=True)
class PodExtras:
    """What a node adds to a pod beyond its spec, as a kubelet's plugins do."""

    device_env: Mapping[str, str] = field(default_factory=dict)  # a device plugin's, e.g. CUDA_VISIBLE_DEVICES
    volumes: Mapping[str, Path] = field(default_factory=dict)  # directories made for volumes of other kinds
    secrets: SecretLookup | None = None  # the pod's namespace's Secrets, where a cluster has them (resolve_env)


NO_EXTRAS = PodExtras()


def now() -> datetime:
    return datetime.now(timezone.utc)


def pod_time(moment: datetime | None) -> str | None:
    """A pod status time as the kubelet writes it (metav1.Time: whole seconds); None while there is none."""
    return timestamp(moment, "seconds") if moment else None


@dataclass
class ContainerRun:
    """One container of a running pod: resolved for this machine, its process, and its state."""

    name: str
    image: str
    argv: list[str]  # the expanded command and args
    env: dict[str, str]  # the process's whole environment
    files: ContainerFiles  # its filesystem: where it starts, what is made before, how it is entered
    own_dirs: list[Path]  # made before it starts: its filesystem's, and its volumes' directories
    log_path: Path
    termination_log: Path
    fallback_to_logs: bool  # terminationMessagePolicy: FallbackToLogsOnError
    marker: str  # MARKER_ENV's value in its processes
    layer_dirs: list[Path] = field(default_factory=list)  # its own files (of own_dirs), which a restart removes
    restart_rules: list[Mapping[str, Any]] = field(default_factory=list)  # its restartPolicyRules
    restart_count: int = 0
    last_state: dict[str, Any] = field(default_factory=dict)  # as in a ContainerStatus: before the last restart
    process: subprocess.Popen[bytes] | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str = ""  # when terminated: Completed, Error or StartError
    message: str = ""
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def terminated(self) -> bool:
        return self.exit_code is not None

    @property
    def running(self) -> bool:
        return self.process is not None and not self.terminated

    @property
    def restarts_all(self) -> bool:
        """It exited with a code on which its restartPolicyRules restart every container of its pod."""
        return self.exit_code is not None and restarts_all_containers(self.restart_rules, self.exit_code)

    def remove(self) -> None:
        """Removed (its processes gone) for a restart of every container of its pod: its writable layer goes, its
        state moves to lastState as the kubelet reports it, and it waits to start again. Its volumes, its log
        (appended to, as `kubectl logs` reads one file here) and its restart count stay."""
        for directory in self.layer_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        self.restart_count += 1
        self.last_state = {"terminated": dict(REMOVED_FOR_RESTART)}
        self.process = self.started_at = self.finished_at = self.exit_code = None
        self.reason = self.message = ""

    def start(self, network: PodNetwork, sandbox: PodSandbox) -> None:
        """Start the main process; a command that cannot be executed terminates the container with
        StartError, as the runtime reports it."""
        for directory in self.own_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        self.termination_log.write_text("")  # the kubelet provides an empty file
        self.started_at = now()
        executable = find_executable(self.argv[0], self.env["PATH"], self.files.lookup_dir)
        if executable is None:
            self._terminate(
                START_ERROR_EXIT_CODE, START_ERROR, f'exec: "{self.argv[0]}": executable file not found in $PATH'
            )
            return
        self._log = self.log_path.open("ab")
        try:
            command = network.enter(sandbox, self.files.command(executable, self.argv))
            self.process = subprocess.Popen(
                command, env=self.env, cwd=self.files.start_dir,
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            self._terminate(START_ERROR_EXIT_CODE, START_ERROR, f"exec: {error}")

    def poll(self, processes: list[ProcessInfo] | None = None) -> None:
        """Note the main process's exit; the container's other processes then die with it, as a
        runtime kills the container's cgroup."""
        if self.process is None or self.terminated or self.process.poll() is None:
            return
        table = scan_processes() if processes is None else processes
        leftovers = [process.pid for process in table if process.env_value == self.marker]
        signal_processes(leftovers, signal.SIGKILL)
        code = exit_code(self.process.returncode)
        self._terminate(code, CONTAINER_COMPLETED if code == 0 else CONTAINER_ERROR, self._termination_message(code))

    def reap(self, timeout_seconds: float) -> None:
        """Wait for a killed main process (a zombie once its pod's processes are gone) and note its exit."""
        if self.process is not None and not self.terminated:
            try:
                self.process.wait(timeout=timeout_seconds)
            except subprocess.TimeoutExpired:  # unkillable (uninterruptible I/O): leave it to init
                return
            self.poll([])

    def state(self) -> dict[str, Any]:
        """The container's state, as in a Kubernetes ContainerStatus."""
        if self.terminated:
            terminated = {
                "exitCode": self.exit_code,
                "reason": self.reason,
                "message": self.message,
                "startedAt": pod_time(self.started_at),
                "finishedAt": pod_time(self.finished_at),
            }
            return {"terminated": {key: value for key, value in terminated.items() if value not in ("", None)}}
        if self.running:
            return {"running": {"startedAt": pod_time(self.started_at)}}
        return {"waiting": {"reason": POD_INITIALIZING}}

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.running,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state(),
            "lastState": self.last_state,
        }

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _terminate(self, code: int, reason: str, message: str) -> None:
        self.exit_code, self.reason, self.message, self.finished_at = code, reason, message, now()
        if self._log is not None:
            self._log.close()

    def _termination_message(self, code: int) -> str:
        """The termination message file, or with FallbackToLogsOnError and a failure, the log's tail; of a
        longer file, its last wire.TERMINATION_MESSAGE_LIMIT, as the kubelet keeps (where an error ends)."""
        try:
            with self.termination_log.open("rb") as file:
                file.seek(max(0, file.seek(0, os.SEEK_END) - wire.TERMINATION_MESSAGE_LIMIT))
                message = file.read().decode(errors="replace")
        except OSError:
            message = ""
        if not message and code != 0 and self.fallback_to_logs:
            tail = self.tail(FALLBACK_LOG_LINES).encode()
            message = tail[-wire.TERMINATION_MESSAGE_LIMIT :].decode(errors="replace")
        return message


class RunningPod:
    """A pod on this machine, from its start until it is stopped. Drive it from one thread."""

    def __init__(
        self,
        pod: Pod,
        network: PodNetwork,
        sandbox: PodSandbox,
        init_containers: list[ContainerRun],
        containers: list[ContainerRun],
        marker: str,
    ):
        self.pod, self.network, self.sandbox, self.marker = pod, network, sandbox, marker
        self.init_containers, self.containers = init_containers, containers
        self.phase = PodPhase.PENDING
        self.started_at = now()
        self._transitions: dict[str, tuple[bool, datetime]] = {}  # condition type → (status, since)
        self._network_attached = True

    @property
    def name(self) -> str:
        return self.pod["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.pod["metadata"].get("namespace") or "default"

    @property
    def pod_ip(self) -> str:
        return self.sandbox.ip

    @property
    def grace_seconds(self) -> float:
        return grace_seconds(self.pod)

    def container(self, name: str) -> ContainerRun:
        return next(c for c in [*self.init_containers, *self.containers] if c.name == name)

    @property
    def default_container(self) -> ContainerRun:
        """The one `kubectl logs` picks: the annotated default container, else the first."""
        wanted = (self.pod["metadata"].get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
        return next((c for c in self.containers if c.name == wanted), self.containers[0])

    @property
    def log_path(self) -> Path:
        return self.default_container.log_path

    def tail(self, lines: int = 30) -> str:
        return self.default_container.tail(lines)

    def address(self, port: int) -> tuple[str, int]:
        """Where this machine reaches the pod's container port `port`."""
        return self.network.address(self.sandbox, port)

    def poll(self, processes: list[ProcessInfo] | None = None) -> PodPhase:
        """Move the pod on, as the kubelet's pod worker does (restartPolicy Never): the init containers
        one after the other, the first to fail failing the pod; then the containers together, until
        each has ended: Succeeded if each exited 0, else Failed. A container whose exit restarts all the
        pod's containers restarts them first (restart_all_containers). Returns the phase."""
        if self.phase in TERMINAL_PHASES:
            return self.phase
        for container in [*self.init_containers, *self.containers]:
            container.poll(processes)
        if any(container.restarts_all for container in [*self.init_containers, *self.containers]):
            self.restart_all_containers()
        for container in self.init_containers:
            if not container.terminated:
                if container.process is None:
                    container.start(self.network, self.sandbox)
                return self.phase
            if container.exit_code != 0:
                self._finish(PodPhase.FAILED)
                return self.phase
        for container in self.containers:
            if container.process is None and not container.terminated:
                container.start(self.network, self.sandbox)
        if all(container.terminated for container in self.containers):
            self._finish(PodPhase.SUCCEEDED if all(c.exit_code == 0 for c in self.containers) else PodPhase.FAILED)
        else:
            self.phase = PodPhase.RUNNING
        return self.phase

    def restart_all_containers(self) -> None:
        """Restart every container of the pod where it stands, as the kubelet does for a RestartAllContainers rule:
        each is killed at once (no grace period, no preStop hook) and removed, then the next poll starts them
        again from the first init container. The pod keeps its sandbox (its IP), volumes and phase; its
        AllContainersRestarting condition, True while they are removed, turns False when they are."""
        self._condition(ALL_CONTAINERS_RESTARTING, True)
        signal_processes(self.processes(scan_processes()), signal.SIGKILL)
        for container in [*self.init_containers, *self.containers]:
            container.reap(KILL_WAIT_SECONDS)
            container.remove()
        self._condition(ALL_CONTAINERS_RESTARTING, False)

    def stop(self, grace_seconds: float | None = None) -> None:
        """Delete the pod: see stop_pods. grace_seconds=0 kills at once, as a lost node would."""
        stop_pods([self], grace_seconds)

    def status(self) -> dict[str, Any]:
        """The pod's status as of the last poll, as the kubelet reports it."""
        initialized = all(c.terminated and c.exit_code == 0 for c in self.init_containers)
        ready = self.phase == PodPhase.RUNNING and all(c.running for c in self.containers)
        conditions = [
            self._condition(POD_READY_TO_START_CONTAINERS, True),
            self._condition(INITIALIZED, initialized),
            self._condition(CONTAINERS_READY, ready),
            self._condition(READY, ready),
        ]
        if any(c.restart_rules for c in [*self.init_containers, *self.containers]):  # as the kubelet: only then
            conditions.append(self._condition(ALL_CONTAINERS_RESTARTING, False))
        return {
            "phase": self.phase,
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "hostIP": self.network.host_ip,
            "hostIPs": [{"ip": self.network.host_ip}],
            "startTime": pod_time(self.started_at),
            "conditions": conditions,
            "initContainerStatuses": [c.status() for c in self.init_containers],
            "containerStatuses": [c.status() for c in self.containers],
        }

    def processes(self, table: list[ProcessInfo]) -> list[int]:
        """The pod's live processes in a scan of /proc: by marker, and by network namespace while the
        pod has one (the kernel reuses a deleted namespace's inode number for the next namespace made,
        which may be another pod's)."""
        netns_inode = self.sandbox.netns_inode if self._network_attached else None
        return [process.pid for process in table if process.of_pod(self.marker, netns_inode)]

    def _detach_network(self) -> None:
        self._network_attached = False
        self.network.detach(self.sandbox)

    def _terminate_main_processes(self) -> None:
        """SIGTERM to each running container's main process, as the container runtime sends it."""
        signal_processes(
            [c.process.pid for c in self.containers + self.init_containers if c.running and c.process], signal.SIGTERM
        )

    def _finish(self, phase: PodPhase) -> None:
        """The pod has ended: nothing of it may keep running, and its network goes."""
        self.phase = phase
        signal_processes(self.processes(scan_processes()), signal.SIGKILL)
        self._detach_network()

    def _after_stop(self) -> None:
        """Once a stopped pod's processes are gone: its containers' exits, and its final phase."""
        for container in [*self.init_containers, *self.containers]:
            container.reap(KILL_WAIT_SECONDS)
        if self.phase not in TERMINAL_PHASES:
            succeeded = all(c.terminated and c.exit_code == 0 for c in self.containers)
            self._finish(PodPhase.SUCCEEDED if succeeded else PodPhase.FAILED)
        self._detach_network()

    def _condition(self, kind: str, status: bool) -> dict[str, Any]:
        previous = self._transitions.get(kind)
        if previous is None or previous[0] != status:
            self._transitions[kind] = previous = (status, now())
        return {"type": kind, "status": str(status), "lastTransitionTime": pod_time(previous[1])}


def stop_pods(pods: Iterable[RunningPod], grace_seconds: float | None = None) -> None:
    """Stop `pods` together, as the kubelet stops a deleted pod: SIGTERM to each container's main
    process, then each pod's grace period (its terminationGracePeriodSeconds, unless
    `grace_seconds` says otherwise; 0 skips SIGTERM), then SIGKILL until nothing of the pod is left
    (processes forked meanwhile included)."""
    pods = list(pods)
    started = time.monotonic()
    deadlines = [started + (pod.grace_seconds if grace_seconds is None else grace_seconds) for pod in pods]
    for pod, deadline in zip(pods, deadlines, strict=True):
        if deadline > started:
            pod._terminate_main_processes()
    give_up = max(deadlines, default=started) + KILL_WAIT_SECONDS
    while time.monotonic() < give_up:
        table = scan_processes()
        alive = [(pod, deadline, pod.processes(table)) for pod, deadline in zip(pods, deadlines, strict=True)]
        if not any(pids for _, _, pids in alive):
            break
        for pod, deadline, pids in alive:
            if pids and time.monotonic() >= deadline:
                signal_processes(pids, signal.SIGKILL)
            for container in pod.containers + pod.init_containers:
                container.poll(table)  # reaps main processes as they exit
        time.sleep(POLL_SECONDS)
    for pod in pods:
        pod._after_stop()


class PodExecutor:
    """Runs pods on this machine; one pod network (and so one subnet) for all of them."""

    def __init__(
        self,
        root: Path,
        network: PodNetwork | None = None,
        node_name: str | None = None,
        filesystem: PodFilesystem | None = None,
        bound_claims: Mapping[str, Path] | None = None,
    ):
        """`bound_claims`: claims whose volume is a directory of this machine's (by claim name), not one of
        `root`'s."""
        self.root = root.absolute()  # each container has a working directory of its own
        self.bound_claims = {claim: path.absolute() for claim, path in (bound_claims or {}).items()}
        self.network = network or open_network()
        self.filesystem = filesystem or open_filesystem(self.root)
        self.node_name = node_name or socket.gethostname()  # spec.nodeName of pods that have none
        self._pods: list[RunningPod] = []
        self._lock = threading.Lock()
        self._guard = OrphanGuard()  # kills the pods should this process die without stopping them

    @property
    def network_mode(self) -> str:
        return self.network.mode

    @property
    def network_reason(self) -> str:
        return self.network.reason

    @property
    def filesystem_mode(self) -> str:
        return self.filesystem.mode

    @property
    def filesystem_reason(self) -> str:
        return self.filesystem.reason

    @property
    def claims_dir(self) -> Path:
        return self.root / "volumes"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def pod_dir(self, pod: Pod) -> Path:
        metadata = pod["metadata"]
        return self.root / "pods" / f"{metadata.get('namespace') or 'default'}_{metadata['name']}_{metadata['uid']}"

    def volume_dirs(self, pod: Pod) -> VolumeDirs:
        return VolumeDirs(self.pod_dir(pod), self.claims_dir, self.bound_claims)

    def start(self, pod: Pod, extras: PodExtras = NO_EXTRAS) -> RunningPod:
        """Start `pod` (with metadata.uid, as the API server gives every pod). A spec this executor
        cannot run raises ProblemsError naming the field; a command that cannot be executed is the
        container's StartError, in its status."""
        policy = pod["spec"].get("restartPolicy", "Always")
        if policy != "Never":
            message = f"{policy} is not supported: the local pod executor runs each container once (Never)"
            raise ProblemsError([Problem(("spec", "restartPolicy"), message)])
        marker = self._guard.pod_marker()  # the first pod starts the guard, before anything of the pod exists
        sandbox = self.network.attach(PodIdentity.of(pod))
        try:
            init_containers, containers = (
                [
                    self.resolve_container(pod, sandbox, marker, extras, where, c)
                    for where, c in containers_of(pod, kind)
                ]
                for kind in ("initContainers", "containers")
            )
        except ProblemsError:
            self.network.detach(sandbox)
            raise
        running = RunningPod(pod, self.network, sandbox, init_containers, containers, marker)
        with self._lock:
            self._pods.append(running)
        running.poll()
        return running

    def host_path(self, pod: Pod, container_name: str, path: str) -> Path:
        """Where a path of the container lies on this machine: under a volume mount in the volume's
        directory, elsewhere in its own layer or this machine's path (see pod_filesystem)."""
        where, container = next((w, c) for w, c in containers_of(pod) if c["name"] == container_name)
        mounts = mount_dirs(pod, container, self.volume_dirs(pod), where)
        return self.filesystem.host_path(path, mounts, self.container_dir(pod, container_name))

    def container_dir(self, pod: Pod, container_name: str) -> Path:
        return self.pod_dir(pod) / "containers" / container_name

    def close(self, grace_seconds: float | None = None) -> None:
        """Stop every pod still running, then remove the pod network; the orphan guard goes too."""
        with self._lock:
            pods, self._pods = self._pods, []
        stop_pods([pod for pod in pods if pod.phase not in TERMINAL_PHASES], grace_seconds)
        self.network.close()
        self._guard.close()

    def __enter__(self) -> PodExecutor:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def resolve_container(
        self, pod: Pod, sandbox: PodSandbox, marker: str, extras: PodExtras, where: tuple, container: Mapping[str, Any]
    ) -> ContainerRun:
        """The container as it will run here (not started): its argv, whole environment, working
        directory and files. `marker` is the pod's, `where` the container's field path for errors."""
        name, own = container["name"], self.container_dir(pod, container["name"])
        mounts = mount_dirs(pod, container, self.volume_dirs(pod), where, extras.volumes)
        files = self.filesystem.files(pod, container, mounts, own)
        fields = PodFields(sandbox.ip, self.network.host_ip, pod["spec"].get("nodeName") or self.node_name)
        env_spec = move_files_env(
            relocate_config_env(container.get("env") or [], files.config_mounts), files.moved_files
        )
        declared = resolve_env(pod, self.network.rewrite_env(sandbox, env_spec), fields, where, extras.secrets)
        image = image_env(Path(sys.executable).parent, pod_hostname(pod)) | files.image_env
        runtime = {MARKER_ENV: f"{marker}/{name}", **files.runtime_env}
        return ContainerRun(
            name=name,
            image=container.get("image", ""),
            argv=command_line(container, declared, where),
            env=image | declared | dict(extras.device_env) | runtime,
            files=files,
            own_dirs=[*files.own_dirs, self.logs_dir]
            + [path for path in mounts.values() if path.is_relative_to(self.root)],
            log_path=self.logs_dir / f"{pod['metadata']['name']}_{name}.log",
            termination_log=own / "termination-log",
            fallback_to_logs=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
            marker=f"{marker}/{name}",
            layer_dirs=[path for path in files.own_dirs if path.is_relative_to(own)],
            restart_rules=restart_rules(container, where),
        )


def find_executable(command: str, path: str, cwd: Path) -> str | None:
    """`command` as the runtime finds it: a path (relative to the working directory) when it has a
    slash, else the first match on the container's PATH."""
    if "/" in command:
        candidate = cwd / command
        return str(candidate) if candidate.is_file() and shutil.which(str(candidate)) else None
    return shutil.which(command, path=path)
