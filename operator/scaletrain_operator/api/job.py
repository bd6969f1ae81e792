"""The ScaleTrainJob itself (its metadata, spec and status) and `parse_job`, which the operator, the CLI and the
renderer all parse jobs through."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scaletrain_trainer.contract.validation import (
    Problem,
    ProblemsError,
    SpecModel,
    problems_from_validation_error,
)

from ..validation import kube_rules, kube_schema, spec_rules
from ..validation.bounds import spec_bound_problems
from . import naming
from .job_status import ScaleTrainJobStatus
from .spec import ScaleTrainJobSpec


class ObjectMeta(BaseModel):
    """The metadata ScaleTrain reads; everything else in metadata passes through."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=kube_rules.DNS_1035_LABEL, max_length=naming.MAX_NAME_LENGTH)
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ScaleTrainJob(SpecModel):
    api_version: Literal["scaletrain.io/v1alpha1"]
    kind: Literal["ScaleTrainJob"]
    metadata: ObjectMeta
    spec: ScaleTrainJobSpec
    status: ScaleTrainJobStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def named_gang(self) -> int | None:
        """The gang generation the status names (naming.named_gang); None before the first."""
        if self.status is None:
            return None
        named = self.status.model_dump(by_alias=True, include={"gang_generation", "current_job"})
        return naming.named_gang(self.name, named)

    def at_size(self, nodes: int) -> ScaleTrainJob:
        """The job as a gang of `nodes` renders and is judged (an elastic gang below or above spec.nodes)."""
        if nodes == self.spec.nodes:
            return self
        return self.model_copy(update={"spec": self.spec.model_copy(update={"nodes": nodes})})

    @property
    def queue(self) -> str | None:
        """The Kueue LocalQueue of its gangs: spec.queueName, else the job's kueue.x-k8s.io/queue-name label."""
        return naming.queue_of(self.spec.queue_name, self.metadata.labels)

    def problems(self) -> Iterator[Problem]:
        """Its labels and annotations, as the API server checks them (the CRD's schema cannot), and a
        topology that nothing would honour."""
        metadata = {"labels": self.metadata.labels, "annotations": self.metadata.annotations}
        yield from kube_rules.metadata_problems(metadata, ("metadata",))
        yield from kube_schema.namespace_problems(self.metadata.namespace, ("metadata", "namespace"))
        topology = self.spec.placement.topology
        yield from spec_rules.placement_problems(
            required=topology.required if topology is not None else None,
            preferred=topology.preferred if topology is not None else None,
            queue=self.queue,
            gang=self.spec.scheduling.gang,
            elastic=self.spec.elastic is not None,
        )


def parse_job(document: Any) -> ScaleTrainJob:
    """Validate a ScaleTrainJob document; raises ProblemsError listing every problem with its path."""
    if not isinstance(document, dict):
        raise ProblemsError([Problem((), f"expected a ScaleTrainJob mapping, got {type(document).__name__}")])
    if document.get("kind") != naming.KIND or document.get("apiVersion") != naming.API_VERSION:
        raise ProblemsError(
            [
                Problem(
                    ("kind",),
                    f"expected apiVersion {naming.API_VERSION} and kind {naming.KIND}, "
                    f"got {document.get('apiVersion')!r} / {document.get('kind')!r}",
                )
            ]
        )
    if too_deep_or_large := spec_bound_problems(document):  # before anything below walks the spec recursively
        raise ProblemsError(too_deep_or_large)
    try:
        return ScaleTrainJob.model_validate(document)
    except ValidationError as error:
        raise ProblemsError(problems_from_validation_error(error, ScaleTrainJob)) from None
