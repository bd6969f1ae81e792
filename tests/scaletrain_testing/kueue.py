"""Kueue v0.17.0 on a tests' control plane: its real manager (sigs.k8s.io/kueue/cmd/kueue, built from Go modules
by `make control-plane` into the control plane's bin directory), its CRDs and its webhooks as its release manifests
install them (config/components/{crd,webhook} of the module, copied beside the binaries), the manager on loopback.

    with ControlPlane(work / "control-plane") as control_plane, Kueue(control_plane, work) as kueue:
        kueue.create(resource_flavor("default"))
        kueue.create(cluster_queue("main", "default", cpu="4", memory="8Gi"))
        kueue.create(local_queue("main", namespace, cluster_queue="main"))
        ...  # a suspended Job labelled kueue.x-k8s.io/queue-name=main is admitted: Kueue unsuspends it

As a pytest plugin (registered in tests/conftest.py) it provides the `kueue` fixture: Kueue on a control plane
of its own, since its webhooks (failurePolicy Fail, on every batch Job and pod) and controllers act on the
whole cluster, and the session's `control_plane` must stay as the other tests expect it.

Where it differs from a cluster install, and why:

- Webhooks and conversion: the manifests' Service clientConfig becomes a URL on loopback (there is no Service
  network here), served with a certificate from the cluster's CA. internalCertManagement is off, since the
  certificates it makes name the Service.
- With internalCertManagement off, the manager reads its metrics serving certificate from the fixed path
  /etc/kueue/metrics/certs (cmd/kueue/main.go), where a container would mount it. So it runs in a mount
  namespace of its own (util-linux `unshare`, with a user namespace when not root) in which /etc is an
  overlay: a directory of the work dir holding that certificate, over this machine's /etc. (Mounts inside
  /etc, as a container runtime's /etc/hosts, are not seen through the overlay; the manager reads none.)
- VisibilityOnDemand is off: its aggregated API server (visibility.kueue.x-k8s.io, the pending-workloads view)
  reads its certificate from the fixed path /visibility and needs an APIService; the tests use neither.
- Leader election is off: one replica.

Kueue leaves the Workload of a deleted job to the garbage collector (its owner reference), which learns of a newly
installed CRD's kind only at its discovery resync, every 30 s: in a fresh control plane's first 30 s, a deleted job's
quota can take that long to come back (timeouts.KUEUE_QUOTA_RELEASE_S).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from .availability import require
from .control_plane import ControlPlane, StartedWhileEntered, binaries_dir, free_ports, launch, stop_recorded
from .control_plane import unavailable_reason as control_plane_unavailable_reason
from .timeouts import API_REQUEST_S, CONTROLLERS_REACTION_S, KUEUE_READY_S, READINESS_REQUEST_S, WEBHOOK_ARMED_S
from .waiting import WaitTimeout, wait_until

KUEUE_VERSION = "v0.17.0"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"  # the version Kueue v0.17 stores and serves as preferred
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
# What Kueue's mutating webhooks add to ResourceFlavors and ClusterQueues (pkg/webhooks).
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
# The manager's own namespace (Configuration.namespace), which it leaves out of the jobs it manages.
KUEUE_NAMESPACE = "kueue-system"
# config/default's namePrefix: the webhook configurations are named as the release manifests name them.
NAME_PREFIX = "kueue-"
PORTS = ("webhook", "health", "metrics")
# Over Kueue's defaults (pkg/features/kube_features.go). TopologyAwareScheduling is Beta and on by default
# since v0.14; set here so that the tests do not depend on that default.
FEATURE_GATES = {"TopologyAwareScheduling": True, "VisibilityOnDemand": False}
# Where under /etc cmd/kueue/main.go reads the metrics certificate (tls.crt, tls.key) without internal certs.
METRICS_CERT_DIR = Path("kueue/metrics/certs")
# Run by `sh -c` in the manager's mount namespace: $1 is the directory laid over /etc, the rest the command.
OVERLAY_ETC_AND_EXEC = 'mount -t overlay kueue-etc -o "lowerdir=$1:/etc" /etc && shift && exec "$@"'
LOG_TAIL_LINES = 40
# libyaml's loader where PyYAML has it: the Workload CRD (1.4 MB of YAML) loads in 0.4 s instead of 5.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# kind: (plural, namespaced), of the kinds the builders below make.
RESOURCES = {
    "ResourceFlavor": ("resourceflavors", False),
    "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
    "Topology": ("topologies", False),
    "Workload": ("workloads", True),
}


class KueueError(RuntimeError):
    """The manager failed to start or to become ready; the message carries the tail of its log."""


def manifests_dir() -> Path:
    """Kueue's crd/ and webhook/ kustomize sources, copied beside the binaries by tests/controlplane/build.sh."""
    return binaries_dir().parent / "kueue"


