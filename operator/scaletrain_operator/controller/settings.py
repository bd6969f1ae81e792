"""Operator settings: the environment (SCALETRAIN_OPERATOR_*) gives defaults, the command line overrides
them (main.py); kopf hands them to the handlers through its memo."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..render.status_reports import Endpoint

ENV_PREFIX = "SCALETRAIN_OPERATOR_"


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: list[str] = field(default_factory=list)  # empty: every namespace
    # Rank 0's progress endpoint; {pod_ip} (from the status of the rank-0 pod its gang's own Job owns),
    # {pod}, {service}, {namespace} and {port} are filled in. By IP, not DNS: any pod in the namespace can
    # take rank 0's hostname and subdomain, and so its DNS name.
    progress_url: str = "http://{pod_ip}:{port}/progress"
    progress_interval_seconds: float = 15.0  # how often Running jobs are polled (and TTLs checked)
    # The longest a Running job's status.progress goes without rank 0's newest answer: an answer that says nothing
    # new is written no oftener. News (a new gang, a checkpoint, a diverged loss, a broken promise) is written at the
    # read that finds it (housekeeping_decisions.decide_progress).
    progress_write_interval_seconds: float = 60.0
    progress_timeout_seconds: float = 2.0
    request_timeout_seconds: float = 30.0
    watch_timeout_seconds: int = 300
    metrics_port: int = 8080  # Prometheus metrics; 0 disables
    # kopf peering (peering.py): the shared object's name ("" for a standalone operator), and this replica's
    # identity and priority in it.
    peering: str = ""
    peering_identity: str = ""
    peering_priority: int = 0
    # The operator's namespace, to give each job a NetworkPolicy (render.render_network_policy) whose pods
    # only its own pods and the operator's reach; "" makes none.
    network_policy_from: str = ""
    # The PriorityClass of elastic gangs' capacity probes (render/capacity_probe.py), whose preemptionPolicy
    # Never keeps a probe from preempting anything (the chart makes it); "": none, so the cluster's default.
    probe_priority_class: str = ""
    # The endpoint scripts of one's own push their progress to (report_server.py): the port this replica serves
    # it on (0: none), https://HOST[:PORT] as pods reach it, and the directory of its TLS files (tls.crt, tls.key,
    # and ca.crt, which pods are given to check it with).
    status_reports_port: int = 0
    status_reports_url: str = ""
    status_reports_tls_dir: str = ""
    # The image of the init container that brings a script of one's own's pods the in-place agent (the chart gives
    # the operator's own, which has it); "": such gangs are recreated (render/in_place.py).
    agent_image: str = ""
    # This replica's own pod (the chart sets them from the downward API), labelled while it is the active one
    # (naming.ACTIVE_REPLICA_LABEL); "": not labelled (an operator outside a pod).
    pod_name: str = ""
    pod_namespace: str = ""
    # Whether the API server serves the Workload API (gang placement, render/workload.py): found by
    # discovery when the operator starts (handlers.configure), so the environment does not set it.
    workload_api: bool = field(default=False, metadata={"discovered": True})
    # Whether the API server takes a container's restart rule RestartAllContainers (in-place gang restarts,
    # render/in_place.py): found by a dry run when the operator starts (Cluster.restarts_all_containers). Without it,
    # every gang is recreated.
    restarts_in_place: bool = field(default=False, metadata={"discovered": True})

    @functools.cached_property  # read once: a CA that changes reaches gangs only when the operator restarts
    def status_endpoint(self) -> Endpoint | None:
        """Where pods push their reports, with the CA to check it by; None when this operator serves none."""
        if not (self.status_reports_port and self.status_reports_url):
            return None
        return Endpoint(self.status_reports_url, (Path(self.status_reports_tls_dir) / "ca.crt").read_text())

    @property
    def probe_namespace(self) -> str:
        """Where the operator's dry runs go: the first namespace it watches (a namespaced install may make Jobs
        there alone), else its own, else default."""
        return self.namespaces[0] if self.namespaces else self.pod_namespace or "default"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> OperatorConfig:
        environ = os.environ if environ is None else environ
        values = {}
        for spec in fields(cls):
            if spec.metadata.get("discovered"):
                continue
            raw = environ.get(ENV_PREFIX + spec.name.upper())
            if raw is not None:
                values[spec.name] = _PARSERS.get(spec.name, type(spec.default))(raw)
        return cls(**values)


_PARSERS = {"namespaces": lambda raw: [name for name in raw.split(",") if name]}


DEFAULTS = OperatorConfig()  # the settings of an operator given none (frozen: shared safely)
