"""A kubelet simulated at the API, for benchmarks of hundreds of pods on fake Nodes (fake_nodes.py): it runs no
process, but writes for each pod what a kubelet writes, so that what a restart costs the API can be counted.

- **Start.** A pod bound to one of its Nodes gets a token for each projected serviceAccountToken (TokenRequest),
  then its Running status: 2 writes, or 1 where the pod mounts no token.
- **Agents.** Where the pod's gang restarts in place, its agent is the real one's Channel
  (scaletrain_trainer/agent.py) on a thread, calling the operator's endpoint with the pod's token as the agent
  does: running, ended (with the workload's exit code), ready at the barrier. A RESTART restarts the pod in place:
  2 status writes (its containers killed, AllContainersRestarting True; running again, one restart more), then the
  barrier, then the next generation runs.
- **Failure.** `fail(pod)` ends a pod's workload with exit code 1: through its agent where it has one; else the
  pod is Failed (1 write).
- **Deletion.** A deleted pod gets its last status and is removed (2 writes).

`moments` says when each pod's workload started each generation (STARTED, time.monotonic()): at the Running write,
or where there is an agent, when the operator released the generation to it. An agent's in-place restart into a
generation has two moments more: when the agent was TOLD to restart, and when its pod had RESTARTED (both writes
made)."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from scaletrain_operator.api import naming
from scaletrain_operator.api.conditions import ALL_CONTAINERS_RESTARTING
from scaletrain_trainer.agent import BARRIER_SECONDS, VERDICT_SECONDS, Channel, Word
from scaletrain_trainer.contract import wire

from .kube import Kube
from .kubelet import WATCH_S, pod_token, rfc3339, watch_pods

WRITERS = 32  # threads writing pods' statuses: the kubelets of many nodes write at once
STRATEGIC_MERGE = "application/strategic-merge-patch+json"  # merges conditions by type, as the kubelet's patch
FAILED_EXIT_CODE = 1
STARTED, TOLD, RESTARTED = "started", "told", "restarted"  # the moments of a pod's generation
POD_NETWORK = ipaddress.ip_network("10.244.0.0/16")


class SimulatedKubelet:
    """The pods of `namespace` bound to `nodes`, played at the API; agents reach the operator's endpoint trusting
    the CA in `ca` and keep their tokens under `workdir`."""

    def __init__(self, kube: Kube, namespace: str, nodes: Collection[str], ca: Path, workdir: Path):
        self.kube, self.namespace, self.nodes, self.ca, self.workdir = kube, namespace, frozenset(nodes), ca, workdir
        # Of each kind, (pod name, generation) → when: see the module's docstring.
        self.moments: dict[str, dict[tuple[str, int], float]] = {STARTED: {}, TOLD: {}, RESTARTED: {}}
        self.errors: list[str] = []
        self._pods: dict[str, SimulatedPod] = {}  # by uid
        self._addresses = 0  # how many pods have had one
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="simulated-kubelet")
        self._watcher = threading.Thread(target=self.guarded, args=(self._watch,), name="simulated-kubelet-watch")

    def __enter__(self) -> SimulatedKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        with self._lock:
            for pod in self._pods.values():
                pod.stop()
        self._watcher.join(WATCH_S + 5)
        self._writers.shutdown(wait=True, cancel_futures=True)

    def pod_ip(self) -> str:
        """An address of the pod network for a new pod (not loopback: an EndpointSlice refuses that)."""
        with self._lock:
            self._addresses += 1
            return str(POD_NETWORK[self._addresses])

    def fail(self, name: str) -> None:
        """The workload of the live pod `name` ends with exit code 1."""
        with self._lock:
            (pod,) = [p for p in self._pods.values() if p.name == name and not p.deleting]
        pod.fail()

    def agents_waiting(self) -> int:
        """How many agents have been answered WAIT at least once: their token is reviewed and their calls held."""
        with self._lock:
            return sum(pod.channel is not None and pod.channel.held.is_set() for pod in self._pods.values())

    def moments_in(self, kind: str, generation: int) -> dict[str, float]:
        """The moments of `kind` of each pod's `generation`, by pod name. AssertionError once a write or an agent
        has failed: what the waits on it would wait for may not come."""
        assert not self.errors, self.errors
        return {name: at for (name, of), at in list(self.moments[kind].items()) if of == generation}

    def note(self, kind: str, pod: str, generation: int) -> None:
        self.moments[kind][(pod, generation)] = time.monotonic()

    def guarded(self, work: Callable[[], None]) -> None:
        """Run `work`, keeping what went wrong in `errors` (a benchmark fails on any)."""
        try:
            work()
        except Exception as error:  # a thread's failure is the run's
            if not self._stop.is_set():
                self.errors.append(f"{type(error).__name__}: {error}")

    def submit(self, work: Callable[[], None]) -> None:
        if not self._stop.is_set():
            self._writers.submit(self.guarded, work)

    def _watch(self) -> None:
        watch_pods(self.kube, self._stop, self._dispatch, namespace=self.namespace)

    def _dispatch(self, pod: dict[str, Any], deleted: bool) -> None:
        if pod["spec"].get("nodeName") not in self.nodes:
            return
        uid = pod["metadata"]["uid"]
        with self._lock:
            known = self._pods.get(uid)
            if deleted:
                if known is not None:
                    known.stop()
                    del self._pods[uid]
                return
            if known is None:
                known = self._pods[uid] = SimulatedPod(self, pod)
                self.submit(known.start)
            known.latest = pod
            if pod["metadata"].get("deletionTimestamp") and not known.deleting:
                known.deleting = True
                self.submit(known.delete)


class SimulatedPod:
    """One pod's life on its node: writes on the simulated kubelet's threads, its agent on a thread of its own."""

    def __init__(self, kubelet: SimulatedKubelet, pod: dict[str, Any]):
        self.kubelet, self.latest = kubelet, pod
        self.name, self.uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        self.deleting = False
        self.channel: WatchedChannel | None = None
        self.restarts = 0
        self._lock = threading.Lock()  # its writes, one at a time and in order
        self._failed = threading.Event()  # its workload is to end with FAILED_EXIT_CODE
        self._stopped = threading.Event()  # the pod is going away
        self._interrupt = threading.Event()  # either: the agent stops listening

    def start(self) -> None:
        with self._lock:
            if self.deleting:
                return
            tokens = {
                (volume["name"], source["serviceAccountToken"]["path"]): pod_token(
                    self.kubelet.kube, self.latest, source["serviceAccountToken"]
                )
                for volume in self.latest["spec"].get("volumes") or []
                for source in (volume.get("projected") or {}).get("sources") or []
                if "serviceAccountToken" in source
            }
            self._report(self._status("Running", {"running": {"startedAt": rfc3339()}}, ready=True))
        container = self.latest["spec"]["containers"][0]
        env = {var["name"]: var.get("value") for var in container.get("env") or []}
        if not env.get(wire.IN_PLACE_URL_ENV):
            self.kubelet.note(STARTED, self.name, int(self.latest["metadata"]["labels"][naming.LABEL_GENERATION]))
            return
        token_file = self.kubelet.workdir / f"{self.uid}.token"
        token_file.write_bytes(tokens[mounted(container, self.latest, env[wire.REPORT_TOKEN_ENV])])
        self.channel = WatchedChannel(env[wire.IN_PLACE_URL_ENV], token_file, self.kubelet.ca)
        generation = int(env.get(wire.GENERATION_ENV) or 0)
        agent = threading.Thread(
            target=self.kubelet.guarded, args=(lambda: self._agent(generation),), name=f"agent-{self.name}"
        )
        agent.daemon = True
        agent.start()

    def fail(self) -> None:
        if self.channel is not None:
            self._failed.set()
            self._interrupt.set()
            return
        self.kubelet.submit(self._fail_container)

    def stop(self) -> None:
        self._stopped.set()
        self._interrupt.set()

    def delete(self) -> None:
        """Stop the pod, report how its containers ended, remove the object (gracePeriodSeconds 0, as the kubelet)."""
        self.stop()
        with self._lock:
            terminated = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": rfc3339()}}
            self._report(self._status(None, terminated, ready=False))
            body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
            try:
                self.kubelet.kube.request(
                    "DELETE", f"/api/v1/namespaces/{self.kubelet.namespace}/pods/{self.name}", body
                )
            except ApiException as error:
                if error.status not in (404, 409):
                    raise

    def _agent(self, generation: int) -> None:
        """The agent (agent.main), with a workload that runs until it is failed."""
        assert self.channel is not None
        self.kubelet.note(STARTED, self.name, generation)
        while not self._stopped.is_set():
            word = self.channel.until(
                {"state": wire.RUNNING, "generation": generation}, BARRIER_SECONDS, self._interrupt
            )
            if self._stopped.is_set():
                return
            if self._failed.is_set():
                self._failed.clear()
                self._interrupt.clear()
                ended = {
                    "state": wire.ENDED,
                    "generation": generation,
                    "exitCode": FAILED_EXIT_CODE,
                    "message": "failed",
                }
                word = self.channel.until(ended, VERDICT_SECONDS, self._stopped)
                if not restarts(word):  # the pod ends with the workload's own code
                    self._fail_container()
                    return
            elif not restarts(word):
                continue
            assert word is not None
            self.kubelet.note(TOLD, self.name, word.generation)
            self._restart_in_place()
            self.kubelet.note(RESTARTED, self.name, word.generation)
            ready = {"state": wire.READY, "generation": generation}
            word = self.channel.until(ready, BARRIER_SECONDS, self._stopped)
            if word is None or word.verdict != wire.RUN:
                return
            generation = word.generation
            self.kubelet.note(STARTED, self.name, generation)

    def _fail_container(self) -> None:
        terminated = {"terminated": {"exitCode": FAILED_EXIT_CODE, "reason": "Error", "finishedAt": rfc3339()}}
        self._write(self._status("Failed", terminated, ready=False))

    def _restart_in_place(self) -> None:
        """The kubelet's RestartAllContainers, as the pod's status shows it: killed, then running again."""
        killed = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": rfc3339()}}
        self._write(self._status(None, killed, ready=False, restarting=True))
        self.restarts += 1
        self._write(self._status(None, {"running": {"startedAt": rfc3339()}}, ready=True, restarting=False))

    def _write(self, status: dict[str, Any]) -> None:
        with self._lock:
            if not self.deleting:
                self._report(status)

    def _status(
        self, phase: str | None, state: dict[str, Any], ready: bool, restarting: bool | None = None
    ) -> dict[str, Any]:
        containers = [
            {"name": c["name"], "image": c["image"], "imageID": "", "ready": ready, "restartCount": self.restarts,
             "state": state}
            for c in self.latest["spec"]["containers"]
        ]  # fmt: skip
        now = rfc3339()
        conditions = [
            {"type": kind, "status": str(ready), "lastTransitionTime": now} for kind in ("Ready", "ContainersReady")
        ]
        if restarting is not None:
            conditions.append({"type": ALL_CONTAINERS_RESTARTING, "status": str(restarting), "lastTransitionTime": now})
        status = {"containerStatuses": containers, "conditions": conditions}
        if phase == "Running":
            address = self.kubelet.pod_ip()
            status |= {"podIP": address, "podIPs": [{"ip": address}], "hostIP": "127.0.0.1", "startTime": now}
        return status | ({"phase": phase} if phase else {})

    def _report(self, status: dict[str, Any]) -> None:
        path = f"/api/v1/namespaces/{self.kubelet.namespace}/pods/{self.name}/status"
        body = {"metadata": {"uid": self.uid}, "status": status}
        try:
            self.kubelet.kube.request("PATCH", path, body, content_type=STRATEGIC_MERGE)
        except ApiException as error:
            if error.status not in (404, 409, 422):  # gone, or replaced meanwhile
                raise


class WatchedChannel(Channel):
    """The agent's Channel, which notes its first WAIT: from then on its calls are taken and held."""

    def __init__(self, url: str, token_file: Path, ca_file: Path):
        super().__init__(url, token_file, ca_file)
        self.held = threading.Event()

    def call(self, body: dict) -> Word:
        word = super().call(body)
        if word.verdict == wire.WAIT:
            self.held.set()
        return word


def restarts(word: Word | None) -> bool:
    return word is not None and word.verdict == wire.RESTART


def mounted(container: dict[str, Any], pod: dict[str, Any], path: str) -> tuple[str, str]:
    """The volume and the file in it that `path` is, in `container`."""
    for mount in container.get("volumeMounts") or []:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            return mount["name"], path.removeprefix(prefix)
    raise LookupError(f"no volume of pod {pod['metadata']['name']} has {path}")
