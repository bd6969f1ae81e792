"""The generated CRD on a real API server: it installs (structural schema, CEL cost budget), `kubectl
explain` documents it, the examples pass, and of the malformed-spec table the server refuses exactly the
cases the CRD layer owns, at their field, while the operator-only cases get through to the operator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import yaml

from scaletrain_operator.api.job import parse_job
from scaletrain_testing.control_plane import KUBERNETES_VERSION
from scaletrain_testing.jobs import EXAMPLES, REPO, base_job, load_yaml, patched
from scaletrain_testing.malformed import REFUSED_BY_THE_CRD, REFUSED_ONLY_BY_THE_OPERATOR
from scaletrain_testing.timeouts import CONTROLLERS_REACTION_S
from scaletrain_testing.waiting import wait_until

GROUP, VERSION, PLURAL = "scaletrain.io", "v1alpha1", "scaletrainjobs"
CRD_NAME = f"{PLURAL}.{GROUP}"


@pytest.fixture(scope="module")
def installed_crd(control_plane) -> str:
    """`kubectl apply` the checked-in CRD and wait until it is served and in kubectl's discovery (which
    follows a moment later); returns kubectl's output."""
    applied = control_plane.kubectl("apply", "-f", str(REPO / "crds" / "scaletrainjob.yaml"), check=False)
    if applied.returncode != 0:
        pytest.fail(
            f"crds/scaletrainjob.yaml does not install on kube-apiserver {KUBERNETES_VERSION}:\n{applied.stderr}"
        )
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=30s", f"crd/{CRD_NAME}")

    def discovered() -> bool:
        listed = control_plane.kubectl("api-resources", f"--api-group={GROUP}", "-o", "name").stdout
        return CRD_NAME in listed.split()

    wait_until(discovered, CONTROLLERS_REACTION_S, f"{CRD_NAME} in API discovery")
    return applied.stdout


@pytest.fixture
def custom_objects(control_plane, installed_crd) -> Iterator[kubernetes.client.CustomObjectsApi]:
    with control_plane.api_client() as client:
        yield kubernetes.client.CustomObjectsApi(client)


