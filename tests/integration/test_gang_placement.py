"""Gang placement by the real kube-scheduler, through the Workload API (policy/placement.py and render/workload.py).

The tests' control plane turns the API's feature gates on; a second control plane without them is a
cluster as most are today. Fake nodes (the kubelet stand-in) each fit exactly one pod of a gang, are
tainted so that no other test's pod lands on them, and run a stand-in command: placement is the point.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest

from scaletrain_operator.controller.cluster import Cluster
from scaletrain_operator.policy.placement import pod_group_name
from scaletrain_testing.control_plane import ControlPlane, unavailable_reason
from scaletrain_testing.gang_objects import decoy_workload
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kube import Kube
from scaletrain_testing.kubelet import FakeNode, Kubelet
from scaletrain_testing.operator_harness import QUIET, Team, install_watching, operator_process
from scaletrain_testing.timeouts import CONTROLLERS_REACTION_S, OPERATOR_REACTION_S
from scaletrain_testing.waiting import wait_until

BLOCK = "example.com/block"
TAINT = "example.com/gang-test"
HOLD_S = 5.0  # how long a gang that does not fit is watched for a pod bound anyway


def node(name: str, pool: str, block: str = "a") -> FakeNode:
    """A node with room for one pod of a gang (each asks for 1 cpu), only for this test's pods."""
    taint = {"key": TAINT, "value": pool, "effect": "NoSchedule"}
    return FakeNode(name, {TAINT: pool, BLOCK: block}, [taint], cpu="1500m", memory="4Gi")


def gang_job(team: Team, name: str, nodes: int, **spec) -> dict:
    """A gang of `nodes` pods of 1 cpu each on this test's nodes, running a stand-in command (or `spec`'s)."""
    toleration = {"key": TAINT, "operator": "Equal", "value": team.namespace, "effect": "NoSchedule"}
    pool = {"nodeSelector": {TAINT: team.namespace}, "tolerations": [toleration]}
    return team.submit(
        name,
        nodes=nodes,
        **{
            "command": ["sleep", "600"],
            "training": DELETE,
            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
            "shmSize": "64Mi",
            **pool,
            **spec,
        },
    )


def bound(team: Team, job_name: str) -> list[str]:
    """The nodes the pods of a gang's Job were bound to."""
    pods = team.kube.list("pods", team.namespace, f"job-name={job_name}")
    return [pod["spec"]["nodeName"] for pod in pods if pod["spec"].get("nodeName")]


def looked_at_by_the_scheduler(team: Team, job_name: str, pods: int) -> list[dict]:
    """The gang's pods once the scheduler has tried each (placed it, or said why not)."""
    listed = team.kube.list("pods", team.namespace, f"job-name={job_name}")
    tried = [p for p in listed if any(c["type"] == "PodScheduled" for c in p["status"].get("conditions") or ())]
    return tried if len(tried) == pods else []


def never_bound(team: Team, job_name: str) -> None:
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        assert bound(team, job_name) == [], "a pod of a gang that does not fit was bound"
        time.sleep(0.2)


@pytest.fixture
def team(control_plane, namespace, tmp_path) -> Iterator[Team]:
    install = install_watching(control_plane, namespace, tmp_path)
    with operator_process(install, *QUIET):
        yield Team(Kube(control_plane.api_client()), namespace)


