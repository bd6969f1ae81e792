"""The RBAC table (scaletrain_operator.controller.rbac), enforced by the real authorizer.

The operator runs as its Deployment runs it (`scaletrain-operator` with the chart's arguments and
peering), authenticated as the chart's ServiceAccount, through a lifecycle that needs every
permission: create, run, fail and restart a gang, succeed, expire by TTL, suspend. The API server's
audit log then shows that every request was allowed and every permission of the table was used; and
a Role missing one rule makes that step fail where a user sees it.
"""

from __future__ import annotations

import pytest

from scaletrain_operator.controller import rbac
from scaletrain_testing.chart import of_kind
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import (
    PROGRESS_EACH_READ,
    Team,
    install_operator,
    install_watching,
    operator_process,
)
from scaletrain_testing.timeouts import CONTROLLERS_REACTION_S, OPERATOR_REACTION_S
from scaletrain_testing.waiting import wait_until

QUIET = (*PROGRESS_EACH_READ, "--liveness-port", "0", "--metrics-port", "0")


def run_every_kind_of_change(team: Team) -> None:
    # Queued where no Kueue admits it: housekeeping asks Kueue's Workloads why, each pass (here: no Kueue).
    team.submit("queued", queueName="nowhere")
    team.submit("lifecycle", maxRestarts=1, ttlSecondsAfterFinished=0)
    policy = wait_until(
        lambda: team.kube.get("networkpolicies", team.namespace, "lifecycle"),
        OPERATOR_REACTION_S,
        "the NetworkPolicy of lifecycle",
    )
    assert policy["spec"]["podSelector"] == {"matchLabels": {"scaletrain.io/job-name": "lifecycle"}}
    pods = team.start_pods("lifecycle-g0")
    team.wait_phase("lifecycle", "Running")
    team.fail_pod(pods[1], exit_code=137)  # gang restart: delete g0, create g1 (and the policy: it exists)
    team.start_pods("lifecycle-g1", phase="Succeeded")
    wait_until(lambda: team.stj("lifecycle") is None, OPERATOR_REACTION_S, "the TTL to delete lifecycle")

    team.submit("paused")
    team.start_pods("paused-g0")
    team.wait_phase("paused", "Running")
    team.patch_stj("paused", {"spec": {"suspend": True}})  # patch the Job
    team.wait_phase("paused", "Suspended")

    # A gang of another size: the job's Workload is made again (list workloads, delete, create).
    team.submit("resized")
    first = wait_until(lambda: team.children("resized", "workloads"), OPERATOR_REACTION_S, "resized's Workload")
    team.patch_stj("resized", {"spec": {"nodes": 1}})

    def replaced() -> list[dict]:
        return [w for w in team.children("resized", "workloads") if w["metadata"]["uid"] != first[0]["metadata"]["uid"]]

    (workload,) = wait_until(replaced, OPERATOR_REACTION_S, "resized's Workload for a gang of 1")
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"] == 1

    # A quota the Job controller cannot create pods under: its FailedCreate Events are read (list events).
    no_pods = {"hard": {"pods": "0"}}
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"}, "spec": no_pods}
    team.kube.create("resourcequotas", quota, team.namespace)
    counted = lambda: team.kube.get("resourcequotas", team.namespace, "no-pods").get("status", {}).get("hard")  # noqa: E731
    # Once its controller has counted, the quota is enforced.
    wait_until(counted, CONTROLLERS_REACTION_S, "the quota controller to count no-pods")
    team.submit("refused")
    refused = team.wait_condition("refused", "PodCreationFailed")
    assert refused["reason"] == "FailedCreate" and "forbidden" in refused["message"]


@pytest.mark.parametrize("clusterwide", [False, True], ids=["namespaced", "clusterwide"])
def test_the_rbac_table_allows_exactly_the_calls_the_operator_makes(clusterwide, control_plane, namespace, tmp_path):
    values = {"peering": {"name": f"{namespace}-peering"}, "networkPolicy": {"enabled": True}}
    values |= {} if clusterwide else {"watchNamespaces": [namespace]}
    install = install_operator(control_plane, values, f"{namespace}-operator", tmp_path)
    mark = control_plane.audit.mark()
    with operator_process(install, *QUIET):
        run_every_kind_of_change(Team(Kube(control_plane.api_client()), namespace))
    # Its own namespace and the cluster scope: a cluster-wide operator also sees other tests' jobs.
    requests = [r for r in control_plane.audit.requests(install.user, after=mark) if r.namespace in (namespace, None)]

    assert [r for r in requests if r.code == 403] == [], "calls the chart's RBAC forbids"
    table = rbac.permissions(clusterwide=clusterwide, peering=True, network_policies=True)
    granted = {(p.qualified, verb) for p in table for verb in p.verbs}
    used = {(r.resource, r.verb) for r in requests}
    assert used - granted == set(), "calls outside the table (allowed by some other rule?)"
    assert granted - used == set(), "permissions the operator never uses"
    if not clusterwide:  # a Role in the watched namespace is enough
        assert {r.namespace for r in requests} == {namespace}


def test_a_missing_rule_fails_its_step_visibly(control_plane, namespace, tmp_path):
    """Without `create jobs`, the ScaleTrainJob gets its Service but no Job, and the operator's log and a
    Warning Event on the job name the forbidden call: a chart whose table lost a rule fails at that step,
    not silently."""

    def drop_create_jobs(objects):
        (role,) = [role for role in of_kind(objects, "Role") if role["metadata"]["namespace"] == namespace]
        for rule in role["rules"]:
            if rule["resources"] == ["jobs"]:
                rule["verbs"] = [verb for verb in rule["verbs"] if verb != "create"]

    install = install_watching(control_plane, namespace, tmp_path, edit=drop_create_jobs)
    team = Team(Kube(control_plane.api_client()), namespace)
    mark = control_plane.audit.mark()
    with operator_process(install, *QUIET) as operator:
        team.submit("unlucky")
        wait_until(lambda: team.children("unlucky", "services"), OPERATOR_REACTION_S, "the Services of unlucky")
        forbidden = wait_until(
            lambda: [r for r in control_plane.audit.requests(install.user, after=mark) if r.code == 403],
            OPERATOR_REACTION_S,
            "a forbidden request in the audit log",
        )
        wait_until(
            lambda: "jobs.batch is forbidden" in operator.log_path.read_text(),
            OPERATOR_REACTION_S,
            "the operator to log the forbidden create",
        )
        # Retried with backoff (RBAC may be fixed): after the first failures, the job's Events say why.
        retrying = wait_until(
            lambda: [message for _, reason, message in team.events("unlucky") if reason == "ApiRetrying"],
            OPERATOR_REACTION_S,
            "an ApiRetrying Event of unlucky",
        )
    assert "failed 3 times in a row" in retrying[0] and "jobs.batch is forbidden" in retrying[0]
    assert {(r.verb, r.resource) for r in forbidden} == {("create", "jobs.batch")}
    assert team.children("unlucky", "jobs") == []
