"""The check of the rendered children against the Kubernetes schemas (validation/kube_schema.py): its vendored
schema is the pinned version's, it covers every keyword that schema uses, and a spec the API server would
refuse at Job creation ends as InvalidSpec in the operator, naming the field, instead of an exception
further on. The table of such specs is checked through `scaletrain validate` in test_validate.py."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import yaml

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.controller.decision import Observed
from scaletrain_operator.controller.handlers import decide_from
from scaletrain_operator.validation import zz_generated_kube_openapi as kube_openapi
from scaletrain_operator.validation.kube_schema import DEFINITION_RULES, schema_problems
from scaletrain_testing.cli import run_cli
from scaletrain_testing.jobs import base_job, patched
from scaletrain_testing.malformed import REFUSED_AT_JOB_CREATION
from scaletrain_testing.openapi_subset import KUBERNETES_VERSION, ROOTS, pinned_definitions
from scaletrain_trainer.contract.validation import ProblemsError

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
# The keywords schema_problems understands; a regenerated schema with another would be checked only in part.
HANDLED_KEYWORDS = {
    "$ref",
    "type",
    "enum",
    "format",
    "oneOf",
    "required",
    "properties",
    "additionalProperties",
    "items",
}


def test_the_vendored_schema_is_the_pinned_versions():
    assert (kube_openapi.KUBERNETES_VERSION, kube_openapi.ROOTS) == (KUBERNETES_VERSION, ROOTS)
    assert kube_openapi.DEFINITIONS == pinned_definitions(), "regenerate it: make generate"


def _keywords(schema):
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            if key == "properties":
                for field in value.values():
                    yield from _keywords(field)
            else:
                yield from _keywords(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _keywords(item)


def test_every_keyword_and_rule_of_the_schema_is_one_the_check_knows():
    assert set(_keywords(list(kube_openapi.DEFINITIONS.values()))) <= HANDLED_KEYWORDS
    assert set(DEFINITION_RULES) <= set(kube_openapi.DEFINITIONS)


def _problems(value, definition):
    return [str(problem) for problem in schema_problems(value, {"$ref": f"#/$defs/io.k8s.{definition}"})]


def test_structure_is_checked_as_the_server_decodes_it():
    """A null list item, a boolean for an int-or-string, an int32 out of range."""
    assert _problems({"name": "c", "image": "i", "env": [{"name": "A"}, None]}, "api.core.v1.Container") == [
        "env[1]: an empty (null) item; remove it or fill it in"
    ]
    assert _problems({"port": True}, "api.core.v1.HTTPGetAction") == [
        "port: must be a string or a whole number, not bool True"
    ]
    assert _problems({"containerPort": 2**31}, "api.core.v1.ContainerPort") == [
        "containerPort: 2147483648 is out of range for a int32"
    ]


def _invalid_spec_message(document) -> str:
    """What the operator decides for the stored `document`: Failed with InvalidSpec, without reading
    its children (an invalid spec has none to read)."""

    observed = []

    def observe(generation):  # a new job's: nothing created yet
        observed.append(generation)
        return Observed(services={}, jobs={}, pods=[])

    decision = decide_from(patched(document, {"metadata": {"generation": 1}}), observe, NOW)
    assert observed == []
    assert decision.status["phase"] == "Failed"
    (failed,) = decision.status["conditions"]
    assert failed["reason"] == "InvalidSpec" and [event.reason for event in decision.events] == ["InvalidSpec"]
    return decision.status["message"]


def test_a_sidecar_env_written_as_a_string_fails_the_job_as_invalid_instead_of_raising_in_render():
    """It used to pass parse_job and raise TypeError in render.generation_free on every reconcile."""
    sidecar = {"name": "log-shipper", "image": "fluent/fluent-bit:3.0", "env": "LOG_LEVEL=debug"}
    document = base_job(podTemplate={"spec": {"containers": [sidecar]}})
    message = _invalid_spec_message(document)
    assert "spec.podTemplate.spec.containers[0].env: must be a list, not str 'LOG_LEVEL=debug'" in message


def test_a_container_or_volume_name_given_twice_is_refused_where_it_repeats():
    """The merge keeps one item per name: the first sidecar would vanish, and later indices shift."""
    containers = [{"name": "a", "image": "busybox"}, {"name": "a", "image": "busybox"}, {"name": "b", "image": "b"}]
    with pytest.raises(ProblemsError) as refused:
        parse_job(base_job(podTemplate={"spec": {"initContainers": [containers[0]], "containers": containers[1:]}}))
    assert [str(problem) for problem in refused.value.problems] == [
        "spec.podTemplate.spec.containers[0].name: 'a' is used twice; names must be unique"
    ]
    volume = {"name": "data", "emptyDir": {}}
    with pytest.raises(ProblemsError, match=r"podTemplate.spec.volumes\[1\].name: 'data' is used twice"):
        parse_job(base_job(podTemplate={"spec": {"volumes": [volume, volume]}}))
    parse_job(base_job(podTemplate={"spec": {"containers": [{"name": "trainer", "env": []}]}}))  # merges, not twice


PORT_NAMES = [("metrics", True), ("h2c", True), ("1-2", False), ("80", False), ("a--b", False),
              ("fifteen-letters", True), ("sixteen-letters1", False)]  # fmt: skip


@pytest.mark.parametrize(("name", "valid"), PORT_NAMES)
def test_a_port_name_is_an_iana_service_name_with_a_letter(name, valid):
    sidecar = {"name": "exporter", "image": "exporter:1", "ports": [{"name": name, "containerPort": 9100}]}
    document = base_job(podTemplate={"spec": {"containers": [sidecar]}})
    if valid:
        parse_job(document)
    else:
        with pytest.raises(ProblemsError, match=r"containers\[0\].ports\[0\].name: .* must be an IANA service name"):
            parse_job(document)


def test_a_null_resource_amount_is_taken_as_not_given():
    """The API server reads a null quantity as zero; it once became the message "spec: None"."""
    trainer = {"name": "trainer", "resources": {"limits": {"memory": None}, "requests": {"cpu": "1"}}}
    parse_job(base_job(podTemplate={"spec": {"containers": [trainer]}}))


@pytest.mark.parametrize("case", REFUSED_AT_JOB_CREATION, ids=lambda case: case.name)
def test_each_spec_the_server_would_refuse_at_job_creation_is_invalid_to_the_operator(case):
    message = _invalid_spec_message(patched(base_job(), case.patch))
    assert f"{case.field_path}: " in message and case.message_fragment in message


def test_a_namespace_that_is_not_a_dns_label_is_refused_at_metadata_namespace():
    document = patched(base_job(), {"metadata": {"namespace": "Team_A"}})
    result = run_cli("validate", "-", stdin=yaml.safe_dump(document))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "  metadata.namespace: 'Team_A' is not a namespace name (a DNS label: a-z, 0-9 and -)" in result.stderr
    assert result.stderr.count("metadata.namespace") == 1  # once, not once per child


def test_a_problem_in_the_trainer_entry_of_the_template_is_at_the_template_and_one_in_spec_env_at_spec_env():
    trainer = {"name": "trainer", "ports": [{"containerPort": 8080, "protocol": "HTTP"}]}
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "kee": "token"}}}
    with pytest.raises(ProblemsError) as refused:
        parse_job(base_job(podTemplate={"spec": {"containers": [trainer]}}, env=[secret]))
    assert sorted(map(str, refused.value.problems)) == [
        "spec.env[0].valueFrom.secretKeyRef.kee: unknown field; did you mean key?",
        "spec.env[0].valueFrom.secretKeyRef.key: required field is missing",
        "spec.podTemplate.spec.containers[0].ports[0].protocol: 'HTTP' must be TCP, UDP or SCTP",
    ]


def test_what_the_server_accepts_passes():
    """A sidecar with its own env, ports, resources and a mounted volume; affinity, tolerations, env
    from a Secret, a GPU job's taint toleration."""
    sidecar = {
        "name": "log-shipper",
        "image": "fluent/fluent-bit:3.0",
        "env": [{"name": "weird.name-1", "value": "x"}],
        "ports": [{"name": "http-metrics", "containerPort": 2020}],
        "resources": {"requests": {"cpu": 0.5, "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": "logs", "mountPath": "/logs"}],
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu.mem", "operator": "Gt", "values": ["40"]}]}]
            }
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
            ]
        },
    }
    job = parse_job(
        base_job(
            podTemplate={"spec": {"containers": [sidecar], "volumes": [{"name": "logs", "emptyDir": {}}]}},
            affinity=affinity,
            tolerations=[{"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}],
            env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}],
            gpusPerNode=1,
        )
    )
    assert job.spec.pod_template["spec"]["containers"][0]["name"] == "log-shipper"
