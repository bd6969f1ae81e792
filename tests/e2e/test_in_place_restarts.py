"""Gangs restarted in place, end to end on the real control plane: the operator serves its status-report endpoint,
each pod's agent asks it over the pod's projected token, and the kubelet stand-in restarts every container of a pod
where it stands on the RestartAllContainers rule. A failed rank restarts its gang in the same Job and pods, the
ranks start the next generation together, and the run resumes from its checkpoint as a recreated gang would."""

from __future__ import annotations

import contextlib
import secrets

import pytest

from scaletrain_operator.controller.cluster import Cluster
from scaletrain_testing.e2e_jobs import (
    OPERATOR_ARGS,
    OPERATOR_ENV,
    e2e_namespace,
    losses,
    paced,
    pods_of,
    status_report_args,
    steps,
    submit_training,
)
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.kueue import local_queue
from scaletrain_testing.operator_harness import operator_process
from scaletrain_testing.timeouts import WHOLE_JOB_S
from scaletrain_testing.trainer_runs import plugin_data
from scaletrain_testing.waiting import wait_until

READS_PER_STEP = 8  # samples of each rank's data set per step: its half of a global batch of 16
CRASH_STEP, MAX_STEPS = 8, 12  # rank 1 dies in step 8 of generation 0, after the checkpoint of step 5
ONE_CPU = {"requests": {"cpu": "1", "memory": "512Mi"}}  # a gang of 2 takes a queue of 2 cpus


def crashing(seconds_per_read: float = 0.02) -> dict:
    """The test data set, paced; rank 1 dies (exit 13) in step CRASH_STEP of generation 0 alone."""
    return plugin_data(
        "CrashingSynthetic", crash_at_read=READS_PER_STEP * (CRASH_STEP - 1) + 2, crash_rank=1, crash_generation=0,
        seconds_per_read=seconds_per_read,
    )  # fmt: skip


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    """A watched namespace with three fake nodes, and an operator that serves the status-report endpoint."""
    nodes = [FakeNode("in-place-1"), FakeNode("in-place-2"), FakeNode("in-place-3")]  # a third for a replacement
    with e2e_namespace(control_plane, tmp_path_factory.mktemp("in-place"), nodes) as team:
        with operator_process(team.install, *OPERATOR_ARGS, *in_place_args(team), env=OPERATOR_ENV):
            yield team


def in_place_args(team) -> tuple[str, ...]:
    """The operator's arguments for in-place restarts: its status-report endpoint, and an image for the init
    container of a script of one's own (any: the kubelet stand-in runs this machine's programs)."""
    return (*status_report_args(team), "--agent-image=scaletrain/operator:e2e")


def test_the_control_plane_takes_the_restart_rule(control_plane, cluster):
    """The operator's dry run (a Job with the rule, made nowhere) finds that this cluster restarts pods in place;
    test_gang_placement's older cluster, with the gate off, is found not to."""
    api = Cluster(control_plane.api_client(), timeout_seconds=10, helpers=1)
    assert api.restarts_all_containers(cluster.namespace)
    assert cluster.kube.list("jobs", cluster.namespace) == []


def test_a_failed_rank_restarts_its_gang_in_place_and_the_run_resumes_exactly(cluster):
    team, name = cluster, "in-place"
    directory = submit_training(team, name, {"data": crashing(), "maxSteps": MAX_STEPS}, maxRestarts=1)
    first = wait_until(lambda: len(pods_of(team, f"{name}-g0")) == 2 and pods_of(team, f"{name}-g0"), WHOLE_JOB_S,
                       "both pods of the first gang")  # fmt: skip
    (job,) = team.children(name, "jobs")
    status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert (status["restarts"], status["gangGeneration"], status["currentJob"]) == (1, 1, f"{name}-g0")
    assert not [c for c in status.get("conditions", []) if c["type"] == "InPlaceRestartsUnavailable"]
    # The same Job and the same pods, on the same nodes: each restarted where it stood.
    (kept,) = team.children(name, "jobs")
    assert kept["metadata"]["uid"] == job["metadata"]["uid"]
    pods = pods_of(team, f"{name}-g0")
    assert [p["metadata"]["uid"] for p in pods] == [p["metadata"]["uid"] for p in first]
    assert all(p["status"]["containerStatuses"][0]["restartCount"] >= 1 for p in pods)
    (ended, last) = status["gangs"]
    record = (ended["generation"], ended["ended"], ended["startedFromStep"], ended["checkpointStep"])
    assert record == (0, "Failed", 0, 5) and (last["generation"], last["ended"], last["startedFromStep"]) == (
        1,
        "Succeeded",
        5,
    )
    # The Restarting Event names the rank that failed and its workload's own exit code (torchrun's 1, for a worker
    # that died), which its agent said: the kubelet's record of an in-place restart holds 137 instead.
    restarting = next(message for _, reason, message in team.events(name) if reason == "Restarting")
    assert f"pod {name}-g0-1-" in restarting and "(Error, exit code 1)" in restarting
    # Resumed exactly: the steps after the checkpoint are trained again to the same losses.
    logged = list(zip(steps(directory), losses(directory), strict=True))
    assert [step for step, _ in logged] == [*range(1, CRASH_STEP), *range(6, MAX_STEPS + 1)]
    by_step: dict[int, set[float]] = {}
    for step, loss in logged:
        by_step.setdefault(step, set()).add(loss)
    assert all(len(seen) == 1 for seen in by_step.values())


