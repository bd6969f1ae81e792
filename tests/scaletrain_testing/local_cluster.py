"""A real Kubernetes on this machine without Docker (`make cluster`, and the node test tier): the control
plane of control_plane.py, plus one node whose pods run in containers.

The node is what a kubeadm node runs, built from the same modules (tests/controlplane/build.sh):
- kubelet v1.37.2 on containerd and runc (Debian's packages), pods networked by the bridge and
  host-local CNI plugins on a bridge of our own;
- kube-proxy (iptables mode), so that the `kubernetes` Service reaches the API server from a pod;
- CoreDNS against the API server, the kubelet's clusterDNS, so that pods resolve Services and the
  gang's pod names;
- the images of `make images` (tests/images/build.sh) imported into the node's containerd, the pause
  image among them as its sandbox image.
Then the chart is installed with the built operator image, as `helm install` would (Helm's Go engine
renders it), and a PersistentVolume with its claim serves examples/cpu-gloo.yaml.

Everything lives in one state directory, removed by `down`, except containerd's image store, which is
kept beside it as a cache so that the next cluster need not import the images again. The API server
binds the bridge's address, not the host's: nothing here listens outside this machine. NetworkPolicy
is not enforced (the bridge plugin does not), and this node runs as root on the host's kernel: a place
to try and test ScaleTrain, not a secure cluster.

Command line: `python -m scaletrain_testing.local_cluster up|down` (the Makefile's cluster targets).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .chart import load_chart, render
from .control_plane import ControlPlane, binaries_dir, cache_dir, free_ports, launch, stop_recorded
from .operator_harness import install_crds
from .timeouts import (
    CLUSTER_NODE_READY_S,
    CLUSTER_POD_TEARDOWN_S,
    COMPONENT_READY_S,
    IMAGE_IMPORT_S,
    READINESS_REQUEST_S,
)
from .waiting import WaitTimeout, wait_until

NODE_NAME = "scaletrain-node"
BRIDGE = "scaletrain0"
POD_SUBNET = ipaddress.ip_network("10.244.0.0/24")
GATEWAY = str(POD_SUBNET[1])  # the bridge's address: the node's IP, where pods reach the host
CLUSTER_DOMAIN = "cluster.local"
CNI_NETWORK = "scaletrain"
CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
NODE_BINARIES = ("kubelet", "kube-proxy", "coredns")
CHART_NAMESPACE = "scaletrain-system"
BUILT_PREFIX = "localhost/scaletrain/"  # the images of `make images` (tests/images/build.sh)
EXAMPLE_CLAIM = "scaletrain-checkpoints"  # what examples/cpu-gloo.yaml mounts
# Controllers a real node needs beyond the tests' set: the operator's Deployment, and the node
# lifecycle controller, which lifts the not-ready taint a node registers with once it is Ready.
NODE_CONTROLLERS = ("deployment-controller", "replicaset-controller", "node-lifecycle-controller")
# Eviction and image garbage collection by disk use are for real fleets; on a developer's disk they would
# evict the pods under test or delete the images just imported. Memory pressure still evicts.
KUBELET_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "1%",
    "nodefs.inodesFree": "1%",
    "imagefs.available": "1%",
}


def state_dir() -> Path:
    return cache_dir() / "cluster"


def image_store() -> Path:
    """containerd's root: its content and snapshots, kept across clusters (an image cache)."""
    return cache_dir() / "node" / "containerd"


def images_env() -> Path:
    """What `make images` built: OPERATOR_IMAGE, TRAINER_IMAGE and PAUSE_IMAGE (tests/images/build.sh)."""
    return cache_dir() / "images" / "images.env"


def built_images() -> dict[str, str]:
    lines = images_env().read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def unavailable_reason() -> str | None:
    """One line saying why a cluster with a real node cannot start here, or None when it can."""
    if sys.platform != "linux":
        return f"a real node needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "a real node needs root (containerd, network namespaces, iptables): run as root"
    missing = [
        tool for tool in ("containerd", "runc", "ctr", "buildah", "iptables", "conntrack") if not shutil.which(tool)
    ]
    if missing or not (CNI_PLUGINS / "bridge").exists():
        return f"missing {', '.join(missing) or 'the CNI plugins'}: run tests/node/packages.sh as root"
    absent = [name for name in NODE_BINARIES if not os.access(binaries_dir() / name, os.X_OK)]
    if absent:
        return f"node binaries missing in {binaries_dir()} ({', '.join(absent)}): run `make control-plane`"
    if not images_env().exists():
        return f"no images built ({images_env()} is missing): run `make images`"
    return None