def manager_path() -> Path:
    """The manager's binary, built by tests/controlplane/build.sh."""
    return binaries_dir() / "kueue"


def unavailable_reason() -> str | None:
    """One line saying why Kueue cannot run here, or None when it can."""
    reason = control_plane_unavailable_reason()
    if reason is not None:
        return reason
    if not os.access(manager_path(), os.X_OK) or not (manifests_dir() / "crd").is_dir():
        return f"Kueue {KUEUE_VERSION} is not built in {binaries_dir()}: run `make control-plane`"
    if shutil.which("unshare") is None:
        return "no `unshare` (util-linux): the Kueue manager runs in a mount namespace of its own"
    if os.geteuid() != 0 and subprocess.run([*_namespaces(), "true"], capture_output=True).returncode != 0:
        return (
            "no unprivileged user namespaces here: the Kueue manager needs a mount namespace of its own "
            "(its metrics certificate path is fixed under /etc), which takes root or a user namespace"
        )
    return None


def _namespaces() -> list[str]:
    """`unshare` into a mount namespace; without root, inside a user namespace that maps us to its root."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", "--mount", *user, "--"]


class Kueue(StartedWhileEntered):
    """Install Kueue on CONTROL_PLANE and start its manager on entry; stop it on exit, and remove its webhook
    configurations, so that the cluster admits Jobs and pods again without it. The CRDs stay.

    `work_dir` holds the manager's configuration, certificates and log (kueue.log). `feature_gates` go over
    FEATURE_GATES; `wait_for_pods_ready` is the Configuration's waitForPodsReady (off when None), e.g.
    {"timeout": "5m", "blockAdmission": True}; `frameworks` the integrations Kueue manages.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        work_dir: Path,
        feature_gates: dict[str, bool] | None = None,
        wait_for_pods_ready: dict[str, Any] | None = None,
        frameworks: tuple[str, ...] = ("batch/job",),
    ) -> None:
        self.control_plane = control_plane
        self.work_dir = Path(work_dir)
        self.feature_gates = FEATURE_GATES | (feature_gates or {})
        self.wait_for_pods_ready = wait_for_pods_ready
        self.frameworks = frameworks
        self.manage_jobs_without_queue_name = False  # the Configuration's; on within `managing_every_job`
        self.ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        self.log = self.work_dir / "kueue.log"
        self._etc_layer = self.work_dir / "etc"
        self._webhook_certs = self.work_dir / "webhook-certs"
        self._process: subprocess.Popen[bytes] | None = None
        self._webhooks_registered = False
        self._api: kubernetes.client.ApiClient | None = None

    # ---- lifecycle ----

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._write_certificates()
        self._apply(self._crds())
        self._wait_established()
        self._apply(self._webhook_configurations())
        self._webhooks_registered = True
        self._launch()
        self._wait_ready()

    def stop(self) -> None:
        """Webhook configurations first: with failurePolicy Fail, a stopped manager would fail every Job create."""
        if self._webhooks_registered:
            for kind in ("mutating", "validating"):
                name = f"{NAME_PREFIX}{kind}-webhook-configuration"
                self.control_plane.kubectl("delete", "--ignore-not-found", f"{kind}webhookconfiguration", name)
            self._webhooks_registered = False
        if self._process is not None:
            stop_recorded(self.work_dir, only=("kueue",))
            self._process = None
        if self._api is not None:
            self._api.close()
            self._api = None

    @contextmanager
    def quota(self, name: str, cpu: str, memory: str) -> Iterator[str]:
        """For the `with` block, a ResourceFlavor and a ClusterQueue of its `cpu` and `memory`, both `name`
        (yielded), deleted afterwards."""
        made = [resource_flavor(name), cluster_queue(name, name, cpu=cpu, memory=memory)]
        for obj in made:
            self.create(obj)
        try:
            yield name
        finally:
            for obj in reversed(made):
                self.delete(obj)

    @contextmanager
    def managing_every_job(self) -> Iterator[Kueue]:
        """For the `with` block, the manager restarted with manageJobsWithoutQueueName, as on shared clusters
        where every Job goes through a queue: its webhook creates every Job suspended, gives a Job that names no
        queue the namespace's LocalQueue "default" where there is one (LocalQueueDefaulting, GA in v0.17), and
        the Job waits for admission. Restarted as it was afterwards."""
        self._restart(manage_jobs_without_queue_name=True)
        try:
            yield self
        finally:
            self._restart(manage_jobs_without_queue_name=False)

    def _restart(self, manage_jobs_without_queue_name: bool) -> None:
        stop_recorded(self.work_dir, only=("kueue",))
        self.manage_jobs_without_queue_name = manage_jobs_without_queue_name
        self._launch()
        self._wait_ready()

    # ---- Kueue's objects ----

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Kueue object (from the builders below), in its metadata.namespace if namespaced."""
        plural, namespaced = RESOURCES[body["kind"]]
        if namespaced:
            namespace = body["metadata"]["namespace"]
            return self._custom().create_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, body, _request_timeout=API_REQUEST_S
            )
        return self._custom().create_cluster_custom_object(GROUP, VERSION, plural, body, _request_timeout=API_REQUEST_S)

    def delete(self, body: dict[str, Any]) -> None:
        """Delete a Kueue object a test created (gone already is fine). Kueue's finalizers keep a queue or a
        flavor until no workload uses it; the test does not wait for that."""
        plural, namespaced = RESOURCES[body["kind"]]
        name, custom = body["metadata"]["name"], self._custom()
        try:
            if namespaced:
                namespace = body["metadata"]["namespace"]
                custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name, _request_timeout=API_REQUEST_S
                )
            else:
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, name, _request_timeout=API_REQUEST_S)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The Kueue objects of KIND, in NAMESPACE if namespaced and given, else in all."""
        plural, namespaced = RESOURCES[kind]
        if namespaced and namespace is not None:
            listed = self._custom().list_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, _request_timeout=API_REQUEST_S
            )
        else:
            listed = self._custom().list_cluster_custom_object(GROUP, VERSION, plural, _request_timeout=API_REQUEST_S)
        return listed["items"]

    def workload_of(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """Kueue's Workload for a job (any object Kueue manages), found by its owner reference; None until made."""
        uid = job["metadata"]["uid"]
        for workload in self.objects("Workload", job["metadata"]["namespace"]):
            if any(owner["uid"] == uid for owner in workload["metadata"].get("ownerReferences", [])):
                return workload
        return None

    def api_client(self) -> kubernetes.client.ApiClient:
        """The admin client of the control plane Kueue runs on."""
        if self._api is None:
            self._api = self.control_plane.api_client()
        return self._api

    def _custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.api_client())

    # ---- installing ----

    def _write_certificates(self) -> None:
        """Serving certificates for 127.0.0.1 signed by the cluster's CA: the webhook server's in its certDir,
        the metrics server's where the /etc overlay shows it at /etc/kueue/metrics/certs."""
        for directory in (self._webhook_certs, self._etc_layer / METRICS_CERT_DIR):
            directory.mkdir(parents=True, exist_ok=True)
            self.control_plane.serving_certificate(directory, "tls")

    def _client_config(self, path: str) -> dict[str, str]:
        """Where the API server calls the webhook server for PATH, and the CA it trusts for it."""
        url = f"https://127.0.0.1:{self.ports['webhook']}{path}"
        return {"url": url, "caBundle": base64.b64encode(self.control_plane.ca_bundle).decode()}

    def _crds(self) -> list[dict[str, Any]]:
        """crd/bases, with the conversion webhooks of the patches crd/kustomization.yaml names, served here."""
        crd_dir = manifests_dir() / "crd"
        kustomization = _load(crd_dir / "kustomization.yaml")
        conversions = {}
        for patch in (_load(crd_dir / entry["path"]) for entry in kustomization.get("patches", [])):
            webhook = patch["spec"]["conversion"]["webhook"]
            webhook["clientConfig"] = self._client_config(webhook["clientConfig"]["service"]["path"])
            conversions[patch["metadata"]["name"]] = patch["spec"]["conversion"]
        crds = [_load(crd_dir / entry) for entry in kustomization["resources"]]
        for crd in crds:
            if crd["metadata"]["name"] in conversions:
                crd["spec"]["conversion"] = conversions[crd["metadata"]["name"]]
        return crds

    def _webhook_configurations(self) -> list[dict[str, Any]]:
        """webhook/manifests.yaml with its kustomization's patches (the namespaceSelectors that keep the pod,
        deployment and statefulset webhooks out of kube-system and kueue-system), each webhook served here."""
        webhook_dir = manifests_dir() / "webhook"
        configurations = list(yaml.load_all((webhook_dir / "manifests.yaml").read_text(), YAML_LOADER))
        patches = [
            yaml.load(entry["patch"], YAML_LOADER) for entry in _load(webhook_dir / "kustomization.yaml")["patches"]
        ]
        for configuration in configurations:
            for patch in patches:
                if _identity(patch) == _identity(configuration):
                    _merge_by_name(configuration["webhooks"], patch["webhooks"])
            configuration["metadata"]["name"] = NAME_PREFIX + configuration["metadata"]["name"]
            for webhook in configuration["webhooks"]:
                webhook["clientConfig"] = self._client_config(webhook["clientConfig"]["service"]["path"])
        return configurations

    def _apply(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply: the Workload CRD is too large for the last-applied annotation of a client-side one.
        As one JSON List, which kubectl reads far faster than the YAML."""
        self.control_plane.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=scaletrain-tests",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )

    def _wait_established(self) -> None:
        extensions = kubernetes.client.ApiextensionsV1Api(self.api_client())

        def established() -> bool:
            crds = extensions.list_custom_resource_definition(_request_timeout=API_REQUEST_S).items
            return all(
                any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])
                for crd in crds
                if crd.spec.group == GROUP
            )

        wait_until(established, CONTROLLERS_REACTION_S, f"Kueue's CRDs ({GROUP}) to be Established")

    # ---- the manager ----

    def _configuration(self) -> dict[str, Any]:
        configuration: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.ports['metrics']}"},
            "webhook": {"host": "127.0.0.1", "port": self.ports["webhook"], "certDir": str(self._webhook_certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": self.manage_jobs_without_queue_name,
            "integrations": {"frameworks": list(self.frameworks)},
            "featureGates": self.feature_gates,
        }
        if self.wait_for_pods_ready is not None:
            configuration["waitForPodsReady"] = self.wait_for_pods_ready
        return configuration

    def _launch(self) -> None:
        config = self.work_dir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self._configuration()))
        manager = [
            str(manager_path()),
            f"--config={config}",
            f"--kubeconfig={self.control_plane.kubeconfig}",
            "--zap-log-level=2",  # V(2) logs the feature gates in effect, and each admission
        ]
        command = [*_namespaces(), "/bin/sh", "-c", OVERLAY_ETC_AND_EXEC, "sh", str(self._etc_layer), *manager]
        self._process = launch(self.work_dir, "kueue", command, detached=False)

    def _wait_ready(self) -> None:
        """Its /readyz (the webhook server listening), then a dry-run create through the API server that comes back
        with what Kueue's mutating webhook adds: the API server calls the webhooks, and they answer."""
        readyz = f"http://127.0.0.1:{self.ports['health']}/readyz"
        try:
            wait_until(lambda: self._alive() and _answers_ok(readyz), KUEUE_READY_S, f"Kueue's manager at {readyz}")
            wait_until(lambda: self._alive() and self._webhooks_answer(), WEBHOOK_ARMED_S, "Kueue's webhooks to answer")
        except WaitTimeout as error:
            raise KueueError(self._failure(str(error))) from None

    def _alive(self) -> bool:
        """True while the manager runs; once it has exited, KueueError with its log's tail (ending a wait at once)."""
        if self._process is not None and self._process.poll() is not None:
            raise KueueError(self._failure(f"exited with code {self._process.returncode}"))
        return True

    def _webhooks_answer(self) -> bool:
        """A dry-run create of a ResourceFlavor comes back with the finalizer Kueue's mutating webhook adds."""
        flavor = resource_flavor(f"readiness-probe-{secrets.token_hex(3)}")
        try:
            created = self._custom().create_cluster_custom_object(
                GROUP, VERSION, "resourceflavors", flavor, dry_run="All", _request_timeout=API_REQUEST_S
            )
        except kubernetes.client.ApiException as error:
            if error.status == 500 and "failed calling webhook" in (error.body or ""):
                return False
            raise
        return RESOURCE_IN_USE_FINALIZER in created["metadata"].get("finalizers", [])

    def _failure(self, what: str) -> str:
        tail = self.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if self.log.exists() else []
        return f"Kueue's manager {what}; last {len(tail)} lines of {self.log}:\n" + "\n".join(tail)


def _load(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), YAML_LOADER)


