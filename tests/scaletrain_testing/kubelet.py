"""A kubelet stand-in for the tests' real control plane: fake Nodes whose pods run on this machine.

    with Kubelet(control_plane.api_client(), [FakeNode("cpu-1"), gpu_node("gpu-1")], tmp_path) as kubelet:
        ...  # the scheduler binds pods to cpu-1 and gpu-1; they run here

- **Nodes.** Each FakeNode is registered with its labels, taints and capacity (cpu, memory, pods,
  nvidia.com/gpu), Ready, and kept fresh as the kubelet keeps it: a status heartbeat and a Lease in
  kube-node-lease renewed every NODE_HEARTBEAT_S.
- **Pods.** It watches the pods bound to its nodes and runs each on the pod executor
  (scaletrain_operator.local.executor: env with the downward API and `$(VAR)`, working directories,
  volumes, a clean environment, and when root a network namespace per pod and a filesystem per
  container: the volumes at their mountPaths, its own /dev/termination-log and /dev/shm, and this
  machine's files never written), one worker thread per pod, as the kubelet's pod workers.
  Projected, secret and configMap volumes (every pod has the projected service-account token the
  ServiceAccount admission plugin adds) are written as files from the API, and env from a Secret
  (secretKeyRef) is read from it.
- **Status**, as the kubelet writes it: phase, podIP, hostIP, startTime, conditions, and
  containerStatuses with exit codes, reasons and the termination message files' contents. A spec the
  executor cannot run stays Pending with the reason CreateContainerConfigError and the message.
- **Deletion.** A pod with a deletionTimestamp gets SIGTERM, its grace period, then SIGKILL; then the
  kubelet removes the object (gracePeriodSeconds=0), as the kubelet does.
- **Exit.** Every pod is stopped (no process left), then the Leases and Nodes are removed.
"""

from __future__ import annotations

import base64
import platform
import threading
import time
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from scaletrain_operator.local.executor import PodExecutor, PodExtras, RunningPod
from scaletrain_operator.local.pod_network import PodNetwork
from scaletrain_operator.local.pod_spec import PodFields, pod_field
from scaletrain_trainer.contract.validation import Problem, ProblemsError

from .control_plane import KUBERNETES_VERSION
from .kube import Kube
from .waiting import WaitTimeout, wait_until

NODE_HEARTBEAT_S = 10.0
LEASE_DURATION_S = 40
POD_SYNC_S = 0.2  # how often a pod worker looks at its pod
WATCH_S = 5  # one watch request's length: how soon the watch notices the kubelet is stopping
CONFIG_WAIT_S = 10.0  # for a ConfigMap or Secret a volume needs (kube-root-ca.crt comes a little late)
EXIT_GRACE_S = 2.0  # the pods still running when the kubelet stops
LEASE_NAMESPACE = "kube-node-lease"
GPU_RESOURCE = "nvidia.com/gpu"
KUBELET_CONDITIONS = frozenset(
    {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "AllContainersRestarting"}
)
# What the node declares it can do beyond the API (node.status.declaredFeatures), which the scheduler matches a pod's
# needs against: the pod executor restarts a pod's containers in place (RunningPod.restart_all_containers).
DECLARED_FEATURES = ["RestartAllContainersOnContainerExits"]


@dataclass(frozen=True)
class FakeNode:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    gpus: int = 0

    def capacity(self) -> dict[str, str]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods), "ephemeral-storage": "100Gi"}
        return capacity | ({GPU_RESOURCE: str(self.gpus)} if self.gpus else {})


def gpu_node(name: str, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3") -> FakeNode:
    """A GPU node as the NVIDIA GPU operator labels it, tainted as GPU nodes commonly are."""
    labels = {f"{GPU_RESOURCE}.product": product, f"{GPU_RESOURCE}.count": str(gpus)}
    return FakeNode(name, labels, [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}], gpus=gpus)


