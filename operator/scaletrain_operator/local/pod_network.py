"""How local pods reach each other and the host: a network namespace per pod, or a shared loopback.

**Namespaces** (root, with iproute2's `ip` and util-linux's `unshare`): each pod gets a network
namespace with `lo` up and an IP on a bridge of this network's own (a free /24 of 10.244.0.0/16,
with the bridge as the host's address in it, so the host reaches every pod), and a UTS namespace
with the pod's hostname. `ip netns exec` bind-mounts /etc/netns/NETNS/hosts over /etc/hosts, and
that file is the pod's DNS: its own hostname, and `HOST.SUBDOMAIN[.NAMESPACE.svc[.cluster.local]]`
of every pod of its Kubernetes namespace, rewritten in place (a bind mount pins the inode) as pods
come and go. As on a cluster, `localhost` is the pod's own, every pod may listen on 29500, and the
gloo and c10d rendezvous addresses are the pod's IP (gloo resolves the hostname to pick its address).

**Loopback** (anything else): every pod shares this machine's network, so rendezvous env is moved
where it still works: MASTER_ADDR (and PET_MASTER_ADDR) becomes 127.0.0.1 and MASTER_PORT a free
port per master pod, and `localhost` is one for all pods, which lets scripts pass here that fail on
a cluster. `reason` says why this mode was chosen.
"""

from __future__ import annotations

import abc
import fcntl
import ipaddress
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..api.naming import whole_number
from .pod_spec import Pod, pod_hostname

NAMESPACES, LOOPBACK, AUTO = "namespaces", "loopback", "auto"
LOCALHOST = "127.0.0.1"
CLUSTER_DOMAIN = "cluster.local"
MASTER_ADDRESS_ENV = ("PET_MASTER_ADDR", "MASTER_ADDR")
MASTER_PORT_ENV = ("PET_MASTER_PORT", "MASTER_PORT")
DEFAULT_POOL = "10.244.0.0/16"  # the pod CIDR kubeadm and flannel use; one /24 of it per network
SUBNET_PREFIX = 24
STATE_DIR = Path("/run/scaletrain/pod-networks")  # one directory per live network, with its owner's pid
NETNS_ETC = Path("/etc/netns")  # `ip netns exec` bind-mounts NETNS_ETC/NAME/* over /etc/*
NETNS_RUN = Path("/run/netns")
COMMAND_TIMEOUT_SECONDS = 30
# Run in the pod's namespaces, before its command: the pod's hostname, then the command itself.
SET_HOSTNAME_THEN_EXEC = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])"
HOSTS_HEADER = """# Kubernetes-managed hosts file (the local pod executor's, for one pod network namespace).
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
fe00::0\tip6-localnet
fe00::0\tip6-mcastprefix
fe00::1\tip6-allnodes
fe00::2\tip6-allrouters
"""


class NetworkError(OSError):
    """The pod network could not be made or changed; the message names the failing step."""


@dataclass(frozen=True)
class PodIdentity:
    """What the network needs to know of a pod: its names, and its labels (which Services select it)."""

    namespace: str
    hostname: str
    subdomain: str | None
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, pod: Pod) -> PodIdentity:
        labels = tuple(sorted((pod["metadata"].get("labels") or {}).items()))
        return cls(namespace_of(pod), pod_hostname(pod), pod["spec"].get("subdomain"), labels)

    def selected_by(self, selector: Mapping[str, str]) -> bool:
        return bool(selector) and selector.items() <= dict(self.labels).items()

    def dns_names(self) -> list[str]:
        """The names a headless Service named after the pod's subdomain gives it, longest first."""
        if not self.subdomain:
            return []
        short = f"{self.hostname}.{self.subdomain}"
        return [f"{short}.{self.namespace}.svc.{CLUSTER_DOMAIN}", f"{short}.{self.namespace}.svc", short]


@dataclass
class PodSandbox:
    """A pod's place in the network (the kubelet's pod sandbox): its IP, and its network namespace."""

    identity: PodIdentity
    ip: str
    netns: str | None = None
    veth: str | None = None  # the host's end of the pod's veth pair
    netns_inode: int | None = None  # finds the pod's processes: /proc/PID/ns/net is net:[INODE]


