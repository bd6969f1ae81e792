"""`scaletrain validate` agrees with the real API server about the children: for each spec the CRD lets
through but validation/kube_schema.py refuses, the server refuses the Job the operator would create from it
(a server-side dry-run create, with strict field validation as `kubectl apply` asks for), while the
base job's Job and Services are accepted. That the CRD stores these specs, and that the operator fails
them with InvalidSpec, test_crd_server.py and test_operator.py check (they are OPERATOR cases)."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from scaletrain_operator.api.job import ScaleTrainJob
from scaletrain_operator.render.children import render_children, render_job
from scaletrain_operator.validation import kube_schema
from scaletrain_testing.jobs import base_job, patched
from scaletrain_testing.kube import RESOURCES, Kube
from scaletrain_testing.malformed import REFUSED_AT_JOB_CREATION

KINDS = {"Job": "jobs", "Service": "services", "Workload": "workloads"}


@pytest.fixture
def client(control_plane) -> Kube:
    """Plain-dict requests: the kubernetes client's typed API would check the objects itself first."""
    return Kube(control_plane.api_client())


@pytest.fixture
def unchecked(monkeypatch):
    """Jobs read as the models read them without the pass-through check: what the operator rendered before
    it."""
    monkeypatch.setattr(kube_schema, "pass_through_problems", lambda **_: [])
    return ScaleTrainJob.model_validate


def _dry_run_create(client: Kube, child) -> None:
    path = RESOURCES[KINDS[child["kind"]]].path(child["metadata"]["namespace"])
    client.request("POST", path, child, query=[("dryRun", "All"), ("fieldValidation", "Strict")])


def test_the_base_jobs_children_are_accepted(client, namespace):
    for child in render_children(
        ScaleTrainJob.model_validate(patched(base_job(), {"metadata": {"namespace": namespace}}))
    ):
        _dry_run_create(client, child)


@pytest.mark.parametrize("case", REFUSED_AT_JOB_CREATION, ids=lambda case: case.name)
def test_the_server_refuses_the_job_of_each_spec_validate_refuses(case, client, dry_run_namespace, unchecked):
    job = unchecked(patched(patched(base_job(), case.patch), {"metadata": {"namespace": dry_run_namespace}}))
    with pytest.raises(ApiException) as refused:
        _dry_run_create(client, render_job(job))
    assert refused.value.status in (400, 422), refused.value.body  # refused as invalid, not for another reason