def test_a_script_of_ones_own_restarts_in_place_too(cluster):
    """A script of one's own, its own process per pod: the agent comes from an init container, and the image's
    python3 runs it. Rank 1 fails in the first generation while rank 0 still runs; both restart where they stand."""
    team, name = cluster, "own-in-place"
    script = (
        "import os, sys, time\n"
        "first = os.environ['SCALETRAIN_GENERATION'] == '0'\n"
        "rank = os.environ['JOB_COMPLETION_INDEX']\n"
        "time.sleep(60 if first and rank == '0' else 1)\n"
        "sys.exit(3 if first and rank == '1' else 0)\n"
    )
    team.submit(name, nodes=2, command=["python", "-c", script], training=DELETE, maxRestarts=1, shmSize="64Mi")
    first = wait_until(lambda: len(pods_of(team, f"{name}-g0")) == 2 and pods_of(team, f"{name}-g0"), WHOLE_JOB_S,
                       "both pods of the first gang")  # fmt: skip
    status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert (status["restarts"], status["gangGeneration"], status["currentJob"]) == (1, 1, f"{name}-g0")
    pods = pods_of(team, f"{name}-g0")
    assert [p["metadata"]["uid"] for p in pods] == [p["metadata"]["uid"] for p in first]
    assert all(p["status"]["containerStatuses"][0]["restartCount"] >= 1 for p in pods)
    restarting = next(message for _, reason, message in team.events(name) if reason == "Restarting")
    assert f"pod {name}-g0-1-" in restarting and "(Error, exit code 3)" in restarting


NODE_EACH = {"requests": {"cpu": "5", "memory": "512Mi"}}  # of a fake node's 8: a pod a node, so a lost node is one pod


def start_on_separate_nodes(team, name: str, checkpoint_every: int, **spec) -> tuple:
    """A paced 2-node job whose ranks run on two of the three nodes, 10 steps in: its directory, Job and pods."""
    training = {"data": paced(0.02), "maxSteps": 40, "checkpoint": {"everySteps": checkpoint_every}}
    directory = submit_training(team, name, training, resources=NODE_EACH, **spec)
    wait_until(lambda: len(steps(directory)) >= 10, WHOLE_JOB_S, "10 steps logged", interval_s=0.05)
    (job,) = team.children(name, "jobs")
    rank_0, rank_1 = pods_of(team, f"{name}-g0")
    assert rank_0["spec"]["nodeName"] != rank_1["spec"]["nodeName"]
    return directory, job, rank_0, rank_1


def assert_replaced_alone(team, name: str, job: dict, rank_0: dict, rank_1: dict) -> None:
    """The same Job; rank 0's pod restarted where it stood; rank 1's replaced, on another node."""
    (kept,) = team.children(name, "jobs")
    assert kept["metadata"]["uid"] == job["metadata"]["uid"]
    now = {pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: pod
           for pod in pods_of(team, f"{name}-g0") if pod["status"]["phase"] == "Succeeded"}  # fmt: skip
    assert now["0"]["metadata"]["uid"] == rank_0["metadata"]["uid"]
    assert now["0"]["status"]["containerStatuses"][0]["restartCount"] >= 1
    assert now["1"]["metadata"]["uid"] != rank_1["metadata"]["uid"]
    assert now["1"]["spec"]["nodeName"] != rank_1["spec"]["nodeName"]


def test_a_drained_nodes_pod_is_replaced_elsewhere_while_the_other_restarts_in_place(cluster):
    """`kubectl drain` of rank 1's node: cordoned, then rank 1 evicted. The trainer saves a checkpoint after the step
    it is in, and stops. The Job controller replaces rank 1's pod alone, on another node; rank 0 restarts where it
    stands, and both resume from that checkpoint together: no step twice, none lost. A disruption, not a restart."""
    team, name = cluster, "drained"
    directory, job, rank_0, rank_1 = start_on_separate_nodes(team, name, 1000, maxRestarts=0)  # saves on SIGTERM
    node, pod_name = rank_1["spec"]["nodeName"], rank_1["metadata"]["name"]
    merge = "application/merge-patch+json"
    team.kube.request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}}, content_type=merge)
    try:
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod_name}}
        team.kube.request("POST", f"/api/v1/namespaces/{team.namespace}/pods/{pod_name}/eviction", eviction)
        status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    finally:
        team.kube.request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": None}}, content_type=merge)
    assert (status["restarts"], status["disruptions"], status["gangGeneration"]) == (0, 1, 1)
    assert_replaced_alone(team, name, job, rank_0, rank_1)
    # The operator may look after the evicted pod is gone: then rank 0, stopped after the same save, says why.
    restarting = next(message for _, reason, message in team.events(name) if reason == "Restarting")
    assert "a disruption, not counted against maxRestarts" in restarting
    assert steps(directory) == list(range(1, 41))  # resumed from the checkpoint saved on SIGTERM: no step twice