class PodNetwork(abc.ABC):
    """The interface of both modes (LoopbackNetwork, NamespaceNetwork)."""

    mode: str
    reason: str  # why this mode, in words, for a log line
    host_ip: str  # status.hostIP: the host's address as the pods see it
    shares_host_ports: bool  # whether pods listen in the host's port space

    def publish(self, service: Mapping[str, Any]) -> None:
        """A headless Service's name for the pods it selects, as a cluster's DNS answers it; only where
        pods have a DNS of their own (a network namespace each), so nothing on the loopback."""
        return None

    @abc.abstractmethod
    def attach(self, identity: PodIdentity) -> PodSandbox:
        """The pod's place in the network: its IP, and its namespace in that mode."""

    @abc.abstractmethod
    def detach(self, sandbox: PodSandbox) -> None:
        """Idempotent: a pod's network goes when its pod stops."""

    def enter(self, sandbox: PodSandbox, argv: list[str]) -> list[str]:
        """The command line that runs `argv` (argv[0] a path) inside the pod's network."""
        return argv

    def rewrite_env(self, sandbox: PodSandbox, env_spec: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """A container's env list, changed where this network would break it."""
        return [dict(var) for var in env_spec]

    @abc.abstractmethod
    def address(self, sandbox: PodSandbox, port: int) -> tuple[str, int]:
        """Where the host reaches the pod's container port `port`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Remove everything the network made."""


class LoopbackNetwork(PodNetwork):
    mode, host_ip, shares_host_ports = LOOPBACK, LOCALHOST, True

    def __init__(self, reason: str):
        self.reason = reason
        self._ports: dict[tuple[str, str, int], int] = {}  # (namespace, hostname, port) → host port
        self._lock = threading.Lock()

    def attach(self, identity: PodIdentity) -> PodSandbox:
        return PodSandbox(identity, LOCALHOST)

    def rewrite_env(self, sandbox: PodSandbox, env_spec: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The master's DNS name becomes 127.0.0.1, and its port the host port that stands for it."""
        literal = {var["name"]: str(var["value"]) for var in env_spec if "value" in var}
        master = next((literal[name] for name in MASTER_ADDRESS_ENV if name in literal), None)
        rewritten = []
        for var in env_spec:
            value = literal.get(var["name"])
            if master is not None and value is not None and var["name"] in MASTER_ADDRESS_ENV:
                var = {**var, "value": LOCALHOST}
            elif master is not None and var["name"] in MASTER_PORT_ENV and (port := whole_number(value)) is not None:
                master_host = master.split(".")[0]  # the master pod's hostname
                var = {**var, "value": str(self._host_port(sandbox.identity.namespace, master_host, port))}
            rewritten.append(dict(var))
        return rewritten

    def detach(self, sandbox: PodSandbox) -> None:
        return None  # a pod on the shared loopback leaves nothing behind

    def close(self) -> None:
        return None  # nor does the network

    def address(self, sandbox: PodSandbox, port: int) -> tuple[str, int]:
        identity = sandbox.identity
        with self._lock:
            return LOCALHOST, self._ports.get((identity.namespace, identity.hostname, port), port)

    def _host_port(self, namespace: str, hostname: str, port: int) -> int:
        with self._lock:
            return self._ports.setdefault((namespace, hostname, port), free_port())


class NamespaceNetwork(PodNetwork):
    mode, shares_host_ports = NAMESPACES, False

    def __init__(self, pool: str = DEFAULT_POOL):
        self._ip_tool, self._unshare_tool = _tool("ip"), _tool("unshare")
        self.session = uuid.uuid4().hex[:6]
        self.bridge = f"stb{self.session}"  # interface names have at most 15 characters
        with _host_lock():
            _sweep_stale_networks(self._ip)
            self.subnet = _free_subnet(pool, self._used_networks())
            gateway = next(self.subnet.hosts())
            self._ip("link", "add", self.bridge, "type", "bridge")
            try:
                self._ip("addr", "add", f"{gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
                self._ip("link", "set", self.bridge, "up")
            except NetworkError:
                self._ip("link", "del", self.bridge, check=False)
                raise
            (STATE_DIR / self.session).mkdir(parents=True)
            (STATE_DIR / self.session / "pid").write_text(str(os.getpid()))
        self.host_ip = str(gateway)
        self.reason = f"a network namespace per pod, on bridge {self.bridge} ({self.subnet}, the host at {gateway})"
        self._free_ips = list(self.subnet.hosts())[1:]
        self._sandboxes: dict[str, PodSandbox] = {}  # by netns name, the attached ones
        self._services: dict[tuple[str, str], Mapping[str, str]] = {}  # (namespace, name) → selector
        self._serial = itertools.count()
        self._lock = threading.Lock()

    def attach(self, identity: PodIdentity) -> PodSandbox:
        with self._lock:
            if not self._free_ips:
                raise NetworkError(f"no free pod IP left in {self.subnet}")
            serial = next(self._serial)
            ip = str(self._free_ips.pop(0))
        sandbox = PodSandbox(identity, ip, f"st{self.session}-{serial}", f"stv{self.session}{serial:x}")
        try:
            self._ip("netns", "add", sandbox.netns)
            self._ip("link", "add", sandbox.veth, "type", "veth", "peer", "name", "eth0", "netns", sandbox.netns)
            self._ip("link", "set", sandbox.veth, "master", self.bridge, "up")
            self._ip("-n", sandbox.netns, "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0")
            self._ip("-n", sandbox.netns, "link", "set", "eth0", "up")
            self._ip("-n", sandbox.netns, "link", "set", "lo", "up")
            sandbox.netns_inode = (NETNS_RUN / sandbox.netns).stat().st_ino
            etc = NETNS_ETC / sandbox.netns
            etc.mkdir(parents=True)
            (etc / "resolv.conf").write_text(resolv_conf(identity.namespace))
        except OSError:
            self._remove(sandbox)
            raise
        with self._lock:
            self._sandboxes[sandbox.netns] = sandbox
            self._write_hosts_files(identity.namespace)
        return sandbox

    def publish(self, service: Mapping[str, Any]) -> None:
        namespace = namespace_of(service)
        with self._lock:
            self._services[(namespace, service["metadata"]["name"])] = dict(service["spec"].get("selector") or {})
            self._write_hosts_files(namespace)

    def detach(self, sandbox: PodSandbox) -> None:
        with self._lock:
            if self._sandboxes.pop(sandbox.netns or "", None) is None:
                return
            self._write_hosts_files(sandbox.identity.namespace)
        self._remove(sandbox)

    def enter(self, sandbox: PodSandbox, argv: list[str]) -> list[str]:
        """`ip netns exec` (the network and the hosts file), `unshare --uts` and the hostname, then
        argv: each one execs the next, so the process started is the container's main process."""
        shim = [sys.executable, "-I", "-S", "-c", SET_HOSTNAME_THEN_EXEC, sandbox.identity.hostname]
        return [self._ip_tool, "netns", "exec", str(sandbox.netns), self._unshare_tool, "--uts", "--", *shim, *argv]

    def address(self, sandbox: PodSandbox, port: int) -> tuple[str, int]:
        return sandbox.ip, port

    def close(self) -> None:
        for sandbox in list(self._sandboxes.values()):
            self.detach(sandbox)
        with _host_lock():
            _remove_network(self.session, self._ip)

    def _remove(self, sandbox: PodSandbox) -> None:
        self._ip("link", "del", str(sandbox.veth), check=False)
        self._ip("netns", "del", str(sandbox.netns), check=False)
        shutil.rmtree(NETNS_ETC / str(sandbox.netns), ignore_errors=True)
        with self._lock:
            self._free_ips.append(ipaddress.ip_address(sandbox.ip))

    def _write_hosts_files(self, namespace: str) -> None:
        """Every pod of `namespace` gets the namespace's current names (called with the lock held)."""
        peers = [sandbox for sandbox in self._sandboxes.values() if sandbox.identity.namespace == namespace]
        services = {name: selector for (where, name), selector in self._services.items() if where == namespace}
        for sandbox in peers:
            write_in_place(NETNS_ETC / str(sandbox.netns) / "hosts", hosts_file(sandbox, peers, services))

    def _used_networks(self) -> list[ipaddress.IPv4Network]:
        routes = json.loads(self._ip("-j", "-4", "route", "show", "table", "all") or "[]")
        return [ipaddress.ip_network(route["dst"], strict=False) for route in routes if route["dst"] != "default"]

    def _ip(self, *args: str, check: bool = True) -> str:
        return _run([self._ip_tool, *args], check)


def open_network(preference: str = AUTO) -> PodNetwork:
    """The pod network: `namespaces`, `loopback`, or `auto` (namespaces where they can be made)."""
    if preference not in (AUTO, NAMESPACES, LOOPBACK):
        raise ValueError(f"pod network {preference!r}: expected one of {AUTO}, {NAMESPACES}, {LOOPBACK}")
    if preference == LOOPBACK:
        return LoopbackNetwork("as asked")
    missing = why_no_namespaces()
    if missing is None:
        try:
            return NamespaceNetwork()
        except NetworkError as error:
            missing = str(error)
    if preference == NAMESPACES:
        raise NetworkError(f"per-pod network namespaces are not available: {missing}")
    return LoopbackNetwork(
        f"{missing}, which per-pod network namespaces need: all pods share this machine's network, "
        "MASTER_ADDR and MASTER_PORT point at 127.0.0.1 and a free port"
    )


def why_no_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "not running as root"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"no `{tool}` command ({package})"
    return None


def hosts_file(
    own: PodSandbox, peers: Sequence[PodSandbox], services: Mapping[str, Mapping[str, str]] | None = None
) -> str:
    """A pod's /etc/hosts: the kubelet's (localhost, the pod's own names) plus the names of its
    namespace's other pods and of the headless `services` (by name, with their selectors) that select
    them, which a cluster's DNS would answer."""

    def service_names(identity: PodIdentity) -> list[str]:
        selecting = [name for name, selector in (services or {}).items() if identity.selected_by(selector)]
        suffixes = (f".{identity.namespace}.svc.{CLUSTER_DOMAIN}", f".{identity.namespace}.svc", "")
        return [name + suffix for name in selecting for suffix in suffixes]

    names = [(own.ip, [*own.identity.dns_names(), own.identity.hostname, *service_names(own.identity)])]
    names += [
        (peer.ip, [*peer.identity.dns_names(), *service_names(peer.identity)])
        for peer in peers
        if peer is not own and (peer.identity.subdomain or service_names(peer.identity))
    ]
    return HOSTS_HEADER + "".join(f"{ip}\t{' '.join(hostnames)}\n" for ip, hostnames in names)


def namespace_of(obj: Mapping[str, Any]) -> str:
    """A namespaced object's namespace; run-local's objects have none, and live in `default`."""
    return obj["metadata"].get("namespace") or "default"


def resolv_conf(namespace: str) -> str:
    """A cluster's search path, and no name server: a name not in the hosts file fails at once
    (127.0.0.1:53 refuses) instead of waiting for the host's name server, which a pod cannot reach."""
    return f"search {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\noptions ndots:5\n"


def write_in_place(path: Path, text: str) -> None:
    """Rewrite `path` keeping its inode: running pods see it through a bind mount, which a new file
    (a rename) would not replace."""
    with path.open("r+" if path.exists() else "w") as file:
        file.write(text)
        file.truncate()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return sock.getsockname()[1]


def _free_subnet(pool: str, used: Sequence[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    for subnet in ipaddress.ip_network(pool).subnets(new_prefix=SUBNET_PREFIX):
        if not any(subnet.overlaps(network) for network in used):
            return subnet  # type: ignore[return-value]
    raise NetworkError(f"no free /{SUBNET_PREFIX} left in {pool}: each one is routed on this machine")


def _sweep_stale_networks(ip: Callable[..., str]) -> None:
    """Remove what networks of dead processes left behind (a killed run): bridges, namespaces, files."""
    for state in STATE_DIR.glob("*") if STATE_DIR.is_dir() else []:
        try:
            os.kill(int((state / "pid").read_text()), 0)
        except ProcessLookupError:
            _remove_network(state.name, ip)
        except (OSError, ValueError):  # no pid yet, or not ours to signal: alive or not, leave it
            continue


def _remove_network(session: str, ip: Callable[..., str]) -> None:
    for netns in NETNS_RUN.glob(f"st{session}-*"):
        ip("netns", "del", netns.name, check=False)
    for etc in NETNS_ETC.glob(f"st{session}-*"):
        shutil.rmtree(etc, ignore_errors=True)
    ip("link", "del", f"stb{session}", check=False)
    shutil.rmtree(STATE_DIR / session, ignore_errors=True)


@contextmanager
def _host_lock(timeout_seconds: float = COMMAND_TIMEOUT_SECONDS) -> Iterator[None]:
    """One network at a time picks a subnet and sweeps, across processes."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR.parent / "pod-networks.lock").open("w") as lock:
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NetworkError(f"{lock.name} stayed locked for {timeout_seconds} s") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise NetworkError(f"no `{name}` command")
    return path


def _run(command: list[str], check: bool) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        raise NetworkError(f"{' '.join(command)}: no answer in {COMMAND_TIMEOUT_SECONDS} s") from None
    if check and result.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {result.stderr.strip() or f'exit code {result.returncode}'}")
    return result.stdout