class RealCluster:
    """What the node tier does with a cluster whose pods run in containers, whichever it is: this
    machine's (LocalCluster) or kind's (kind_cluster.py, on CI runners with Docker)."""

    control_plane: ControlPlane | None = None  # its clients: kubectl and the Python client
    node_name = NODE_NAME

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        assert self.control_plane is not None
        return self.control_plane.kubectl(*args, stdin=stdin, check=check, timeout=timeout)

    def install_chart(self, operator_image: str) -> None:
        """`helm install` of the chart: its CRDs, then its objects, with the built operator image."""
        assert self.control_plane is not None
        repository, tag = operator_image.rsplit(":", 1)
        # Each progress answer written as it is read, as the other tiers' operators do
        # (operator_harness.PROGRESS_EACH_READ): the tests watch progress move within a job's short run.
        values = {
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "operator": {"progressWriteIntervalSeconds": 0},
        }
        install_crds(self.control_plane)
        self.control_plane.create_namespace(CHART_NAMESPACE)
        objects = render(load_chart(), values, namespace=CHART_NAMESPACE, release="scaletrain")
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def wait_operator_ready(self, timeout_s: float) -> None:
        rollout = ("--namespace", CHART_NAMESPACE, "rollout", "status", "deployment", f"--timeout={timeout_s:g}s")
        self.kubectl(*rollout, timeout=timeout_s + 10)

    def provide_claim(self, namespace: str, claim: str, size: str = "1Gi") -> str:
        """A claim bound to a new `local` PersistentVolume on the node, whose directory is owned by root
        with mode 0755, as a freshly formatted disk is; returns that directory (a path on the node)."""
        path = f"{self.volumes_dir()}/{namespace}-{claim}"
        self.node_run("install", "-d", "--owner=0", "--group=0", "--mode=0755", path)
        claimed = local_claim(namespace, claim, path, size, self.node_name)
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(claimed))
        return path

    # ---- on the node ----

    def volumes_dir(self) -> str:
        raise NotImplementedError

    def node_run(self, *command: str, timeout: float = 60) -> str:
        """A command on the node; its output."""
        raise NotImplementedError

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """containerd's own client against the node's runtime."""
        raise NotImplementedError