def test_a_gang_that_does_not_fit_binds_no_pod_and_starts_whole_once_it_fits(control_plane, team, tmp_path):
    api = control_plane.api_client()
    with Kubelet(api, [node(f"{team.namespace}-1", team.namespace)], tmp_path / "k1", namespaces=[team.namespace]):
        gang_job(team, "whole", nodes=2)
        looked = wait_until(lambda: looked_at_by_the_scheduler(team, "whole-g0", 2), CONTROLLERS_REACTION_S,
                            "the scheduler to try both pods of whole")  # fmt: skip
        # The Job's PodGroup, of the job's Workload: named as the operator expects (foreign_pod_group).
        assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in looked} == {
            pod_group_name("whole", "gang-even")
        }
        (workload,) = team.children("whole", "workloads")
        assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"] == 2
        never_bound(team, "whole-g0")
        schedulable = team.wait_condition("whole", "Schedulable", status="False")
        assert "whole-g0" in schedulable["message"]

        # Without gang placement, the first pod takes the one node and holds it while the second waits.
        gang_job(team, "halves", nodes=2, scheduling={"gang": "none"})
        wait_until(lambda: looked_at_by_the_scheduler(team, "halves-g0", 2), CONTROLLERS_REACTION_S,
                   "the scheduler to try both pods of halves")  # fmt: skip
        assert len(bound(team, "halves-g0")) == 1
        team.kube.delete("stj", team.namespace, "halves")
        gone = lambda: team.kube.list("pods", team.namespace, "job-name=halves-g0") == []  # noqa: E731
        wait_until(gone, CONTROLLERS_REACTION_S, "the pods of halves to go")

        # Room for the whole gang: both pods are bound together, and the gang runs.
        with Kubelet(api, [node(f"{team.namespace}-2", team.namespace)], tmp_path / "k2", namespaces=[team.namespace]):
            team.wait_phase("whole", "Running", timeout_s=OPERATOR_REACTION_S + CONTROLLERS_REACTION_S)
            assert sorted(bound(team, "whole-g0")) == [f"{team.namespace}-1", f"{team.namespace}-2"]


def test_a_required_topology_keeps_the_gang_in_one_block_or_waits(control_plane, team, tmp_path):
    pool = team.namespace
    nodes = [node(f"{pool}-a1", pool, "a"), node(f"{pool}-b1", pool, "b"), node(f"{pool}-b2", pool, "b")]
    topology = {"topology": {"required": BLOCK}}
    with Kubelet(control_plane.api_client(), nodes, tmp_path / "kubelet", namespaces=[pool]):
        gang_job(team, "pair", nodes=2, placement=topology)
        team.wait_phase("pair", "Running", timeout_s=OPERATOR_REACTION_S + CONTROLLERS_REACTION_S)
        assert sorted(bound(team, "pair-g0")) == [f"{pool}-b1", f"{pool}-b2"]  # block a holds one pod only
        team.kube.delete("stj", team.namespace, "pair")

        # Three pods fit the three nodes, but no one block: the gang waits, and the job says why.
        wait_until(lambda: not bound(team, "pair-g0"), CONTROLLERS_REACTION_S, "pair's pods to go")
        gang_job(team, "trio", nodes=3, placement=topology)
        wait_until(lambda: looked_at_by_the_scheduler(team, "trio-g0", 3), CONTROLLERS_REACTION_S,
                   "the scheduler to try the pods of trio")  # fmt: skip
        never_bound(team, "trio-g0")
        schedulable = team.wait_condition("trio", "Schedulable", status="False")
        assert "trio-g0" in schedulable["message"]


# The last gang's pods checkpoint on their SIGTERM for up to this long (the grace period): for longer than
# the Job controller and the scheduler take to start the next gang, by far.
STOPPING_S = 120
# A gang whose rank 1 fails at once in generation 0, each pod otherwise running on through its SIGTERM.
FAILS_FIRST_THEN_LINGERS = (
    'trap "" TERM; if [ "$SCALETRAIN_GENERATION" = 0 ] && [ "$JOB_COMPLETION_INDEX" = 1 ]; then exit 3; fi; sleep 600'
)


def test_the_next_gang_is_placed_while_the_last_gangs_pods_still_stop(control_plane, team, tmp_path):
    """The last gang's PodGroup stays until its last pod is gone; the next gang gets one of its own at once
    (failed before: the PodGroup's name was taken, and the Job controller retried with its backoff)."""
    pool = team.namespace
    nodes = [node(f"{pool}-{index}", pool) for index in range(4)]  # room for both gangs at once
    with Kubelet(control_plane.api_client(), nodes, tmp_path / "kubelet", namespaces=[pool]):
        gang_job(team, "relay", nodes=2, command=["sh", "-c", FAILS_FIRST_THEN_LINGERS],
                 terminationGracePeriodSeconds=STOPPING_S)  # fmt: skip
        team.wait_status("relay", lambda s: s.get("restarts") == 1, OPERATOR_REACTION_S, "a gang restart")
        team.wait_phase("relay", "Running", timeout_s=OPERATOR_REACTION_S + CONTROLLERS_REACTION_S)
        stopping = team.kube.list("pods", pool, "job-name=relay-g0")
        assert any(pod["metadata"].get("deletionTimestamp") for pod in stopping), "the last gang's rank 0 is gone"
        groups = {group["metadata"]["name"] for group in team.kube.list("podgroups", pool)}
        assert len(groups) == 2, groups  # each gang's own
        for pod in stopping:  # rather than wait out the grace period
            team.kube.request("DELETE", f"/api/v1/namespaces/{pool}/pods/{pod['metadata']['name']}",
                              {"gracePeriodSeconds": 0})  # fmt: skip


