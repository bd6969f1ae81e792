"""The operator as its Helm chart installs it, on the tests' real control plane.

`install_operator` applies what `helm install` would (the CRDs, the ServiceAccount, the RBAC generated
from controller/rbac.py, kopf's peering object) and writes a kubeconfig holding a token of the chart's
ServiceAccount from the TokenRequest API; `operator_process` then runs `scaletrain-operator` with the
Deployment's own arguments, so the real authorizer judges every call the operator makes, as in a
cluster. Only the Deployment itself is left out: it needs the operator image.

`Team` is one namespace of ScaleTrainJobs: the moves of a user (submit, read, wait) and, for the tests
that run without a kubelet, of a kubelet (pod phases and exit codes written to the pod status, as the
kubelet reports them; the real Job controller and garbage collector do the rest). In the e2e tier
(e2e_jobs.py) a Team also has the kubelet stand-in that runs its pods.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from scaletrain_operator.api import naming
from scaletrain_operator.api.naming import COMPLETION_INDEX_ANNOTATION

from .chart import chart_crds, load_chart, of_kind, render
from .control_plane import ControlPlane
from .jobs import base_job
from .kube import Kube
from .timeouts import CONTROLLERS_REACTION_S, OPERATOR_REACTION_S, OPERATOR_STOP_S
from .waiting import wait_until

if TYPE_CHECKING:
    from .kubelet import Kubelet

FINAL_PHASES = ("Succeeded", "Failed")
# What `helm install` creates that a test cannot run: the operator's Deployment needs its image.
NOT_APPLIED = {"Deployment", "Service", "ServiceMonitor"}


def install_crds(control_plane: ControlPlane) -> None:
    """The chart's CRDs (the ScaleTrainJob's and kopf's peering ones), applied and Established."""
    documents = yaml.safe_dump_all(chart_crds())
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=documents)
    names = [f"crd/{crd['metadata']['name']}" for crd in chart_crds()]
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)


@dataclass(frozen=True)
class OperatorInstall:
    """A release of the chart: its objects, and a kubeconfig authenticated as its ServiceAccount."""

    objects: list[dict[str, Any]]
    kubeconfig: Path

    @property
    def service_account(self) -> dict[str, Any]:
        (account,) = of_kind(self.objects, "ServiceAccount")
        return account

    @property
    def user(self) -> str:
        """The operator's user name, as the API server's audit log records it."""
        metadata = self.service_account["metadata"]
        return f"system:serviceaccount:{metadata['namespace']}:{metadata['name']}"

    @property
    def args(self) -> list[str]:
        """The operator container's arguments in the chart's Deployment."""
        (deployment,) = of_kind(self.objects, "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return list(container["args"])


def install_operator(
    control_plane: ControlPlane, values: dict[str, Any], release_namespace: str, workdir: Path, edit=None
) -> OperatorInstall:
    """`helm install` of the chart with `values` into `release_namespace` (created here), less the
    Deployment; the watched namespaces must exist. `edit(objects)` may change the rendered objects
    first (a test that takes a permission away)."""
    install_crds(control_plane)
    control_plane.create_namespace(release_namespace)
    objects = render(load_chart(), values, namespace=release_namespace, release=release_namespace)
    if edit is not None:
        edit(objects)
    applied = [obj for obj in objects if obj["kind"] not in NOT_APPLIED]
    control_plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(applied))
    account = of_kind(objects, "ServiceAccount")[0]["metadata"]
    kubeconfig = workdir / f"{account['namespace']}-{account['name']}.kubeconfig"
    control_plane.token_kubeconfig(account["namespace"], account["name"], kubeconfig)
    return OperatorInstall(objects, kubeconfig)


def install_watching(
    control_plane: ControlPlane, namespace: str, workdir: Path, values: dict[str, Any] | None = None, edit=None
) -> OperatorInstall:
    """The chart installed to watch `namespace` alone, with a peering of its own, released into
    `<namespace>-operator`; `values` add to (or replace) those."""
    values = {"watchNamespaces": [namespace], "peering": {"name": f"{namespace}-peering"}} | (values or {})
    return install_operator(control_plane, values, f"{namespace}-operator", workdir, edit)