class LocalCluster(RealCluster):
    """`up()` starts the cluster and returns its admin kubeconfig; `down()` stops every process it
    started and removes its state. Both work from any process: all they need is in the state directory.
    `detached`: the processes outlive this one (`make cluster`); otherwise they die with it (tests)."""

    def __init__(self, state: Path | None = None, detached: bool = True) -> None:
        self.state = state or state_dir()
        self.detached = detached
        self.kubeconfig = self.state / "control-plane" / "control_plane.kubeconfig"
        self.containerd_socket = self.state / "containerd" / "containerd.sock"
        self.control_plane: ControlPlane | None = None

    # ---- up ----

    def up(self) -> Path:
        if self.state.exists():
            self.down()  # what an earlier cluster left, e.g. after a crash: never two at once
        (self.state / "logs").mkdir(parents=True)
        (self.state / "netns-before").write_text("\n".join(sorted(_network_namespaces())))
        images = built_images()
        started = time.monotonic()
        self._create_bridge()
        self.control_plane = ControlPlane(
            self.state / "control-plane",
            host=GATEWAY,
            detached=self.detached,
            extra_controllers=NODE_CONTROLLERS,
        )
        self.control_plane.start()
        self._start_containerd(images["PAUSE_IMAGE"])
        self._import_images(list(images.values()))
        self._start_kubelet()
        self._start_kube_proxy()
        self._start_coredns()
        self._wait_node_ready()
        self.install_chart(images["OPERATOR_IMAGE"])
        self._provide_example_claim()
        seconds = time.monotonic() - started
        (self.state / "cluster.json").write_text(
            json.dumps({"kubeconfig": str(self.kubeconfig), "images": images, "up_seconds": seconds})
        )
        return self.kubeconfig

    def attach(self) -> bool:
        """Use a cluster that `up` started in another process; False if its API server does not answer."""
        self.control_plane = ControlPlane(self.state / "control-plane", host=GATEWAY)  # for its clients only
        return self.kubectl("get", "--raw", "/readyz", check=False, timeout=15).returncode == 0

    def _create_bridge(self) -> None:
        """The pods' bridge with the gateway address, made before the API server, which binds it; the CNI
        bridge plugin takes it over as it is."""
        run_command("ip", "link", "add", BRIDGE, "type", "bridge")
        run_command("ip", "addr", "add", f"{GATEWAY}/{POD_SUBNET.prefixlen}", "dev", BRIDGE)
        run_command("ip", "link", "set", BRIDGE, "up")

    def _start_containerd(self, pause_image: str) -> None:
        directory = self.state / "containerd"
        (self.state / "cni" / "net.d").mkdir(parents=True)
        (self.state / "cni" / "net.d" / "10-scaletrain.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        image_store().mkdir(parents=True, exist_ok=True)
        config = directory / "config.toml"
        directory.mkdir(parents=True, exist_ok=True)
        config.write_text(
            _containerd_config(directory, self.containerd_socket, self.state / "cni" / "net.d", pause_image)
        )
        self._launch("containerd", "containerd", f"--config={config}")
        wait_until(
            lambda: self.ctr("version", check=False).returncode == 0,
            COMPONENT_READY_S,
            "containerd to answer on its socket",
            details=lambda: _tail(self.state / "logs" / "containerd.log"),
        )

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,  # pods reach nothing outside this machine: no NAT rules to leave behind
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": str(POD_SUBNET), "gateway": GATEWAY}]],
                        # Through the host: Service addresses (kube-proxy's rules), the API server.
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.state / "cni" / "ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        }

    def _import_images(self, references: list[str]) -> None:
        """The built images into containerd's store, which is kept across clusters: those it lacks are
        imported, and earlier builds of ours are removed first, with their layers."""
        present = self.ctr("--namespace=k8s.io", "images", "list", "--quiet").stdout.split()
        outdated = [name for name in present if name.startswith(BUILT_PREFIX) and name not in references]
        if outdated:  # first: the disk may have room for one trainer image only
            self.ctr("--namespace=k8s.io", "images", "remove", "--sync", *outdated)
        for reference in references:
            if reference not in present:
                self._import_image(reference)

    def _import_image(self, reference: str) -> None:
        """From buildah's store into containerd's (namespace k8s.io, the CRI's) as an uncompressed
        docker-archive, streamed through a FIFO: no multi-GB archive on the disk, and no gzip of it on 2
        CPUs (buildah 1.28 gzips an oci-archive's layers whatever it is told, and cannot write to a pipe)."""
        fifo = self.state / "import.fifo"
        os.mkfifo(fifo)
        push_command = ["buildah", "push", "--quiet", reference, f"docker-archive:{fifo}:{reference}"]
        load_command = [
            "ctr",
            f"--address={self.containerd_socket}",
            "--namespace=k8s.io",
            "images",
            "import",
            str(fifo),
        ]
        push = subprocess.Popen(push_command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        load = subprocess.Popen(load_command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            # If buildah fails before it opens the FIFO, ctr would wait on it forever: watch buildah.
            wait_until(lambda: push.poll() is not None, IMAGE_IMPORT_S, f"buildah to push {reference}")
            if push.returncode != 0:
                raise RuntimeError(f"buildah push {reference} failed ({push.returncode}): {push.stderr.read().strip()}")
            if load.wait(timeout=IMAGE_IMPORT_S) != 0:
                raise RuntimeError(
                    f"ctr images import {reference} failed ({load.returncode}): {load.stderr.read().strip()}"
                )
        finally:
            for process in (push, load):
                if process.poll() is None:
                    process.kill()
                    process.wait()
            fifo.unlink()

    def _start_kubelet(self) -> None:
        assert self.control_plane is not None
        directory = self.state / "kubelet"
        directory.mkdir()
        kubeconfig = self.control_plane.client_kubeconfig(
            directory / "kubelet.kubeconfig", f"system:node:{NODE_NAME}", "system:nodes"
        )
        port, healthz = free_ports(2)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This kind of host mounts cgroup v1 (hybrid); kubelet 1.37 refuses it unless told not to.
            "failCgroupV1": False,
            # containerd 1.6 has no CRI RuntimeConfig, so the kubelet keeps its own driver: cgroupfs.
            "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": GATEWAY,
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.control_plane.pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [GATEWAY],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": "",  # the host's resolvers are unreachable from pods; cluster DNS only
            "failSwapOn": False,
            "evictionHard": KUBELET_EVICTION_HARD,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
        }
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
        self._launch(
            "kubelet",
            str(binaries_dir() / "kubelet"),
            f"--config={directory / 'config.yaml'}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={directory / 'root'}",
            f"--cert-dir={directory / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={GATEWAY}",
        )

    def _start_kube_proxy(self) -> None:
        assert self.control_plane is not None
        directory = self.state / "kube-proxy"
        directory.mkdir()
        healthz, metrics = free_ports(2)
        kubeconfig = self.control_plane.client_kubeconfig(directory / "kube-proxy.kubeconfig", "system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "clusterCIDR": str(POD_SUBNET),
            "hostnameOverride": NODE_NAME,
            "healthzBindAddress": f"127.0.0.1:{healthz}",
            "metricsBindAddress": f"127.0.0.1:{metrics}",
            # Leave the host's conntrack sysctls alone; NodePorts only on the bridge, never on loopback.
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "iptables": {"localhostNodePorts": False},
            "nodePortAddresses": [f"{GATEWAY}/32"],
        }
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
        self._launch("kube-proxy", str(binaries_dir() / "kube-proxy"), f"--config={directory / 'config.yaml'}")

    def _start_coredns(self) -> None:
        """CoreDNS as kubeadm runs it, but as a host process on the bridge's address: the kubelet's
        clusterDNS. Its RBAC is kubeadm's system:coredns role."""
        assert self.control_plane is not None
        directory = self.state / "coredns"
        directory.mkdir()
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(_coredns_rbac()))
        kubeconfig = self.control_plane.client_kubeconfig(directory / "coredns.kubeconfig", "system:coredns")
        (health,) = free_ports(1)
        corefile = f""".:53 {{
    bind {GATEWAY}
    errors
    health 127.0.0.1:{health}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} scaletrain-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
    loadbalance
}}
"""
        (directory / "Corefile").write_text(corefile)
        self._launch("coredns", str(binaries_dir() / "coredns"), "-conf", str(directory / "Corefile"))
        wait_until(
            lambda: _http_ok(f"http://127.0.0.1:{health}/health"),
            COMPONENT_READY_S,
            "CoreDNS to be healthy",
            details=lambda: _tail(self.state / "logs" / "coredns.log"),
        )

    def _wait_node_ready(self) -> None:
        def ready() -> bool:
            result = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
            if result.returncode != 0:
                return False
            conditions = json.loads(result.stdout)["status"].get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        wait_until(
            ready,
            CLUSTER_NODE_READY_S,
            f"node {NODE_NAME} to be Ready",
            details=lambda: _tail(self.state / "logs" / "kubelet.log"),
        )

    def _provide_example_claim(self) -> None:
        """examples/cpu-gloo.yaml's claim in the default namespace, on a local volume owned by root with
        mode 0755, as a freshly provisioned disk is."""
        self.provide_claim("default", EXAMPLE_CLAIM)

    def volumes_dir(self) -> str:
        return str(self.state / "volumes")

    def node_run(self, *command: str, timeout: float = 60) -> str:
        return run_command(*command, timeout=timeout).stdout  # the node is this host

    def _launch(self, name: str, *command: str) -> None:
        launch(self.state, name, list(command), self.detached, log_dir=self.state / "logs")

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_command("ctr", f"--address={self.containerd_socket}", *args, check=check, timeout=timeout)

    # ---- down ----

    def down(self) -> list[str]:
        """Stop everything `up` started and remove the state directory; safe to repeat, and on a cluster
        that never fully started or whose processes died. Returns what was still running."""
        if not self.state.exists():
            return []
        self._delete_pods()
        stopped = stop_recorded(self.state, only=("coredns", "kube-proxy", "kubelet"))
        self._delete_containers()
        stopped += stop_recorded(self.state)  # containerd
        stopped += stop_recorded(self.state / "control-plane")
        # What no runtime stops any more: containers whose shim died, shims whose containerd died.
        _kill_processes(_processes_in_cgroup("kubepods") | _processes_mentioning(self.state))
        _unmount_below(self.state)
        _unmount_below(image_store())
        _remove_network_namespaces(self._netns_baseline())
        run_command(str(binaries_dir() / "kube-proxy"), "--cleanup", check=False)
        _remove_kube_chains()
        run_command("ip", "link", "delete", BRIDGE, check=False)
        _remove_cgroups("kubepods")
        shutil.rmtree(self.state)
        return stopped

    def _delete_pods(self) -> None:
        """Every pod deleted through the API while the kubelet runs, so that it stops each one as it would
        on a real node: containers, then the sandbox with its network namespace and veth. The
        controller-manager goes first, so that no Job or ReplicaSet makes new ones."""
        if not self.kubeconfig.exists() or not self._kubelet_running() or not self.attach():
            return
        stop_recorded(self.state / "control-plane", only=("kube-controller-manager",))
        deleted = self.kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=false", check=False
        )
        if deleted.returncode != 0:
            return  # the API server is gone: the runtime's clean-up below does it
        baseline = self._netns_baseline()
        with contextlib.suppress(WaitTimeout):
            wait_until(
                lambda: not (_network_namespaces() - baseline),
                CLUSTER_POD_TEARDOWN_S,
                "the kubelet to tear down every pod sandbox",
            )

    def _kubelet_running(self) -> bool:
        pids = self.state / "pids"
        records = dict(line.split() for line in pids.read_text().splitlines()) if pids.exists() else {}
        return "kubelet" in records and Path(f"/proc/{records['kubelet']}").exists()

    def _delete_containers(self) -> None:
        """What is left in the runtime (exited containers, the sandboxes' records, or everything when the
        kubelet could not stop it): killed and deleted with their snapshots, so that the kept image store
        holds images only."""
        if not self.containerd_socket.exists() or self.ctr("version", check=False).returncode != 0:
            return
        for container in self.ctr("--namespace=k8s.io", "containers", "list", "--quiet").stdout.split():
            self.ctr("--namespace=k8s.io", "tasks", "delete", "--force", container, check=False)
            self.ctr("--namespace=k8s.io", "containers", "delete", container, check=False)

    def _netns_baseline(self) -> set[str]:
        """The network namespaces that existed before this cluster (recorded by `up`)."""
        path = self.state / "netns-before"
        return set(path.read_text().split()) if path.exists() else set()