# ---- another Workload that names the job ----


def pod_groups_of(team: Team, workload: str) -> list[str]:
    """The PodGroups of the namespace that the Job controller made from a template of Workload `workload`."""
    groups = team.kube.list("podgroups", team.namespace)
    return [g["metadata"]["name"] for g in groups if g["spec"].get("workloadRef", {}).get("workloadName") == workload]


def foreign_workload_events(team: Team, name: str) -> list[str]:
    return [message for kind, reason, message in team.events(name) if (kind, reason) == ("Warning", "ForeignWorkload")]


def held_back(team: Team, name: str, decoy: str, gang: str) -> None:
    """The job says that Workload `decoy` holds it back (a Warning Event, once, and its status), and neither its
    gang's Job `gang` nor a PodGroup of the decoy's is made while the test watches."""
    (message,) = wait_until(lambda: foreign_workload_events(team, name), OPERATOR_REACTION_S,
                            f"a ForeignWorkload Event on {name}")  # fmt: skip
    assert f"Workload {decoy} in this namespace names this job" in message and f"delete Workload {decoy}" in message
    team.wait_status(name, lambda s: f"delete Workload {decoy}" in (s.get("message") or ""), what="why it waits")
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        assert gang not in [job["metadata"]["name"] for job in team.children(name, "jobs")]
        assert pod_groups_of(team, decoy) == []
        time.sleep(0.2)
    assert foreign_workload_events(team, name) == [message]


def placed_by_its_own(team: Team, gang: str, template: str) -> None:
    """Every pod of the gang's Job is in the PodGroup of the job's own Workload, by `template`."""
    pods = team.kube.list("pods", team.namespace, f"job-name={gang}")
    job = gang.rsplit("-g", 1)[0]
    assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {pod_group_name(job, template)}


def test_a_workload_that_names_the_job_before_it_exists_holds_its_first_gang_back_until_deleted(
    control_plane, team, tmp_path
):
    """Someone who may create Workloads in the namespace made one that names the job in its spec.controllerRef,
    with a gang of 1, before the job: the Job controller places a gang through whichever Workload that names the
    job it finds first. No gang starts while it is there; once it is deleted, the gang starts, as one gang."""
    pool = team.namespace
    with Kubelet(control_plane.api_client(), [node(f"{pool}-{n}", pool) for n in range(2)], tmp_path / "kubelet",
                 namespaces=[pool]):  # fmt: skip
        team.kube.create("workloads", decoy_workload("early", "decoy", pool, stored=False), pool)
        gang_job(team, "early", nodes=2)
        held_back(team, "early", "decoy", "early-g0")
        assert team.status("early")["phase"] == "Pending"
        team.kube.delete("workloads", pool, "decoy")
        team.wait_phase("early", "Running", timeout_s=OPERATOR_REACTION_S + CONTROLLERS_REACTION_S)
        placed_by_its_own(team, "early-g0", "gang-even")