@contextmanager
def operator_process(install: OperatorInstall, *args: str, env: dict[str, str] | None = None) -> Iterator[Any]:
    """`scaletrain-operator` with the chart's arguments, then `args` (later ones win), authenticated as
    the chart's ServiceAccount. Its log goes to a file (a pipe nobody reads would block it),
    `process.log_path`, shown when the block fails. The status-report endpoint is off unless `args` turn it on
    (e2e_jobs.status_report_args): the chart's certificate is for its Service's name, which no test resolves."""
    chart_args = [*install.args, "--status-reports-port=0"]
    command = [sys.executable, "-m", "scaletrain_operator.controller.main", *chart_args, *args]
    environment = os.environ | {"KUBECONFIG": str(install.kubeconfig), "PYTHONUNBUFFERED": "1"} | (env or {})
    with tempfile.NamedTemporaryFile("w", suffix=".log") as log:
        process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT, text=True)
        process.log_path = Path(log.name)  # read through its own handle: the child writes through `log`

        def show_log() -> None:
            print("operator log (tail):\n" + process.log_path.read_text()[-5000:])

        try:
            yield process
        except BaseException:
            show_log()
            raise
        finally:
            process.terminate()
            try:
                process.wait(OPERATOR_STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                show_log()
                raise


QUIET = ("--liveness-port", "0", "--metrics-port", "0")  # the operator's ports: none
PROGRESS_READ_S = 0.3  # how often the tests' operators read rank 0's progress
# Rank 0's progress read every PROGRESS_READ_S and each answer written, so that tests see it at once (the default
# writes one a minute: test_progress_cadence.py).
PROGRESS_EACH_READ = ("--progress-interval", str(PROGRESS_READ_S), "--progress-write-interval", "0")


def active_replica(team: Team, processes: Sequence[Any]) -> Any | None:
    """Of the peered operator `processes` of the team's install (install_watching's peering), the active one: the
    highest priority (controller/peering.py); None until every one of them is in the peering."""
    peering = team.kube.get("kopfpeerings", team.namespace, f"{team.namespace}-peering") or {}
    peers = peering.get("status") or {}
    if len(peers) < len(processes):
        return None
    identity = max(peers, key=lambda peer: peers[peer]["priority"])  # host/pid/random (peering.new_identity)
    return next((process for process in processes if identity.split("/")[1] == str(process.pid)), None)


@contextmanager
def quiet_team(control_plane: ControlPlane, workdir: Path, prefix: str) -> Iterator[Team]:
    """A new namespace watched by its own operator (the chart installed, no ports served), as a Team."""
    namespace = control_plane.create_namespace(f"{prefix}-{secrets.token_hex(3)}")
    install = install_watching(control_plane, namespace, workdir)
    with operator_process(install, *QUIET):
        yield Team(Kube(control_plane.api_client()), namespace)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj["status"]["conditions"] if c["type"] == kind), None)