def local_claim(namespace: str, claim: str, path: str, size: str, node: str) -> list[dict[str, Any]]:
    """A PersistentVolume of the `local` type at PATH on NODE (the kubelet applies fsGroup to it, unlike
    hostPath), and the claim bound to it."""
    volume = f"{namespace}-{claim}"
    on_node = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": claim},
                "local": {"path": path},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [on_node]}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": size}},
            },
        },
    ]


def _containerd_config(directory: Path, socket: Path, cni_config_dir: Path, pause_image: str) -> str:
    return f"""version = 2
root = "{image_store()}"
state = "{directory / "state"}"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{directory / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  # This host's capability bounding set lacks CAP_SYS_RESOURCE: the sandbox's oom_score_adj of -998
  # would be refused (runc says only "can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_PLUGINS}"
    conf_dir = "{cni_config_dir}"
"""


def _coredns_rbac() -> list[dict[str, Any]]:
    """kubeadm's ClusterRole and binding for CoreDNS, bound to the user of its client certificate."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:coredns"}],
        },
    ]


def run_command(*command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
        )
    return result


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=READINESS_REQUEST_S) as response:
            return response.status == 200
    except OSError:
        return False


def _tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
    return f"last {len(text)} lines of {path}:\n" + "\n".join(text)


NETNS_DIR = Path("/run/netns")  # where the CNI plugins' callers (containerd) pin pod network namespaces


def _network_namespaces() -> set[str]:
    return {path.name for path in NETNS_DIR.iterdir()} if NETNS_DIR.exists() else set()


def _remove_network_namespaces(baseline: set[str]) -> None:
    """Pod network namespaces left by a runtime that was stopped before it could remove them (`ip netns
    delete` unmounts and removes the pin; the veth pair goes with the namespace)."""
    for name in sorted(_network_namespaces() - baseline):
        run_command("ip", "netns", "delete", name, check=False)


def _processes_in_cgroup(name: str) -> set[int]:
    """Processes in the kubelet's cgroup tree (any hierarchy): pods' containers whose shims are gone."""
    pids: set[int] = set()
    for root in Path("/sys/fs/cgroup").glob(f"*/{name}"):
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(pid) for pid in procs.read_text().split())
    return pids


def _processes_mentioning(path: Path) -> set[int]:
    """Processes whose command line names PATH: the runtime's shims (their -address), any component."""
    needle = str(path).encode()
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if needle in cmdline.read_bytes():
                found.add(int(cmdline.parent.name))
    found.discard(os.getpid())
    return found


