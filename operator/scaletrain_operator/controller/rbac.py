"""The operator's API permissions, in one table: the Helm chart's Roles are generated from it, and the
tests check it against the calls a running operator makes (every call allowed, every verb used).

    python -m scaletrain_operator.controller.rbac > charts/scaletrain/files/rbac-rules.yaml   (`make generate`)

kopf runs with scanning disabled (see handlers.configure), so it never lists namespaces or watches
CRDs: a namespaced install needs only Roles in the watched namespaces and no ClusterRole at all.
API discovery (/api, /apis) is open to every authenticated user and needs no rule.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import yaml

from ..api import naming
from .peering import KOPF_GROUP


@dataclass(frozen=True)
class Permission:
    group: str  # "" for the core API group
    resource: str  # with "/subresource" where one applies
    verbs: tuple[str, ...]
    why: str

    @property
    def qualified(self) -> str:
        """`resource.group[/subresource]`, as the API server's audit log names it."""
        resource, _, subresource = self.resource.partition("/")
        name = f"{resource}.{self.group}" if self.group else resource
        return f"{name}/{subresource}" if subresource else name


# In every watched namespace (cluster-wide: everywhere).
OPERATOR = (
    Permission(
        naming.GROUP,
        naming.PLURAL,
        ("get", "list", "watch", "delete"),
        "watch jobs into the operator's cache (kopf); read one fresh before a decision that cannot be undone or"
        " after a relist found news; delete after ttlSecondsAfterFinished",
    ),
    Permission(naming.GROUP, f"{naming.PLURAL}/status", ("patch",), "phase, conditions, restarts and progress"),
    Permission(
        "",
        "services",
        ("list", "watch", "create"),
        "each job's headless Service, watched into the cache (and listed fresh where a reconcile must);"
        " never changed or deleted",
    ),
    Permission(
        "batch",
        "jobs",
        ("list", "watch", "create", "patch", "delete"),
        "one Indexed Job per gang generation, watched into the cache: suspend/resume by patch, gang restart by delete",
    ),
    Permission("", "pods", ("list", "watch"), "rank exits and phases, watched into the cache (read only)"),
    Permission(
        "kueue.x-k8s.io",
        "workloads",
        ("list",),
        "why Kueue has not admitted a queued gang yet (its Workloads' QuotaReserved condition), into the condition"
        " Queued; none where Kueue is not installed",
    ),
    Permission(
        "scheduling.k8s.io",
        "workloads",
        ("create", "list", "watch", "delete"),
        "each job's Workload, for gang placement (render/workload.py); listed when its create finds one, and replaced"
        " when the job's gang changed; every Workload watched, since another that names a job holds its gangs back",
    ),
    Permission(
        "",
        "events",
        ("create", "list"),
        "Events on each ScaleTrainJob; the Job controller's FailedCreate Events of a gang whose pods do not appear",
    ),
)

# kopf peering (HA replicas: one active operator, see peering.py): a KopfPeering in each watched
# namespace, or one ClusterKopfPeering for a cluster-wide operator. kopf watches it and patches its own
# keep-alive in; the housekeeping thread lists it to know whether this replica is the active one.
PEERING_VERBS = ("list", "watch", "patch")
NAMESPACED_PEERING = (
    Permission(
        KOPF_GROUP,
        "kopfpeerings",
        PEERING_VERBS,
        "kopf peering in a watched namespace: its record and the peers' (a standby stays passive)",
    ),
)
CLUSTER_PEERING = (
    Permission(
        KOPF_GROUP,
        "clusterkopfpeerings",
        PEERING_VERBS,
        "kopf peering, cluster-wide: its record and the peers' (a standby stays passive)",
    ),
)


# With networkPolicy.enabled: each job's NetworkPolicy (render.render_network_policy).
NETWORK_POLICIES = (
    Permission(
        "networking.k8s.io",
        "networkpolicies",
        ("list", "create"),
        "each job's NetworkPolicy, made with its gang (listed to tell ours from another's of the name); never changed",
    ),
)


# With statusReports.enabled: who sent a report (reporters.py). TokenReviews are cluster-scoped, so this one
# rule is a ClusterRole's in a namespaced install too; it lets the operator check tokens, not read anything.
STATUS_REPORTS = (
    Permission(
        "authentication.k8s.io",
        "tokenreviews",
        ("create",),
        "the pod a pushed progress report's token is bound to (status reports); cluster-scoped, so a ClusterRole's",
    ),
)


# With statusReports.enabled, in the operator's own namespace: the active replica labels its pod so that the
# status-report Service reaches only it.
OWN_POD = (
    Permission(
        "",
        "pods",
        ("patch",),
        "this replica's own pod, labelled while it is the active one (status reports go there); its own namespace",
    ),
)


def permissions(*, clusterwide: bool, peering: bool, network_policies: bool = False) -> tuple[Permission, ...]:
    """Everything one operator needs in the watched namespaces, for its scope, peering mode and NetworkPolicies
    (status reports' own rules, STATUS_REPORTS and OWN_POD, are Roles of their own in the chart)."""
    table = OPERATOR + (NETWORK_POLICIES if network_policies else ())
    if not peering:
        return table
    return table + (CLUSTER_PEERING if clusterwide else NAMESPACED_PEERING)


def rules(table: tuple[Permission, ...]) -> list[dict[str, object]]:
    """Kubernetes PolicyRules, one per permission."""
    return [{"apiGroups": [p.group], "resources": [p.resource], "verbs": list(p.verbs)} for p in table]


def chart_rules_yaml() -> str:
    """The file the chart's RBAC templates read (charts/scaletrain/files/rbac-rules.yaml), each rule
    under a comment that says why the operator needs it."""
    sections = {
        "operator": OPERATOR,
        "networkPolicies": NETWORK_POLICIES,
        "namespacedPeering": NAMESPACED_PEERING,
        "clusterPeering": CLUSTER_PEERING,
        "statusReports": STATUS_REPORTS,
        "ownPod": OWN_POD,
    }
    lines = ["# Generated from operator/scaletrain_operator/controller/rbac.py by `make generate`; do not edit."]
    for section, table in sections.items():
        lines.append(f"{section}:")
        for permission, rule in zip(table, rules(table), strict=True):
            lines += [f"# {permission.why}", yaml.safe_dump([rule], sort_keys=False).rstrip()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(chart_rules_yaml())
