"""Specs that one tenant can store through the real API server, and that must not break the operator for
the others: free-form fields (affinity, podTemplate, model options) nested thousands of levels deep. The
API server keeps such a subtree (the CRD preserves unknown fields there, which no schema bound or CEL rule
reaches); the operator must report the job InvalidSpec and go on serving every other namespace."""

from __future__ import annotations

import json
import secrets

import pytest

from scaletrain_testing.jobs import base_job
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import QUIET, Team, install_operator, operator_process
from scaletrain_testing.timeouts import OPERATOR_REACTION_S
from scaletrain_testing.waiting import wait_until

NESTING = 2_000  # levels; Python's json gives up at 1,000, the API server at 10,000
DEEP = "__deep__"  # where the deep value is spliced into a job's JSON


def nested_json(levels: int) -> str:
    """`{"a": {"a": … 1 …}}`, `levels` objects deep, as text: the tests' own json would refuse to write it."""
    return '{"a": ' * levels + "1" + "}" * levels


def deep_job_text(name: str, namespace: str, **spec) -> str:
    """A job whose spec holds the value DEEP at some field, with that value `NESTING` levels deep."""
    document = base_job(**spec) | {"metadata": {"name": name, "namespace": namespace}}
    return json.dumps(document).replace(json.dumps(DEEP), nested_json(NESTING))


@pytest.fixture(scope="module")
def tenants(control_plane, tmp_path_factory):
    """One operator, as the chart installs it by default (cluster-wide: one watch of every namespace),
    and two tenants' namespaces."""
    hostile, victim = (control_plane.create_namespace(f"{who}-{secrets.token_hex(3)}") for who in ("hostile", "victim"))
    values = {"peering": {"name": f"{hostile}-peering"}}
    install = install_operator(control_plane, values, f"{hostile}-operator", tmp_path_factory.mktemp("operator"))
    with operator_process(install, *QUIET) as operator:
        kube = Kube(control_plane.api_client())
        yield operator, Team(kube, hostile), Team(kube, victim)


def phase_and_message(control_plane, team: Team, name: str) -> tuple[str, str]:
    """The job's phase and message, read without decoding its deep spec."""
    path = "{.status.phase}{'\\n'}{.status.message}"
    output = control_plane.kubectl("get", "stj", name, "-n", team.namespace, "-o", f"jsonpath={path}").stdout
    phase, _, message = output.partition("\n")
    return phase, message


@pytest.mark.parametrize(
    ("field", "spec"),
    [
        ("spec.affinity", {"affinity": DEEP}),
        ("spec.podTemplate", {"podTemplate": {"containers": [{"name": "sidecar", "env": DEEP}]}}),
        ("spec.training", {"training": {"model": {"name": "my_models:build", "options": {"layers": DEEP}}}}),
    ],
)
def test_a_deeply_nested_spec_is_invalid_and_the_operator_serves_the_other_tenants(tenants, control_plane, field, spec):
    operator, hostile, victim = tenants
    name = f"deep-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "-f", "-", stdin=deep_job_text(name, hostile.namespace, **spec))

    victim.submit(name)  # submitted after the deep one: served only if the operator still watches
    wait_until(lambda: victim.children(name, "jobs"), OPERATOR_REACTION_S, f"the Job of the victim's {name}")

    def invalid() -> str | None:
        phase, message = phase_and_message(control_plane, hostile, name)
        return message if phase == "Failed" else None

    message = wait_until(invalid, OPERATOR_REACTION_S, f"the hostile {name} to fail")
    assert message.startswith(f"invalid spec: {field}: nested more than 32 levels deep")
    assert operator.poll() is None, "the operator exited"
    assert hostile.children(name, "jobs") == []