def test_a_workload_that_names_the_job_after_its_own_was_deleted_holds_the_next_gang_back_until_deleted(
    control_plane, team, tmp_path
):
    """The job's own Workload was deleted while its gang ran, and another made that names the job: the next gang
    (here after a spec change) does not start while it is there, and once it is deleted starts as one gang."""
    pool = team.namespace
    with Kubelet(control_plane.api_client(), [node(f"{pool}-{n}", pool) for n in range(2)], tmp_path / "kubelet",
                 namespaces=[pool]):  # fmt: skip
        gang_job(team, "late", nodes=2)
        team.wait_phase("late", "Running", timeout_s=OPERATOR_REACTION_S + CONTROLLERS_REACTION_S)
        team.kube.delete("workloads", pool, "late")
        team.kube.create("workloads", decoy_workload("late", "decoy", pool, stored=False), pool)
        team.patch_stj("late", {"spec": {"env": [{"name": "EDITED", "value": "1"}]}})
        held_back(team, "late", "decoy", "late-g1")
        team.kube.delete("workloads", pool, "decoy")
        team.wait_status("late", lambda s: s.get("phase") == "Running" and s.get("currentJob") == "late-g1",
                         OPERATOR_REACTION_S + CONTROLLERS_REACTION_S, "the next gang running")  # fmt: skip
        placed_by_its_own(team, "late-g1", "gang-odd")
    assert pod_groups_of(team, "decoy") == []


# ---- an older cluster: without the Workload API, nor a container restart rule that restarts its pod ----


@pytest.fixture(scope="module")
def older_cluster(tmp_path_factory) -> Iterator[ControlPlane]:
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    gates_off = ("RestartAllContainersOnContainerExits",)
    with ControlPlane(tmp_path_factory.mktemp("older"), workload_api=False, gates_off=gates_off) as started:
        yield started


def test_an_older_cluster_places_pods_as_before_recreates_gangs_and_workload_fails_saying_so(older_cluster, tmp_path):
    cluster = older_cluster
    namespace = cluster.create_namespace(f"no-gangs-{secrets.token_hex(3)}")
    install = install_watching(cluster, namespace, tmp_path)
    team = Team(Kube(cluster.api_client()), namespace)
    with (
        Kubelet(cluster.api_client(), [node(f"{namespace}-1", namespace), node(f"{namespace}-2", namespace)],
                tmp_path / "kubelet", namespaces=[namespace]),
        operator_process(install, *QUIET) as operator,
    ):  # fmt: skip
        gang_job(team, "plain", nodes=2)
        team.wait_phase("plain", "Running", timeout_s=OPERATOR_REACTION_S + CONTROLLERS_REACTION_S)
        (child_job,) = team.children("plain", "jobs")
        assert "scheduling.k8s.io/group-template-name" not in (child_job["metadata"].get("annotations") or {})
        assert "Workload API: not served" in operator.log_path.read_text()
        # Its dry run of a Job with the restart rule is refused (the gate is off): gangs are recreated.
        assert not Cluster(cluster.api_client(), timeout_seconds=10, helpers=1).restarts_all_containers(namespace)
        assert "gang restarts in place: no, gangs are recreated" in operator.log_path.read_text()

        gang_job(team, "insists", nodes=2, scheduling={"gang": "workload"})
        failed = team.wait_condition("insists", "Failed")
        assert failed["reason"] == "GangSchedulingUnavailable" and "set it to auto" in failed["message"]
        assert team.children("insists", "jobs") == []


def test_an_elastic_gang_whose_pods_a_quota_refuses_shrinks_to_what_the_quota_allows(control_plane, team, tmp_path):
    """A namespace quota of 2 pods and a gang of 3: the third pod is never made (the Job controller's create is
    refused), so no scheduler says it cannot place it. It is unplaced all the same: the gang shrinks."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods", "namespace": team.namespace},
             "spec": {"hard": {"pods": "2"}}}  # fmt: skip
    team.kube.create("resourcequotas", quota)
    pool = [node(f"{team.namespace}-{number}", team.namespace) for number in range(3)]
    with Kubelet(control_plane.api_client(), pool, tmp_path / "kubelet", namespaces=[team.namespace]):
        gang_job(team, "quota", nodes=3, elastic={"minNodes": 1, "scaleDownAfterSeconds": 2})
        status = team.wait_status(
            "quota", lambda s: s.get("phase") == "Running" and s["nodes"]["current"] == 2,
            OPERATOR_REACTION_S + CONTROLLERS_REACTION_S, "the gang running at the 2 pods the quota allows",
        )  # fmt: skip
    assert [(r["fromNodes"], r["toNodes"], r["reason"]) for r in status["resizes"]] == [(3, 2, "Unschedulable")]
    assert (status["restarts"], status.get("disruptions", 0)) == (0, 0)
