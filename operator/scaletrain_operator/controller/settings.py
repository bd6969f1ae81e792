"""Operator settings: the environment (SCALETRAIN_OPERATOR_*) gives defaults, the command line overrides
them (main.py); kopf hands them to the handlers through its memo."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

ENV_PREFIX = "SCALETRAIN_OPERATOR_"


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: list[str] = field(default_factory=list)  # empty: every namespace
    # Rank 0's progress endpoint; {pod_ip} (from the status of the rank-0 pod its gang's own Job owns),
    # {pod}, {service}, {namespace} and {port} are filled in. By IP, not DNS: any pod in the namespace can
    # take rank 0's hostname and subdomain, and so its DNS name.
    progress_url: str = "http://{pod_ip}:{port}/progress"
    progress_interval_seconds: float = 15.0  # how often Running jobs are polled (and TTLs checked)
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
    # Whether the API server serves the Workload API (gang placement, render/workload.py): found by
    # discovery when the operator starts (handlers.configure), so the environment does not set it.
    workload_api: bool = field(default=False, metadata={"discovered": True})

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
