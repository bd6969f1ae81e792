"""The generated CRD: fresh, structural, a valid apiextensions.k8s.io/v1 object, and agreeing
with the pydantic models on the examples."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from scaletrain_operator.api.crd import crd_yaml
from scaletrain_operator.api.models import parse_job
from support.cli import run_cli
from support.jobs import EXAMPLES, REPO, load_yaml
from support.kube_schema import apply_defaults, cel_failures, schema_errors, structural_violations


def test_checked_in_crd_is_not_stale():
    generated = run_cli("crd").stdout
    assert generated == crd_yaml()
    for path in ("crds/scaletrainjob.yaml", "charts/scaletrain/crds/scaletrainjob.yaml"):
        assert (REPO / path).read_text() == generated, f"{path} is stale: run `make generate` and commit the result"


def test_crd_validates_as_apiextensions_v1(crd):
    assert kubernetes_validate.validate(crd, "1.33", strict=True)


def test_crd_names_scope_and_status_subresource(crd):
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "scaletrainjobs.scaletrain.io"
    assert spec["group"] == "scaletrain.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "ScaleTrainJob" and spec["names"]["plural"] == "scaletrainjobs"
    assert spec["names"]["shortNames"] == ["stj"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Nodes": ".spec.nodes",
        "Step": ".status.progress.step",
        "Loss": ".status.progress.loss",
        "Restarts": ".status.restarts",
        "Age": ".metadata.creationTimestamp",
    }


def test_schema_is_structural(crd_schema):
    assert list(structural_violations(crd_schema)) == []


def test_schema_has_bounds_enums_required_and_defaults(crd_schema):
    spec = crd_schema["properties"]["spec"]
    training = spec["properties"]["training"]
    assert set(spec["required"]) == {"image", "training"}
    assert set(training["required"]) == {"globalBatchSize", "microBatchSize"}
    assert spec["properties"]["nodes"].items() >= {"minimum": 1, "default": 1, "type": "integer"}.items()
    assert spec["properties"]["gpusPerNode"]["minimum"] == 0
    assert spec["properties"]["backend"]["enum"] == ["auto", "nccl", "gloo"]
    assert training["properties"]["precision"]["enum"] == ["auto", "bf16", "fp16", "fp32"]
    assert training["properties"]["strategy"]["enum"] == ["auto", "ddp", "fsdp"]
    assert spec["properties"]["shmSize"]["default"] == "2Gi"
    assert spec["properties"]["maxRestarts"]["default"] == 3
    # Nested objects default to {} so that the API server fills in their own field defaults.
    assert training["properties"]["checkpoint"]["default"] == {}
    assert training["properties"]["checkpoint"]["properties"]["keep"]["default"] == 3
    status = crd_schema["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]
    condition = status["conditions"]["items"]
    assert set(condition["required"]) == {"type", "status", "lastTransitionTime", "reason"}
    assert set(status["progress"]["properties"]) == {
        "step",
        "maxSteps",
        "loss",
        "samplesPerSecond",
        "etaSeconds",
        "updatedAt",
    }


def test_cel_rule_for_batch_divisibility_is_present(crd_schema):
    rules = crd_schema["properties"]["spec"]["x-kubernetes-validations"]
    assert any("globalBatchSize %" in r["rule"] and r["fieldPath"] == ".training.globalBatchSize" for r in rules)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_crd_schema_cel_and_pydantic(path, crd_schema):
    for document in yaml.safe_load_all(path.read_text()):
        assert schema_errors(crd_schema, document) == []
        assert cel_failures(crd_schema, apply_defaults(crd_schema, document)) == []
        parse_job(document)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_api_server_defaults_match_pydantic_defaults(path, crd_schema):
    """What `kubectl get stj -o yaml` shows after defaulting is what the operator parses."""
    document = load_yaml(path)
    defaulted = apply_defaults(crd_schema, document)
    parsed = parse_job(document).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert _without_empty(defaulted["spec"]) == _without_empty(parsed["spec"])


def _without_empty(value):
    """Absent and empty collections mean the same to the operator; the CRD does not default them."""
    if isinstance(value, dict):
        cleaned = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in ({}, [])}
    return value
