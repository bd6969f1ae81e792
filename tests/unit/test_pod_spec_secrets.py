"""A container's env from Secrets (secretKeyRef), where the node has a cluster to read them from: the kubelet
stand-in of the tests passes resolve_env a lookup; run-local passes none, and refuses them (test_pod_executor)."""

from __future__ import annotations

import pytest

from scaletrain_operator.local.pod_spec import PodFields, resolve_env
from scaletrain_trainer.contract.validation import ProblemsError

FIELDS = PodFields(pod_ip="10.244.0.7", host_ip="10.244.0.1", node_name="node-a")
CONTAINER = ("spec", "containers", 0)
POD = {"metadata": {"name": "trainer-0", "namespace": "team-a"}, "spec": {"containers": [{"name": "main"}]}}
SECRETS = {("s3-credentials", "access-key"): "AKIA-$(NOT_EXPANDED)", ("s3-credentials", "secret-key"): "s3cret"}


def from_secret(variable: str, name: str, key: str, **reference) -> dict:
    return {"name": variable, "valueFrom": {"secretKeyRef": {"name": name, "key": key, **reference}}}


def lookup(name: str, key: str) -> str | None:
    return SECRETS.get((name, key))


def test_a_secrets_key_is_the_variables_value_as_it_is_and_later_variables_expand_it():
    env = [
        from_secret("AWS_ACCESS_KEY_ID", "s3-credentials", "access-key"),
        from_secret("AWS_SECRET_ACCESS_KEY", "s3-credentials", "secret-key"),
        {"name": "BOTH", "value": "$(AWS_ACCESS_KEY_ID):$(AWS_SECRET_ACCESS_KEY)"},
    ]
    assert resolve_env(POD, env, FIELDS, CONTAINER, lookup) == {
        "AWS_ACCESS_KEY_ID": "AKIA-$(NOT_EXPANDED)",
        "AWS_SECRET_ACCESS_KEY": "s3cret",
        "BOTH": "AKIA-$(NOT_EXPANDED):s3cret",
    }


@pytest.mark.parametrize(("name", "key"), [("s3-credentials", "no-such-key"), ("no-such-secret", "access-key")])
def test_a_missing_secret_or_key_is_an_error_naming_the_variable(name, key):
    var = from_secret("AWS_ACCESS_KEY_ID", name, key)
    with pytest.raises(ProblemsError) as error:
        resolve_env(POD, [var], FIELDS, CONTAINER, lookup)
    (problem,) = error.value.problems
    assert str(problem).startswith("spec.containers[0].env[0].valueFrom.secretKeyRef")
    assert "AWS_ACCESS_KEY_ID" in str(problem) and repr(name) in str(problem) and repr(key) in str(problem)


def test_an_optional_reference_to_what_is_missing_leaves_the_variable_unset():
    env = [from_secret("TOKEN", "no-such-secret", "k", optional=True), {"name": "AFTER", "value": "[$(TOKEN)]"}]
    assert resolve_env(POD, env, FIELDS, CONTAINER, lookup) == {"AFTER": "[$(TOKEN)]"}


def test_an_optional_reference_to_what_is_there_is_resolved():
    env = [from_secret("TOKEN", "s3-credentials", "secret-key", optional=True)]
    assert resolve_env(POD, env, FIELDS, CONTAINER, lookup) == {"TOKEN": "s3cret"}


def test_config_maps_stay_refused_with_a_secret_lookup():
    var = {"name": "SETTING", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    with pytest.raises(ProblemsError, match="SETTING comes from a configMapKeyRef"):
        resolve_env(POD, [var], FIELDS, CONTAINER, lookup)
