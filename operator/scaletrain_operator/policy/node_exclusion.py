"""Bad-node exclusion (spec.failurePolicy.excludeNodes): the next gangs avoid the nodes that failures were
blamed on (gang_policy: a hang, a disruption of the node, a rule with excludeNode).

The list is kept in status.excludedNodes, and on each gang's Job (policy/ledger.py), so that it survives
an operator restart, a lost status patch and a spec change. It is applied to the rendered Job, after its
spec hash is taken: a new entry changes the next gang's placement, never makes a running gang look like
a spec change. Nodes are matched by name (`matchFields` on metadata.name, which the scheduler supports
for node affinity), not by a label a node may lack.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ..api.spec import ExcludeNodes

PREFERRED_WEIGHT = 100  # the most a preferred term can weigh


def with_node_excluded(excluded: Sequence[str], node: str, exclusion: ExcludeNodes | None) -> tuple[str, ...]:
    """`excluded` with `node` added as the newest entry, the oldest dropped past exclusion.max; unchanged
    without an exclusion policy or a node to blame."""
    if exclusion is None or not node:
        return tuple(excluded)
    kept = [name for name in excluded if name != node]
    return (*kept, node)[-exclusion.max :]


def avoid_nodes(rendered_job: dict[str, Any], nodes: Sequence[str], exclusion: ExcludeNodes | None) -> dict[str, Any]:
    """The rendered Job with its pods kept off `nodes`: Required adds the exclusion to each required node
    selector term (terms are ORed, so each must carry it), or makes the one term; Preferred adds a
    weight-100 preferred term. The user's own terms are kept."""
    if exclusion is None or not nodes:
        return rendered_job
    shaped = copy.deepcopy(rendered_job)
    pod = shaped["spec"]["template"]["spec"]
    node_affinity = pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    not_there = {"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}
    if exclusion.mode == "Required":
        required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.setdefault("nodeSelectorTerms", [])
        if not terms:
            terms.append({})
        for term in terms:
            term.setdefault("matchFields", []).append(not_there)
    else:
        preferred = node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
        preferred.append({"weight": PREFERRED_WEIGHT, "preference": {"matchFields": [not_there]}})
    return shaped