@dataclass
class Team:
    """One namespace of ScaleTrainJobs on the control plane. In the e2e tier (e2e_jobs.e2e_namespace) also
    the kubelet stand-in that runs its pods, the directory the test shares with them, and the chart's
    install (for the operators the test starts); elsewhere None."""

    kube: Kube
    namespace: str
    kubelet: Kubelet | None = None
    workdir: Path | None = None
    install: OperatorInstall | None = None

    def submit(self, name: str, **spec: Any) -> dict[str, Any]:
        document = base_job(**spec)
        document["metadata"] = {"name": name, "namespace": self.namespace}
        return self.kube.create("stj", document)

    def stj(self, name: str) -> dict[str, Any] | None:
        return self.kube.get("stj", self.namespace, name)

    def patch_stj(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.kube.patch("stj", self.namespace, name, patch)

    def status(self, name: str) -> dict[str, Any]:
        """The job's status; empty while it has none, or if the job is gone."""
        return (self.stj(name) or {}).get("status") or {}

    def wait_phase(self, name: str, phase: str, timeout_s: float = OPERATOR_REACTION_S) -> dict[str, Any]:
        """The job once its status has `phase`. Fails at once if the job Failed instead (a final phase), with
        its message, or if the Team's kubelet stand-in broke (a broken kubelet, not a slow job); after
        `timeout_s`, with the job's status then."""

        def reached() -> dict[str, Any] | None:
            if self.kubelet is not None:
                assert not self.kubelet.errors, self.kubelet.errors
            job = self.stj(name)
            status = (job or {}).get("status") or {}
            if status.get("phase") == "Failed" and phase != "Failed":
                raise AssertionError(f"{self.namespace}/{name} failed: {status.get('message')}")
            return job if status.get("phase") == phase else None

        return wait_until(reached, timeout_s, f"{self.namespace}/{name} to be {phase}", details=self._status_now(name))

    def wait_status(
        self, name: str, check, timeout_s: float = OPERATOR_REACTION_S, what: str = "the status checked for"
    ) -> dict[str, Any]:
        """The job's status once `check(status)` holds; `what` says what `check` looks for. Fails at once if
        the job reached a final phase without it."""

        def checked() -> dict[str, Any] | None:
            status = self.status(name)
            if not check(status) and status.get("phase") in FINAL_PHASES:
                raise AssertionError(f"{self.namespace}/{name} is {status['phase']} without {what}: {status}")
            return check(status) and status

        return wait_until(checked, timeout_s, f"{self.namespace}/{name} to have {what}", details=self._status_now(name))

    def wait_condition(
        self, name: str, kind: str, status: str = "True", timeout_s: float = OPERATOR_REACTION_S
    ) -> dict[str, Any]:
        """The job's condition `kind` once it has `status`."""
        found = self.wait_status(
            name,
            lambda s: any(c["type"] == kind and c["status"] == status for c in s.get("conditions") or []),
            timeout_s,
            f"condition {kind}={status}",
        )
        return next(c for c in found["conditions"] if c["type"] == kind)

    def _status_now(self, name: str) -> Callable[[], str]:
        """What a failed wait on the job shows: its status at the time."""
        return lambda: f"the status of {self.namespace}/{name} then: {self.status(name)}"

    def children(self, name: str, kind: str) -> list[dict[str, Any]]:
        return self.kube.list(kind, self.namespace, label_selector=f"{naming.LABEL_JOB_NAME}={name}")

    def events(self, name: str) -> list[tuple[str, str, str]]:
        """The job's Events as (type, reason, message), oldest first. Their timestamps have whole seconds,
        so the order is their creation order in etcd: a resourceVersion is opaque to clients, but this
        test server is one etcd, whose revisions only grow."""
        events = [
            e
            for e in self.kube.list("events", self.namespace)
            if e["involvedObject"]["name"] == name and e["involvedObject"]["kind"] == naming.KIND
        ]
        events.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
        return [(e["type"], e["reason"], e["message"]) for e in events]

    def provide_claim(self, claim: str, size: str = "1Gi", contents: Path | None = None) -> None:
        """A PersistentVolumeClaim bound to a PersistentVolume of its own, as a storage admin would
        provide one (once: a claim that exists is left as it is); the kubelet stand-in gives every pod that
        claims it the same directory. `contents`: files already on the volume, copied onto it."""
        if contents is not None:
            assert self.kubelet is not None, "files on a volume need the kubelet stand-in"
            shutil.copytree(contents, self.kubelet.executor.claims_dir / self.namespace / claim, dirs_exist_ok=True)
        if self.kube.get("persistentvolumeclaims", self.namespace, claim):
            return
        volume = f"{self.namespace}-{claim}"
        claim_ref = {"namespace": self.namespace, "name": claim}
        self.kube.create(
            "persistentvolumes",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteMany"], "claimRef": claim_ref,
                         "hostPath": {"path": f"/tmp/{volume}"}, "persistentVolumeReclaimPolicy": "Retain"},
            },
        )  # fmt: skip
        self.kube.create(
            "persistentvolumeclaims",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": self.namespace},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}},
                         "volumeName": volume, "storageClassName": ""},
            },
        )  # fmt: skip

        def bound() -> bool:
            return (self.kube.get("persistentvolumeclaims", self.namespace, claim) or {}).get("status", {}).get(
                "phase"
            ) == "Bound"

        wait_until(bound, CONTROLLERS_REACTION_S, f"claim {self.namespace}/{claim} to be Bound")

    # ---- the kubelet's moves, for the tests that run without one ----

    def pods(self, job_name: str, timeout_s: float = OPERATOR_REACTION_S) -> list[dict[str, Any]]:
        """The pods the Job controller created for `job_name`, one per completion index, by index."""
        job = wait_until(
            lambda: self.kube.get("jobs", self.namespace, job_name), timeout_s, f"Job {self.namespace}/{job_name}"
        )
        completions = job["spec"]["completions"]

        def all_created() -> list[dict[str, Any]] | None:
            pods = [p for p in self.kube.list("pods", self.namespace, f"job-name={job_name}") if _alive(p)]
            return sorted(pods, key=_index) if len({_index(p) for p in pods}) == completions else None

        return wait_until(all_created, timeout_s, f"the Job controller to create the pods of {job_name}")

    def set_pod_phase(
        self,
        pod: dict[str, Any],
        phase: str,
        exit_code: int | None = None,
        termination_message: str = "",
        pod_ip: str = "127.0.0.1",
    ) -> dict[str, Any]:
        """Report `pod` in `phase`, as its kubelet would: Running with its container running, at `pod_ip` (a
        loopback address: the tests' progress servers listen there), or Succeeded/Failed with the container
        terminated with `exit_code` (0 for Succeeded), the trainer container with `termination_message`
        (what it left in its termination-message file)."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if phase == "Running":
            state = {"running": {"startedAt": now}}
        else:
            code = 0 if phase == "Succeeded" else exit_code
            reason = "Completed" if code == 0 else "Error"
            state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now}}

        def state_of(container: dict[str, Any]) -> dict[str, Any]:
            if termination_message and container["name"] == naming.TRAINER_CONTAINER:
                return {"terminated": state["terminated"] | {"message": termination_message}}
            return state

        containers = [
            {"name": c["name"], "image": c["image"], "imageID": "", "ready": phase == "Running", "restartCount": 0,
             "state": state_of(c)}
            for c in pod["spec"]["containers"]
        ]  # fmt: skip
        status = {"phase": phase, "startTime": now, "containerStatuses": containers}
        if phase == "Running":
            status |= {"podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}
        return self.kube.set_status("pods", self.namespace, pod["metadata"]["name"], status)

    def start_pods(self, job_name: str, phase: str = "Running", pod_ip: str = "127.0.0.1") -> list[dict[str, Any]]:
        return [self.set_pod_phase(pod, phase, pod_ip=pod_ip) for pod in self.pods(job_name)]

    def fail_pod(self, pod: dict[str, Any], exit_code: int) -> dict[str, Any]:
        return self.set_pod_phase(pod, "Failed", exit_code)


def _index(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION])


def _alive(pod: dict[str, Any]) -> bool:
    return pod["metadata"].get("deletionTimestamp") is None