def test_a_lost_nodes_pod_is_replaced_elsewhere_while_the_other_restarts_in_place(cluster):
    """Rank 1's node dies: its processes with it, and its Node is deleted. Rank 0 fails on the broken collective, and
    waits at the barrier; the pod garbage collector fails and deletes rank 1's pod, and the Job controller replaces
    it on another node, whose agent joins the barrier. Both resume from the last checkpoint: the
    steps after it are trained again to the same losses. Last in the module: the node is gone for the tests after it."""
    team, name = cluster, "lost"
    directory, job, rank_0, rank_1 = start_on_separate_nodes(team, name, 5, maxRestarts=1)
    team.kubelet.lose(rank_1["spec"]["nodeName"])
    status = team.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    # Which the operator sees first decides how it is counted: rank 0's failure on the broken collective (a restart),
    # or rank 1's pod failed by the collector (a disruption; also after the restart, if seen before its deletion).
    assert status["restarts"] + status["disruptions"] in (1, 2), (status, team.events(name))
    assert_replaced_alone(team, name, job, rank_0, rank_1)
    logged = list(zip(steps(directory), losses(directory), strict=True))
    assert sorted({step for step, _ in logged}) == list(range(1, 41))
    by_step: dict[int, set[float]] = {}
    for step, loss in logged:
        by_step.setdefault(step, set()).add(loss)
    assert all(len(seen) == 1 for seen in by_step.values())


@pytest.mark.parametrize("queued", ["by its queue", "by Kueue managing every Job"])
def test_a_queued_gang_restarted_in_place_keeps_its_workload_and_its_quota_against_a_waiting_job(
    kueue, tmp_path, queued
):
    """A ClusterQueue with room for one gang, the first job in it, a second waiting. The first's restart in place
    keeps its Job, so Kueue keeps it admitted: one Workload for its whole life, and the second job is admitted only
    once the first finished. (Recreated, the gang's new Job queues behind the waiting one's Workload, and may lose
    the quota to it.) Queued by its spec.queueName, or, where Kueue manages every Job, by the namespace's default
    LocalQueue."""
    managing_every_job = queued == "by Kueue managing every Job"
    name = f"keep-{secrets.token_hex(3)}"
    queue_name = "default" if managing_every_job else "team"
    named = {} if managing_every_job else {"queueName": queue_name}
    nodes = [FakeNode(f"{name}-1"), FakeNode(f"{name}-2")]  # room for both jobs: only the quota is short
    with (
        kueue.managing_every_job() if managing_every_job else contextlib.nullcontext(),
        kueue.quota(name, cpu="2", memory="4Gi"),
        e2e_namespace(kueue.control_plane, tmp_path, nodes) as team,
        operator_process(team.install, *OPERATOR_ARGS, *in_place_args(team), env=OPERATOR_ENV),
    ):
        kueue.create(local_queue(queue_name, team.namespace, name))
        directory = submit_training(
            team, "first", {"data": crashing(seconds_per_read=0.05), "maxSteps": MAX_STEPS},
            resources=ONE_CPU, maxRestarts=1, **named,
        )  # fmt: skip
        wait_until(lambda: steps(directory), WHOLE_JOB_S, "a step of first", interval_s=0.05)
        (job,) = team.children("first", "jobs")
        admitted = kueue.workload_of(job)
        team.submit("second", nodes=2, command=["sleep", "1"], training=DELETE, resources=ONE_CPU, shmSize="64Mi",
                    **named)  # fmt: skip
        first = team.wait_phase("first", "Succeeded", WHOLE_JOB_S)["status"]
        team.wait_phase("second", "Succeeded", WHOLE_JOB_S)
        (kept,) = team.children("first", "jobs")
        assert kept["metadata"]["uid"] == job["metadata"]["uid"]
        assert kueue.workload_of(kept)["metadata"]["uid"] == admitted["metadata"]["uid"]
        second_started = min(pod["status"]["startTime"] for pod in pods_of(team, "second-g0"))
    assert (first["restarts"], first["gangGeneration"]) == (1, 1)
    assert second_started >= first["completionTime"]  # the waiting job never got the restarting one's quota
