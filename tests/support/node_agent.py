"""A node agent for the emulated cluster: it plays the Job controller and the kubelet, so that the real
operator's Jobs really train.

- Job controller: each un-suspended Indexed Job becomes its pods (scaletrain_operator.local.pods.indexed_pods:
  names, hostname, subdomain, completion-index annotation, label and env), owned by the Job; when
  every pod succeeded the Job gets its Complete condition, when one failed (backoffLimit 0) Failed.
- kubelet: each pod's trainer container runs as local processes (scaletrain_operator.local.pods.LocalPod,
  as `scaletrain run-local` runs them) with the pod's env: downward API resolved, the master's DNS
  name at 127.0.0.1. Phases and exit codes go back to the emulator; the pods of a deleted Job are
  stopped, as when the garbage collector removes them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock

from scaletrain_operator.api.gang_policy import Action, GangLimits, judge
from scaletrain_operator.local.pods import (
    LocalPod,
    free_port,
    indexed_pods,
    localize,
    resolve_env,
    trainer_container,
    volume_paths,
)
from support.emulator import EmulatedCluster, owner_reference


@dataclass
class AgentPod:
    job_uid: str
    job_name: str
    local: LocalPod
    exit_code: int | None = None


class NodeAgent:
    def __init__(self, cluster: EmulatedCluster, namespace: str, workdir: Path, interval: float = 0.1):
        self.cluster, self.namespace, self.workdir, self.interval = cluster, namespace, workdir, interval
        self.pods: dict[str, AgentPod] = {}
        self.expanded: set[str] = set()  # Job uids whose pods exist
        self.concluded: set[str] = set()  # Job uids with a final condition
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-agent", daemon=True)

    def __enter__(self) -> NodeAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stop.set()
        self._thread.join(30)
        with self._lock:
            for pod in self.pods.values():
                pod.local.stop(grace_seconds=2)
        if exc_info[0] is None and self.errors:
            raise RuntimeError(f"the node agent failed: {self.errors!r}")

    def kill(self, pod_name: str) -> None:
        """A lost node: SIGKILL every process of the pod (its container then exits 137)."""
        with self._lock:
            self.pods[pod_name].local.stop(signal.SIGKILL, grace_seconds=0)

    def pod_names(self, job_name: str) -> list[str]:
        with self._lock:
            return sorted(name for name, pod in self.pods.items() if pod.job_name == job_name)

    def log(self, pod_name: str) -> str:
        return self.pods[pod_name].local.log_path.read_text(errors="replace")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self._lock:
                    self._sync()
            except Exception as error:  # reported on exit; keep serving the other pods
                self.errors.append(error)

    def _sync(self) -> None:
        jobs = {job["metadata"]["uid"]: job for job in self.cluster.list("jobs", self.namespace)}
        for pod in self.pods.values():
            if pod.job_uid not in jobs and pod.exit_code is None:  # garbage-collected with its Job
                pod.local.stop(grace_seconds=2)
                pod.exit_code = -1
        for uid, job in jobs.items():
            if uid not in self.expanded and not job["spec"].get("suspend"):
                self._start_pods(job)
        for name, pod in self.pods.items():
            if pod.exit_code is None and (code := pod.local.poll()) is not None:
                pod.exit_code = code
                phase = "Succeeded" if code == 0 else "Failed"
                with gone_is_fine():  # the Job (and so the pod) may have been deleted meanwhile
                    message = pod.local.termination_message()
                    self.cluster.set_pod_phase(self.namespace, name, phase, exit_code=code, message=message)
        for uid, job in jobs.items():
            if uid in self.expanded and uid not in self.concluded:
                self._conclude(job)

    def _start_pods(self, job: dict[str, Any]) -> None:
        self.expanded.add(job["metadata"]["uid"])
        master_port = free_port()  # the whole gang meets at one rendezvous port
        for pod in indexed_pods(job):
            pod["metadata"]["ownerReferences"] = [owner_reference(job)]
            self.cluster.create("v1/pods", pod)
            container = trainer_container(pod)
            mounts = volume_paths(container, self.workdir / "volumes")
            env = localize(resolve_env(pod, container), master_port=master_port, mounts=mounts)
            local = LocalPod.from_pod(pod, env, self.workdir / "logs")
            local.start()
            self.pods[pod["metadata"]["name"]] = AgentPod(job["metadata"]["uid"], job["metadata"]["name"], local)
            self.cluster.set_pod_phase(self.namespace, pod["metadata"]["name"], "Running")

    def _conclude(self, job: dict[str, Any]) -> None:
        """The Job controller's verdict on a Job with backoffLimit 0, by the gang policy with no restarts:
        Complete once every index succeeded, Failed once a pod failed."""
        outcomes = [pod.local.outcome() for pod in self.pods.values() if pod.job_uid == job["metadata"]["uid"]]
        verdict = judge(outcomes, GangLimits(nodes=job["spec"]["completions"], max_restarts=0), restarts=0)
        if verdict.action is Action.SUCCEED:
            condition = {"type": "Complete", "status": "True", "reason": "CompletionsReached"}
        elif verdict.action is Action.FAIL:
            condition = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
        else:
            return
        self.concluded.add(job["metadata"]["uid"])
        with gone_is_fine():
            self.cluster.set_status("jobs", self.namespace, job["metadata"]["name"], {"conditions": [condition]})


@contextmanager
def gone_is_fine() -> Iterator[None]:
    try:
        yield
    except KeyError:  # EmulatedCluster.set_pod_phase: no such pod
        pass
    except kmock.KubernetesError as error:
        if error.status != 404:
            raise
