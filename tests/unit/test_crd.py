"""The generated CRD: fresh, and carrying the names, bounds, defaults and rules the operator relies on.
Whether a real API server accepts it, and what it then accepts and refuses, is checked against one in
tests/integration/test_crd_server.py."""

from __future__ import annotations

from scaletrain_operator.api.crd import crd_yaml
from scaletrain_testing.cli import run_cli
from scaletrain_testing.jobs import REPO
from scaletrain_testing.kube_schema import fields_without_description


def test_checked_in_crd_is_not_stale():
    generated = run_cli("crd").stdout
    assert generated == crd_yaml()
    for path in ("crds/scaletrainjob.yaml", "charts/scaletrain/crds/scaletrainjob.yaml"):
        assert (REPO / path).read_text() == generated, f"{path} is stale: run `make generate` and commit the result"


def test_crd_names_scope_and_status_subresource(crd):
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "scaletrainjobs.scaletrain.io"
    assert spec["group"] == "scaletrain.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "ScaleTrainJob" and spec["names"]["plural"] == "scaletrainjobs"
    assert spec["names"]["shortNames"] == ["stj"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"]["status"] == {}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Nodes": ".status.nodes.current",
        "Desired": ".spec.nodes",
        "Step": ".status.progress.step",
        "Loss": ".status.progress.loss",
        "Eval-Loss": ".status.progress.evalLoss",
        "Tokens/s": ".status.progress.tokensPerSecond",
        "TFLOPS/Device": ".status.progress.tflopsPerDevice",
        "MFU": ".status.progress.mfu",
        "ETA-Seconds": ".status.progress.etaSeconds",
        "Progress-%": ".status.progress.progressPercentage",
        "Restarts": ".status.restarts",
        "Age": ".metadata.creationTimestamp",
    }


def test_eval_loss_throughput_and_eta_columns_show_only_in_kubectls_wide_output(crd):
    (version,) = crd["spec"]["versions"]
    wide = {c["name"]: c["type"] for c in version["additionalPrinterColumns"] if c.get("priority", 0) > 0}
    assert set(wide) == {"Eval-Loss", "Tokens/s", "TFLOPS/Device", "MFU", "ETA-Seconds", "Progress-%"}
    assert set(wide.values()) == {"number"}


def test_schema_has_bounds_enums_required_and_defaults(crd_schema):
    spec = crd_schema["properties"]["spec"]
    training = spec["properties"]["training"]
    assert set(spec["required"]) == {"image"}  # training: unless command or args is set (a CEL rule)
    assert set(training["required"]) == {"globalBatchSize", "microBatchSize"}
    assert spec["properties"]["nodes"].items() >= {"minimum": 1, "default": 1, "type": "integer"}.items()
    assert spec["properties"]["gpusPerNode"]["minimum"] == 0
    assert spec["properties"]["backend"]["enum"] == ["auto", "nccl", "gloo"]
    assert training["properties"]["precision"]["enum"] == ["auto", "bf16", "fp16", "fp32"]
    assert training["properties"]["strategy"]["enum"] == ["auto", "ddp", "fsdp"]
    assert spec["properties"]["shmSize"]["default"] == "2Gi"
    assert spec["properties"]["maxRestarts"]["default"] == 3
    # Nested objects default to their fields' defaults, so that the API server fills those in too (and
    # checks its CEL rules against a whole object: `{}` broke `width % heads` with "no such key").
    assert training["properties"]["checkpoint"]["default"] == {"everySteps": 100, "keep": 3, "async": False}
    assert (
        training["properties"]["model"]["default"]["width"] % training["properties"]["model"]["default"]["heads"] == 0
    )
    assert training["properties"]["checkpoint"]["properties"]["keep"]["default"] == 3
    # But an object that is off unless given (default None) gets no default: the API server would turn it on.
    failure_policy = spec["properties"]["failurePolicy"]
    assert failure_policy["default"] == {} and "default" not in failure_policy["properties"]["excludeNodes"]
    assert "default" not in training["properties"]["eval"]  # no evaluation unless asked for
    status = crd_schema["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]
    condition = status["conditions"]["items"]
    assert set(condition["required"]) == {"type", "status", "lastTransitionTime", "reason"}
    assert set(status["progress"]["properties"]) == {
        "step",
        "maxSteps",
        "loss",
        "evalLoss",
        "lossFinite",
        "samplesPerSecond",
        "tokensPerSecond",
        "tflopsPerDevice",
        "mfu",
        "peakMemoryBytes",
        "etaSeconds",
        "updatedAt",
        "staleAfter",
        "checkpointsSetAside",
        "resumedFromStep",
        "checkpointStep",
        "generation",
        "readAt",
        "progressPercentage",
        "metrics",
        "reportedAt",
    }


def test_cel_rule_for_batch_divisibility_is_present(crd_schema):
    rules = crd_schema["properties"]["spec"]["x-kubernetes-validations"]
    assert any("globalBatchSize %" in r["rule"] and r["fieldPath"] == ".training.globalBatchSize" for r in rules)


def test_every_spec_and_status_field_has_a_description_for_kubectl_explain(crd_schema):
    """At every depth, the training config the spec embeds (trainer/scaletrain_trainer/config.py) included:
    a field's description is its pydantic Field's, else its model's docstring."""
    undescribed = []
    for name in ("spec", "status"):
        schema = crd_schema["properties"][name]
        undescribed += [name] if "description" not in schema else []
        undescribed += fields_without_description(schema, name)
    assert undescribed == []


def test_the_scale_subresource_reads_and_writes_fields_the_schema_has(crd):
    """kubectl scale (and an autoscaler) sets spec.nodes and reads the current gang's size and the pods'
    selector: paths into the schema, of the types the API server's scale subresource needs."""
    (version,) = crd["spec"]["versions"]
    scale, schema = version["subresources"]["scale"], version["schema"]["openAPIV3Schema"]

    def type_at(path):
        node = schema
        for part in path.lstrip(".").split("."):
            node = node["properties"][part]
        return node["type"]

    assert scale["specReplicasPath"] == ".spec.nodes" and type_at(".spec.nodes") == "integer"
    assert type_at(scale["statusReplicasPath"]) == "integer"
    assert type_at(scale["labelSelectorPath"]) in ("string", ["string", "null"])