def _dry_run_create(custom_objects, namespace: str, document: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Create without storing: the server validates, defaults and admits as for a real create."""
    body = patched(document, {"metadata": {"namespace": namespace}})
    return custom_objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body, dry_run="All", **options
    )


def _rejection(error: kubernetes.client.ApiException) -> str:
    return json.loads(error.body)["message"]


def test_the_crd_installs_and_is_established(installed_crd, control_plane):
    assert f"customresourcedefinition.apiextensions.k8s.io/{CRD_NAME}" in installed_crd
    crd = json.loads(control_plane.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
    assert conditions.get("NonStructuralSchema", "False") == "False"


@pytest.fixture(scope="module")
def published_schema(control_plane, installed_crd) -> dict[str, Any]:
    """The ScaleTrainJob schema as the server publishes it (OpenAPI v3), which `kubectl explain` reads.
    It appears a moment after the CRD is Established."""
    fetched = []

    def published() -> bool:
        result = control_plane.kubectl("get", "--raw", f"/openapi/v3/apis/{GROUP}/{VERSION}", check=False)
        fetched.append(result.stdout)
        return result.returncode == 0

    wait_until(published, CONTROLLERS_REACTION_S, f"the OpenAPI v3 document of {GROUP}/{VERSION}")
    return json.loads(fetched[-1])["components"]["schemas"][f"io.scaletrain.{VERSION}.ScaleTrainJob"]


def test_kubectl_explain_documents_the_training_spec(control_plane, published_schema):
    explained = []

    def explain() -> bool:  # kubectl refreshes its cached OpenAPI index after a miss
        result = control_plane.kubectl("explain", "stj.spec.training", check=False)
        explained.append(result)
        return result.returncode == 0

    wait_until(explain, CONTROLLERS_REACTION_S, "`kubectl explain stj.spec.training`")
    output = explained[-1].stdout
    assert "KIND:       ScaleTrainJob" in output and "FIELD: training <Object>" in output
    for field in ("globalBatchSize", "microBatchSize", "precision", "strategy", "checkpoint"):
        assert f"\n  {field}\t" in output, field


def _fields_without_description(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """The named fields (object properties, at any depth) whose schema has no description."""
    for name, field in schema.get("properties", {}).items():
        field_path = f"{path}.{name}" if path else name
        if not field.get("description") and "allOf" not in field:  # allOf: a $ref to a documented type
            yield field_path
        yield from _fields_without_description(field, field_path)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            yield from _fields_without_description(schema[key], path + suffix)


def test_every_field_has_a_description(published_schema):
    """What `kubectl explain` shows, where metadata is the documented ObjectMeta."""
    undocumented = list(_fields_without_description(published_schema))
    assert not undocumented, f"{len(undocumented)} fields without a description: {', '.join(undocumented)}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_a_server_side_dry_run(path, control_plane, installed_crd, namespace):
    """In the test's namespace rather than the example's own (which may not exist here)."""
    documents = [patched(d, {"metadata": {"namespace": namespace}}) for d in yaml.safe_load_all(path.read_text())]
    result = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(documents))
    assert result.stdout.count("(server dry run)") == len(documents), result.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_server_defaults_match_pydantic_defaults(path, custom_objects, namespace):
    """What `kubectl get stj -o yaml` shows after defaulting is what the operator parses."""
    document = load_yaml(path)
    defaulted = _dry_run_create(custom_objects, namespace, document)
    parsed = parse_job(document).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert _without_empty(defaulted["spec"]) == _without_empty(parsed["spec"])


def _without_empty(value):
    """Absent and empty collections mean the same to the operator; the CRD does not default them."""
    if isinstance(value, dict):
        cleaned = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in ({}, [])}
    return value


@pytest.mark.parametrize("case", REFUSED_BY_THE_CRD, ids=lambda case: case.name)
def test_the_server_rejects_each_crd_layer_case_at_its_field(case, custom_objects, dry_run_namespace):
    """Strict field validation, as `kubectl apply` uses by default, so that unknown fields are errors."""
    with pytest.raises(kubernetes.client.ApiException) as rejected:
        _dry_run_create(custom_objects, dry_run_namespace, patched(base_job(), case.patch), field_validation="Strict")
    assert rejected.value.status in (400, 422)
    assert case.field_path in _rejection(rejected.value)


@pytest.mark.parametrize("case", REFUSED_ONLY_BY_THE_OPERATOR, ids=lambda case: case.name)
def test_the_server_accepts_each_operator_only_case(case, custom_objects, dry_run_namespace):
    _dry_run_create(custom_objects, dry_run_namespace, patched(base_job(), case.patch), field_validation="Strict")


def test_a_typo_is_rejected_by_kubectl_apply(control_plane, installed_crd, namespace):
    """kubectl apply asks for strict field validation by default (--validate=strict)."""
    document = patched(base_job(), {"metadata": {"namespace": namespace}, "spec": {"nodez": 2}})
    result = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(document), check=False)
    assert result.returncode != 0
    assert 'strict decoding error: unknown field "spec.nodez"' in result.stderr


def test_without_strict_validation_a_typo_is_dropped_with_a_warning(control_plane, installed_crd, namespace):
    """What a client that does not ask for strict validation gets (the API's default is Warn): the server
    prunes the unknown field and stores the object without it; only a response header says so."""
    document = patched(base_job(), {"metadata": {"namespace": namespace}, "spec": {"nodez": 7}})
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "--validate=warn", "-o", "json", "-f", "-", stdin=yaml.safe_dump(document)
    )
    assert 'Warning: unknown field "spec.nodez"' in result.stderr
    stored = json.loads(result.stdout)
    assert "nodez" not in stored["spec"] and stored["spec"]["nodes"] == 2