def _kill_processes(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _mounts_below(directory: Path) -> list[str]:
    """Mount points at or below DIRECTORY, deepest first (/proc/self/mountinfo's fifth field)."""
    prefix = str(directory.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda point: point.count("/"), reverse=True)


def _unmount_below(directory: Path) -> None:
    for point in _mounts_below(directory):
        run_command("umount", "--lazy", point, check=False)


def _remove_kube_chains() -> None:
    """What kube-proxy's cleanup leaves: the kubelet's own chains (KUBE-FIREWALL, which drops non-local
    traffic to 127.0.0.0/8, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT): the rules that jump to any KUBE-
    chain, then the chains themselves, in every table, for IPv4 and IPv6."""
    for save, tool in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        table = ""
        chains: list[tuple[str, str]] = []
        for line in run_command(save, check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":KUBE-"):
                chains.append((table, line[1:].split()[0]))
            elif line.startswith("-A ") and " -j KUBE-" in line and not line.split()[1].startswith("KUBE-"):
                run_command(tool, "-t", table, "-D", *shlex.split(line)[1:], check=False)
        for table, chain in chains:
            run_command(tool, "-t", table, "-F", chain, check=False)
        for table, chain in chains:
            run_command(tool, "-t", table, "-X", chain, check=False)


def _remove_cgroups(name: str) -> None:
    """The kubelet's cgroup tree (cgroupfs driver) in each v1 hierarchy and the v2 one, leaves first."""
    for root in Path("/sys/fs/cgroup").iterdir():
        tree = root / name
        if not tree.is_dir():
            continue
        for directory in sorted((p for p in tree.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            tree.rmdir()


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) == 2 else ""
    if command not in ("up", "down"):
        print("usage: python -m scaletrain_testing.local_cluster up|down", file=sys.stderr)
        return 2
    cluster = LocalCluster()
    if command == "down":
        stopped = cluster.down()
        print(f"cluster: stopped {', '.join(stopped) or 'nothing (none was running)'}; removed {cluster.state}")
        return 0
    reason = unavailable_reason()
    if reason is not None:
        print(f"cluster: {reason}", file=sys.stderr)
        return 1
    try:
        kubeconfig = cluster.up()
    except (OSError, RuntimeError, AssertionError, subprocess.SubprocessError) as error:  # a wait's too
        print(f"cluster: could not start: {error}", file=sys.stderr)
        print(f"cluster: the logs are in {cluster.state / 'logs'}; `make cluster-down` cleans up", file=sys.stderr)
        return 1
    print(f"cluster: node {NODE_NAME} Ready; images {', '.join(built_images().values())}")
    print(f"export KUBECONFIG={kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
