"""The restart ledger of the operator and run-local: what a job has counted across its gangs (restarts against
maxRestarts, disruptions against maxDisruptions, the nodes its next gangs avoid). The operator keeps it in the
status and on each gang's Job (render/child_annotations.py), so that a lost status write loses no count."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api import naming
from ..api.job import ScaleTrainJob
from ..policy.gang_policy import Verdict
from ..policy.node_exclusion import with_node_excluded
from ..render.child_annotations import DISRUPTIONS_ANNOTATION, EXCLUDED_NODES_ANNOTATION, RESTARTS_ANNOTATION


@dataclass(frozen=True)
class Ledger:
    """What the job has counted across its gangs: restarts (against maxRestarts), disruptions (against
    maxDisruptions), and the nodes its next gangs avoid. Kept in the status and on each gang's Job."""

    restarts: int = 0
    disruptions: int = 0
    excluded_nodes: tuple[str, ...] = ()

    @property
    def gangs_ended(self) -> int:
        """The gangs that ended in a restart or a disruption. run-local's next gang is this generation; the
        operator's may be later, since a spec change or a resize starts a gang too."""
        return self.restarts + self.disruptions

    def after(self, verdict: Verdict, job: ScaleTrainJob) -> Ledger:
        """The counts once the restart `verdict` orders is made."""
        disruption = 1 if verdict.disruption else 0
        excluded = with_node_excluded(self.excluded_nodes, verdict.avoid_node, job.spec.failure_policy.exclude_nodes)
        return Ledger(self.restarts + 1 - disruption, self.disruptions + disruption, excluded)

    def status_fields(self) -> dict[str, Any]:
        return {"restarts": self.restarts, "disruptions": self.disruptions, "excludedNodes": list(self.excluded_nodes)}

    def annotations(self) -> dict[str, str]:
        return {
            RESTARTS_ANNOTATION: str(self.restarts),
            DISRUPTIONS_ANNOTATION: str(self.disruptions),
            EXCLUDED_NODES_ANNOTATION: json.dumps(list(self.excluded_nodes)),
        }


def ledger_of(job: ScaleTrainJob, current: Mapping[str, Any] | None) -> Ledger:
    """The status's counts, or the current Job's where they are higher (the status patch that recorded
    them was lost); its nodes to avoid, with any the status lacks."""
    status = job.status
    annotations = (current or {}).get("metadata", {}).get("annotations") or {}
    recorded_nodes = list(status.excluded_nodes) if status else []
    annotated_nodes = _string_list(annotations.get(EXCLUDED_NODES_ANNOTATION))
    return Ledger(
        restarts=max(status.restarts if status else 0, _count(annotations.get(RESTARTS_ANNOTATION))),
        disruptions=max(status.disruptions if status else 0, _count(annotations.get(DISRUPTIONS_ANNOTATION))),
        excluded_nodes=(*recorded_nodes, *(node for node in annotated_nodes if node not in recorded_nodes)),
    )


def _count(annotated: str | None) -> int:
    return naming.whole_number(annotated) or 0


def _string_list(annotated: str | None) -> list[str]:
    try:
        value = json.loads(annotated or "[]")
    except ValueError:
        return []
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