def rfc3339(moment: datetime | None = None, micro: bool = False) -> str:
    moment = moment or datetime.now(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    """Fake Nodes and the pods bound to them, run here (see the module's docstring)."""

    def __init__(
        self,
        api: client.ApiClient,
        nodes: Sequence[FakeNode],
        workdir: Path,
        network: PodNetwork | None = None,
        namespaces: Collection[str] | None = None,
    ):
        """`namespaces`: whose pods it runs (None: every namespace's). The control plane is shared by the
        whole session, and the scheduler binds to new nodes the pods that earlier tests' jobs left waiting;
        a pod of another namespace stays as the scheduler left it."""
        self.api, self.kube = api, Kube(api)
        self.namespaces = None if namespaces is None else frozenset(namespaces)
        self.nodes = {node.name: node for node in nodes}
        self.workdir = workdir
        self.executor = PodExecutor(workdir / "executor", network)
        self.errors: list[BaseException] = []
        self._workers: dict[str, PodWorker] = {}  # by pod uid
        self._ready_since = rfc3339()  # the Nodes' conditions have not changed since
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guarded, args=(self._heartbeat,), name="kubelet-heartbeat", daemon=True),
            threading.Thread(target=self._guarded, args=(self._watch_pods,), name="kubelet-watch", daemon=True),
        ]

    def __enter__(self) -> Kubelet:
        if self.executor.network_mode != "namespaces":
            warnings.warn(f"kubelet pods share this machine's loopback: {self.executor.network_reason}", stacklevel=2)
        if self.executor.filesystem_mode != "contained":
            message = f"kubelet pods share this machine's filesystem: {self.executor.filesystem_reason}"
            warnings.warn(message, stacklevel=2)
        try:
            for node in self.nodes.values():
                self._register(node)
        except BaseException:
            self._unregister()
            self.executor.close()
            raise
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        with self._lock:  # no pod starts after this
            self._stop.set()
        # The workers notice within a sync; the watch may be in the middle of a request, which can
        # start nothing now, and ends within WATCH_S.
        for thread in self._threads + [worker.thread for worker in self._workers.values()]:
            thread.join(timeout=POD_SYNC_S * 2)
        self.executor.close(grace_seconds=EXIT_GRACE_S)
        self._unregister()
        if exc_info[0] is None and self.errors:
            raise RuntimeError("the kubelet failed: " + "; ".join(describe(error) for error in self.errors))

    def running(self, namespace: str, name: str) -> RunningPod | None:
        """The pod as it runs here (its containers' processes and exits), for assertions."""
        with self._lock:
            return next((w.running for w in self._workers.values() if (w.namespace, w.name) == (namespace, name)), None)

    def lose(self, name: str) -> None:
        """Node `name` is lost, as when its machine dies: its pods' processes die with no word to the API server, its
        heartbeats stop, and the cloud deletes its Node. The pod garbage collector then fails its pods
        (DisruptionTarget, DeletionByPodGC) and deletes them, once a deleted node's quarantine (40 s) passed."""
        with self._lock:  # a new dict: the heartbeat may be iterating the old one
            self.nodes = {kept: node for kept, node in self.nodes.items() if kept != name}
            lost = [w for w in self._workers.values() if (w.latest.get("spec") or {}).get("nodeName") == name]
        for worker in lost:
            worker.lose()
        self.kube.delete("leases", LEASE_NAMESPACE, name)
        self.kube.delete("nodes", None, name)

    # ---- nodes ----

    def _register(self, node: FakeNode) -> None:
        labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        metadata = {"name": node.name, "labels": labels | node.labels}
        self.kube.delete("nodes", None, node.name)  # one left by an earlier run
        created = self.kube.create(
            "nodes", {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {"taints": node.taints}}
        )
        self.kube.set_status("nodes", None, node.name, self._node_status(node))
        # The API server taints a new Node not-ready; the node lifecycle controller lifts the taint once
        # the Node reports Ready. That controller is not in the tests' control plane: do its part here.
        self.kube.patch("nodes", None, node.name, {"spec": {"taints": node.taints or None}})
        owner = {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": created["metadata"]["uid"]}
        self.kube.delete("leases", LEASE_NAMESPACE, node.name)
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node.name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
            "spec": {
                "holderIdentity": node.name,
                "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": rfc3339(micro=True),
            },
        }
        self.kube.create("leases", lease)

    def _node_status(self, node: FakeNode) -> dict[str, Any]:
        now, since = rfc3339(), self._ready_since
        healthy = [
            ("MemoryPressure", "KubeletHasSufficientMemory"),
            ("DiskPressure", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "KubeletHasSufficientPID"),
        ]
        conditions = [
            {"type": kind, "status": "False", "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": since}
            for kind, reason in healthy
        ] + [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "the pod executor is ready",
             "lastHeartbeatTime": now, "lastTransitionTime": since}
        ]  # fmt: skip
        return {
            "capacity": node.capacity(),
            "allocatable": node.capacity(),
            "conditions": conditions,
            "declaredFeatures": DECLARED_FEATURES,
            "addresses": [
                {"type": "InternalIP", "address": self.executor.network.host_ip},
                {"type": "Hostname", "address": node.name},
            ],
            "nodeInfo": {
                "machineID": node.name,
                "systemUUID": node.name,
                "bootID": node.name,
                "kernelVersion": platform.release(),
                "osImage": "the tests' machine",
                "containerRuntimeVersion": "scaletrain-pod-executor://0.1.0",
                "kubeletVersion": KUBERNETES_VERSION,
                "kubeProxyVersion": KUBERNETES_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _heartbeat(self) -> None:
        while not self._stop.wait(NODE_HEARTBEAT_S):
            for node in self.nodes.values():
                self.kube.set_status("nodes", None, node.name, self._node_status(node))
                self.kube.patch("leases", LEASE_NAMESPACE, node.name, {"spec": {"renewTime": rfc3339(micro=True)}})

    def _unregister(self) -> None:
        for name in self.nodes:
            self.kube.delete("leases", LEASE_NAMESPACE, name)
            self.kube.delete("nodes", None, name)

    # ---- pods ----

    def _watch_pods(self) -> None:
        watch_pods(self.kube, self._stop, self._dispatch, field_selector="spec.nodeName!=")

    def _dispatch(self, pod: dict[str, Any], deleted: bool) -> None:
        if pod["spec"].get("nodeName") not in self.nodes:
            return
        if self.namespaces is not None and pod["metadata"]["namespace"] not in self.namespaces:
            return
        uid = pod["metadata"]["uid"]
        with self._lock:
            if self._stop.is_set():
                return
            worker = self._workers.get(uid)
            if worker is None and not deleted:
                worker = self._workers[uid] = PodWorker(self, pod)
                worker.thread.start()
        if worker is not None:
            worker.update(pod, deleted)

    def prepared_volumes(self, pod: dict[str, Any]) -> dict[str, Path]:
        """Projected, secret and configMap volumes as directories of files, written from the API."""
        prepared = {}
        for index, volume in enumerate(pod["spec"].get("volumes") or []):
            if "projected" in volume:
                sources = volume["projected"].get("sources") or []
            elif "secret" in volume:
                sources = [{"secret": {**volume["secret"], "name": volume["secret"]["secretName"]}}]
            elif "configMap" in volume:
                sources = [{"configMap": volume["configMap"]}]
            else:
                continue
            directory = self.workdir / "volumes" / pod["metadata"]["uid"] / volume["name"]
            directory.mkdir(parents=True, exist_ok=True)
            for source in sources:
                for path, content in self._source_files(pod, source, ("spec", "volumes", index)).items():
                    (directory / path).parent.mkdir(parents=True, exist_ok=True)
                    (directory / path).write_bytes(content)
            prepared[volume["name"]] = directory
        return prepared

    def secret_lookup(self, pod: dict[str, Any]) -> Callable[[str, str], str | None]:
        """The env's secretKeyRefs as the kubelet resolves them: a key of a Secret in the pod's namespace, read
        once per Secret when the pod starts. Unlike a volume's, a missing Secret is not waited for: the kubelet
        does not wait either, it reports CreateContainerConfigError and retries (which the stand-in does not)."""
        namespace, read = pod["metadata"]["namespace"], {}

        def lookup(name: str, key: str) -> str | None:
            if name not in read:
                read[name] = self._wait_for_object("secret", namespace, name, optional=True)
            data = (read[name] or {}).get("data") or {}
            return base64.b64decode(data[key]).decode(errors="surrogateescape") if key in data else None

        return lookup

    def _source_files(self, pod: dict[str, Any], source: dict[str, Any], where: tuple) -> dict[str, bytes]:
        """One volume source's files, by path."""
        metadata = pod["metadata"]
        if "serviceAccountToken" in source:
            return {source["serviceAccountToken"]["path"]: pod_token(self.kube, pod, source["serviceAccountToken"])}
        if "downwardAPI" in source:  # metadata fields only: a volume cannot hold the pod's IP
            fields = PodFields("", "", pod["spec"]["nodeName"])
            items = source["downwardAPI"].get("items") or []
            return {item["path"]: pod_field(pod, item["fieldRef"]["fieldPath"], fields).encode() for item in items}
        kind = "secret" if "secret" in source else "configMap"
        reference = source[kind]
        found = self._wait_for_object(kind, metadata["namespace"], reference["name"], reference.get("optional", False))
        if found is None:
            if reference.get("optional", False):
                return {}
            message = f"{kind} {reference['name']!r} not found in {CONFIG_WAIT_S:.0f} s"
            raise ProblemsError([Problem(where, message)])
        data = {
            key: base64.b64decode(value) if kind == "secret" else value.encode()
            for key, value in (found.get("data") or {}).items()
        }
        items = reference.get("items") or [{"key": key, "path": key} for key in data]
        return {item["path"]: data[item["key"]] for item in items if item["key"] in data}

    def _wait_for_object(self, kind: str, namespace: str, name: str, optional: bool) -> dict[str, Any] | None:
        """A Secret or ConfigMap, waited for a while unless optional (the kubelet waits for ever); None if
        it does not come."""
        plural = {"secret": "secrets", "configMap": "configmaps"}[kind]

        def found() -> dict[str, Any] | None:
            try:
                return self.kube.request("GET", f"/api/v1/namespaces/{namespace}/{plural}/{name}")
            except ApiException as error:
                if error.status != 404:
                    raise
                return None

        try:
            return wait_until(found, 0 if optional else CONFIG_WAIT_S, f"{kind} {namespace}/{name}", POD_SYNC_S)
        except WaitTimeout:
            return None

    def _guarded(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except Exception as error:  # reported on exit
            if not self._stop.is_set():
                self.errors.append(error)


def watch_pods(
    kube: Kube,
    stop: threading.Event,
    dispatch: Callable[[dict[str, Any], bool], None],
    namespace: str | None = None,
    field_selector: str | None = None,
) -> None:
    """`dispatch(pod, deleted)` for each pod of `namespace` (None: every namespace's) and each change to one, until
    `stop`: a list, then a watch from there, as an informer does; a watch that expired starts over."""
    core = client.CoreV1Api(kube.api)
    path, list_call, args = (
        (f"/api/v1/namespaces/{namespace}/pods", core.list_namespaced_pod, (namespace,))
        if namespace
        else ("/api/v1/pods", core.list_pod_for_all_namespaces, ())
    )
    selected = {"field_selector": field_selector} if field_selector else {}
    while not stop.is_set():
        listed = kube.request("GET", path, query=[("fieldSelector", field_selector)] if field_selector else [])
        for pod in listed["items"]:
            dispatch(pod, False)
        version = listed["metadata"]["resourceVersion"]
        try:
            while not stop.is_set():
                for event in watch.Watch().stream(
                    list_call, *args, **selected, resource_version=version, timeout_seconds=WATCH_S,
                    allow_watch_bookmarks=True,
                ):  # fmt: skip
                    version = event["raw_object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        dispatch(event["raw_object"], event["type"] == "DELETED")
        except ApiException as error:
            if error.status != 410:  # Gone: the version is too old; list again
                raise
        except HTTPError:  # the API server went away (the session is ending): try again, or stop
            time.sleep(POD_SYNC_S)


def pod_token(kube: Kube, pod: dict[str, Any], projection: dict[str, Any]) -> bytes:
    """A service-account token bound to the pod, for a projected volume's serviceAccountToken `projection`, from the
    TokenRequest API, as the kubelet gets it."""
    metadata = pod["metadata"]
    spec = {
        "audiences": [projection["audience"]] if projection.get("audience") else [],
        "expirationSeconds": projection.get("expirationSeconds", 3600),
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]},
    }
    account = pod["spec"].get("serviceAccountName", "default")
    path = f"/api/v1/namespaces/{metadata['namespace']}/serviceaccounts/{account}/token"
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return kube.request("POST", path, request)["status"]["token"].encode()


def describe(error: BaseException) -> str:
    if isinstance(error, ApiException):  # whose repr is a bare "ApiException()"
        return f"ApiException {error.status} {error.reason}: {(error.body or '')[:500]}"
    return repr(error)


class PodWorker:
    """One pod's life on the node, driven by one thread: start, status, deletion."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]):
        self.kubelet, self.latest = kubelet, pod
        self.namespace, self.name, self.uid = (
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            pod["metadata"]["uid"],
        )
        self.running: RunningPod | None = None
        self.gone = False  # the object is deleted: nothing left to report to
        self.lost = False  # its node is lost: nothing is reported any more
        self._changed = threading.Event()
        self.thread = threading.Thread(target=kubelet._guarded, args=(self._run,), name=f"pod-{self.name}", daemon=True)

    def update(self, pod: dict[str, Any], deleted: bool) -> None:
        self.latest, self.gone = pod, self.gone or deleted
        self._changed.set()

    def lose(self) -> None:
        self.lost = True
        self._changed.set()

    @property
    def deleting(self) -> bool:
        return self.gone or self.latest["metadata"].get("deletionTimestamp") is not None

    def _run(self) -> None:
        if not self.deleting:
            self._start()
        reported: dict[str, Any] | None = None
        while not self.kubelet._stop.is_set():
            if self.lost:
                if self.running is not None:
                    self.running.stop(grace_seconds=0)
                return
            if self.deleting:
                self._delete()
                return
            if self.running is not None:
                self.running.poll()
                status = self._status()
                if status != reported:
                    self._report(status)
                    reported = status
            self._changed.wait(POD_SYNC_S)
            self._changed.clear()

    def _start(self) -> None:
        try:
            extras = PodExtras(
                volumes=self.kubelet.prepared_volumes(self.latest), secrets=self.kubelet.secret_lookup(self.latest)
            )
            self.running = self.kubelet.executor.start(self.latest, extras)
        except (ProblemsError, ApiException) as error:
            # ApiException: a volume's token or ConfigMap could not be had, e.g. while the namespace is
            # being deleted. The kubelet reports the pod's containers as not created, as here.
            message = (
                str(error)
                if isinstance(error, ProblemsError)
                else f"volume set-up failed: {error.status} {error.reason}"
            )
            waiting = {"waiting": {"reason": "CreateContainerConfigError", "message": message}}
            containers = self.latest["spec"]["containers"]
            statuses = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": waiting,
                }
                for c in containers
            ]
            self._report({"phase": "Pending", "conditions": self._not_the_kubelets(), "containerStatuses": statuses})

    def _status(self) -> dict[str, Any]:
        assert self.running is not None
        status = self.running.status()
        return status | {"conditions": self._not_the_kubelets() + status["conditions"]}

    def _not_the_kubelets(self) -> list[dict[str, Any]]:
        """The conditions others set (the scheduler's PodScheduled, the eviction API's DisruptionTarget),
        kept as the kubelet keeps them: a merge patch replaces the whole list."""
        conditions = (self.latest.get("status") or {}).get("conditions") or []
        return [condition for condition in conditions if condition["type"] not in KUBELET_CONDITIONS]

    def _report(self, status: dict[str, Any]) -> None:
        """Write the pod's status; the uid makes sure it is this pod and not a new one of the same name."""
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status"
        body = {"metadata": {"uid": self.uid}, "status": status}
        try:
            self.kubelet.kube.request("PATCH", path, body, content_type="application/merge-patch+json")
        except ApiException as error:
            if error.status not in (404, 409, 422):  # gone, or replaced meanwhile
                raise

    def _delete(self) -> None:
        """Stop the pod with its grace period, report how its containers ended, remove the object."""
        grace = self.latest["metadata"].get("deletionGracePeriodSeconds")
        if self.running is not None:
            self.running.stop(grace_seconds=0 if self.gone else grace)
            if not self.gone:
                self._report(self._status())
        if not self.gone:
            body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
            try:
                self.kubelet.kube.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{self.name}", body)
            except ApiException as error:
                if error.status not in (404, 409):
                    raise