def _identity(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _merge_by_name(webhooks: list[dict[str, Any]], patches: list[dict[str, Any]]) -> None:
    """A strategic-merge patch of a webhooks list, as kustomize applies it: entries matched by name, their fields
    set from the patch's."""
    by_name = {webhook["name"]: webhook for webhook in webhooks}
    for patch in patches:
        by_name[patch["name"]].update(patch)


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=READINESS_REQUEST_S) as response:
            return response.read().decode() == "ok"
    except OSError:  # refused while starting, or a 500 from a not-yet-ready check
        return False


# ---- builders: Kueue's objects as plain dicts (apis/kueue/v1beta2) ----


def _object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    metadata = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": metadata, "spec": spec}


def resource_flavor(
    name: str, node_labels: dict[str, str] | None = None, topology_name: str | None = None
) -> dict[str, Any]:
    """A ResourceFlavor: the nodes with NODE_LABELS; with TOPOLOGY_NAME, a Topology-aware one (TAS), whose
    nodes must carry every level's label of that Topology."""
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = node_labels
    if topology_name:
        spec["topologyName"] = topology_name
    return _object("ResourceFlavor", name, spec)


def cluster_queue(
    name: str,
    flavor: str,
    cpu: str,
    memory: str,
    preemption: str = "LowerPriority",
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue open to every namespace with a nominal quota of CPU and memory (and any EXTRA resources, as
    {"nvidia.com/gpu": "8"}) in one flavor, preempting within itself by priority (PREEMPTION: Never,
    LowerPriority, LowerOrNewerEqualPriority)."""
    quotas = {"cpu": cpu, "memory": memory} | (extra or {})
    group = {
        "coveredResources": list(quotas),
        "flavors": [{"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()]}],
    }
    spec = {"namespaceSelector": {}, "resourceGroups": [group], "preemption": {"withinClusterQueue": preemption}}
    return _object("ClusterQueue", name, spec)


def local_queue(name: str, namespace: str, cluster_queue: str) -> dict[str, Any]:
    """A LocalQueue: what a job names in its kueue.x-k8s.io/queue-name label."""
    return _object("LocalQueue", name, {"clusterQueue": cluster_queue}, namespace)


def workload_priority_class(name: str, value: int) -> dict[str, Any]:
    """A WorkloadPriorityClass, which a job names in its kueue.x-k8s.io/priority-class label (it has no spec)."""
    metadata = {"name": name}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": metadata, "value": value}


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    """A Topology: node labels from the broadest level to the narrowest (kubernetes.io/hostname, if used, last)."""
    return _object("Topology", name, {"levels": [{"nodeLabel": label} for label in levels]})


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The condition of type KIND in an object's status, or None."""
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def is_true(obj: dict[str, Any] | None, kind: str) -> bool:
    """Whether OBJ (None: not made yet) has the condition KIND with status True."""
    found = condition(obj, kind) if obj else None
    return found is not None and found["status"] == "True"


# ---- the pytest plugin ----


@pytest.fixture(scope="session")
def kueue(tmp_path_factory) -> Iterator[Kueue]:
    """Kueue on a control plane of its own, started by the first test that asks for it. Where it cannot run the
    tests skip with the reason, except in CI (CI=true), where they must run."""
    require(unavailable_reason())
    work_dir = tmp_path_factory.mktemp("kueue")
    with ControlPlane(work_dir / "control-plane") as control_plane, Kueue(control_plane, work_dir) as started:
        yield started


@pytest.fixture
def kueue_namespace(request, kueue) -> Iterator[str]:
    """A fresh namespace on Kueue's control plane for one test, named after it; deleted afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = kueue.control_plane.create_namespace(f"{slug}-{secrets.token_hex(3)}")
    yield name
    kueue.control_plane.delete_namespace(name)
