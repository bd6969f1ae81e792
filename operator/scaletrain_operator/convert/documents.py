"""The input's documents: the one job among them, its metadata, and the ScaleTrainJob made of them by the
reader of its kind and checked with parse_job (convert)."""

from __future__ import annotations

from typing import Any

from scaletrain_trainer.contract.validation import ProblemsError

from ..api import naming
from ..api.job import parse_job
from ..api.spec import ScaleTrainJobSpec
from .common import (
    Conversion,
    ConversionError,
    Finding,
    Where,
    _brief,
    _dig,
    _Findings,
    _kind,
    _mapping,
    _others,
    _typed,
)
from .pytorchjob import PYTORCHJOB_API_VERSION, _pytorchjob_fields
from .trainjob import RUNTIME_KINDS, TRAINJOB_API_VERSION, _trainjob_fields

JOB_API_VERSIONS = {"PyTorchJob": PYTORCHJOB_API_VERSION, "TrainJob": TRAINJOB_API_VERSION}
SPEC_ORDER = tuple(f.alias for f in ScaleTrainJobSpec.model_fields.values())

# Metadata the API server sets on the source object: meaningless on a new one, so dropped without a word.
SERVER_SET_METADATA = frozenset(
    {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp"}
)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # describes the source object, not this one


def convert(documents: list[Any]) -> Conversion:
    """The ScaleTrainJob for the one PyTorchJob or TrainJob among `documents` (a TrainJob's runtime is
    another of them); raises ConversionError when there is none, or it cannot be converted."""
    index = _job_index(documents)
    job = documents[index]
    found = _Findings()
    for other, document in enumerate(documents):
        if other != index and _kind(document) not in RUNTIME_KINDS:
            found.drop(Where(document=f"document {other + 1}"), f"{_describe(document)}: not a job; not converted")
    metadata = _metadata(job, found)
    if job["kind"] == "PyTorchJob":
        fields = _pytorchjob_fields(job, found)
    else:
        fields = _trainjob_fields(job, documents, found)
    converted = {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": metadata,
        "spec": {key: fields[key] for key in SPEC_ORDER if fields.get(key) not in (None, [], {})},
    }
    if found.errors:
        raise ConversionError(found.errors)
    _check(converted)
    return Conversion(converted, found.unmapped)


def _job_index(documents: list[Any]) -> int:
    """Where the job is: exactly one PyTorchJob or TrainJob, of the API version convert reads."""
    jobs = [index for index, document in enumerate(documents) if _kind(document) in JOB_API_VERSIONS]
    if not jobs:
        kinds = ", ".join(_describe(document) for document in documents)
        message = f"found {kinds}; convert takes a PyTorchJob ({PYTORCHJOB_API_VERSION}) or a TrainJob "
        raise ConversionError([Finding(Where(("kind",)), message + f"({TRAINJOB_API_VERSION}) with its runtime")])
    if len(jobs) > 1:
        numbers = ", ".join(str(index + 1) for index in jobs)
        message = f"{len(jobs)} jobs (documents {numbers}); convert one job per file"
        raise ConversionError([Finding(Where(("kind",)), message)])
    job = documents[jobs[0]]
    expected = JOB_API_VERSIONS[job["kind"]]
    if job.get("apiVersion") != expected:
        message = f"{_brief(job.get('apiVersion'))}: convert reads {job['kind']} {expected}; export it in that version"
        raise ConversionError([Finding(Where(("apiVersion",)), message)])
    return jobs[0]


def _describe(document: Any) -> str:
    if not isinstance(document, dict):
        return f"a {type(document).__name__}"
    name = _dig(document, "metadata", "name")
    return f"{_kind(document) or 'an object without a kind'}{f' {name}' if isinstance(name, str) else ''}"


def _check(converted: dict[str, Any]) -> None:
    """The converted job must be one parse_job accepts: what it refuses stops the conversion."""
    try:
        parse_job(converted)
    except ProblemsError as error:
        where = Where(document="the converted ScaleTrainJob's")
        raise ConversionError([Finding(where.at(*p.path), p.message) for p in error.problems]) from None


# Metadata


def _metadata(job: dict[str, Any], found: _Findings) -> dict[str, Any]:
    """name, namespace, labels and annotations; the Kueue queue label becomes spec.queueName instead."""
    where = Where(("metadata",))
    metadata = _mapping(job, "metadata", Where(), found)
    name = _typed(metadata, "name", where, str, found)
    if metadata.get("name") in (None, ""):
        found.error(where.at("name"), "required: the ScaleTrainJob takes the job's name")
    labels = _mapping(metadata, "labels", where, found)
    annotations = _mapping(metadata, "annotations", where, found)
    converted = {
        "name": name,
        "namespace": _typed(metadata, "namespace", where, str, found),
        "labels": {key: value for key, value in labels.items() if key != naming.KUEUE_QUEUE_LABEL},
        "annotations": {key: value for key, value in annotations.items() if key != LAST_APPLIED},
    }
    for key in _others(metadata, {*converted, *SERVER_SET_METADATA}):
        found.drop(where.at(key), "not carried over: it describes the source object")
    return {key: value for key, value in converted.items() if value}
