"""run-local's --claim checks the claim against the job's pods, whose volumes come from spec.volumes and the
podTemplate's alike."""

from __future__ import annotations

import pytest

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.cli import mounted_claims
from scaletrain_testing.jobs import base_job

pytestmark = pytest.mark.unit


def test_the_claims_of_spec_volumes_and_of_the_pod_template_are_both_mounted():
    job = base_job(
        volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}],
        volumeMounts=[{"name": "ckpt", "mountPath": "/ckpt"}],
        podTemplate={"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}]}},
    )
    assert mounted_claims(parse_job(job)) == {"checkpoints", "datasets"}
