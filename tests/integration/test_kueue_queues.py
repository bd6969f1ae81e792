"""ScaleTrainJobs queued by the real Kueue (v0.17.0, built from its module: scaletrain_testing/kueue.py) on a
control plane with the Workload API on: quota, Kueue's own changes to the Jobs it admits, and Topology Aware
Scheduling. The operator runs as the chart installs it; fake nodes run a stand-in command (`sleep`), since
admission and placement are the point here, not training (tests/e2e/test_kueue_preemption.py trains)."""

from __future__ import annotations

from scaletrain_testing.e2e_jobs import queued_namespace
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.kueue import cluster_queue, resource_flavor, topology
from scaletrain_testing.operator_harness import Team
from scaletrain_testing.timeouts import KUEUE_REACTION_S, OPERATOR_REACTION_S, WHOLE_JOB_S
from scaletrain_testing.waiting import wait_until

POOL = "example.com/pool"
BLOCK = "example.com/block"
HOSTNAME = "kubernetes.io/hostname"


def stand_in(team: Team, name: str, nodes: int, seconds: int, **spec) -> dict:
    """A queued gang of `nodes` pods of 1 cpu each that runs `sleep` for `seconds` and succeeds."""
    return team.submit(
        name,
        nodes=nodes,
        command=["sleep", str(seconds)],
        training=DELETE,
        queueName="team",
        resources={"requests": {"cpu": "1", "memory": "256Mi"}},
        shmSize="64Mi",
        **spec,
    )


def pods_of(team: Team, job_name: str) -> list[dict]:
    return team.kube.list("pods", team.namespace, f"job-name={job_name}")


def started_at(team: Team, job_name: str) -> str:
    return min(pod["status"]["startTime"] for pod in pods_of(team, job_name))


def never_restarted(status: dict, name: str) -> None:
    """Kueue's changes to the Job it admitted (suspend, the flavor's node selector) were not taken for a change
    of the job's spec: one gang, no restart, no disruption."""
    assert (status["currentJob"], status["restarts"], status.get("disruptions", 0)) == (f"{name}-g0", 0, 0), status
    assert [gang.get("ended") for gang in status.get("gangs", [])] in ([], ["Succeeded"]), status["gangs"]


def test_two_jobs_that_each_need_the_whole_queue_run_one_after_the_other(kueue, tmp_path):
    flavor = resource_flavor(f"pool-{tmp_path.name}"[:63].lower().replace("_", "-"), node_labels={POOL: "queued"})
    name = flavor["metadata"]["name"]
    queue = cluster_queue(name, name, cpu="2", memory="2Gi")
    nodes = [FakeNode(f"{name}-1", {POOL: "queued"}), FakeNode(f"{name}-2", {POOL: "queued"})]
    with queued_namespace(kueue, tmp_path, nodes, queue, flavor) as team:
        stand_in(team, "first", nodes=2, seconds=6)
        team.wait_phase("first", "Running", WHOLE_JOB_S)
        stand_in(team, "second", nodes=2, seconds=1)
        quota = wait_until(lambda: _pending_workload(kueue, team, "second-g0"), KUEUE_REACTION_S + OPERATOR_REACTION_S,
                           "Kueue to leave second queued")  # fmt: skip
        assert "insufficient" in quota.lower(), quota
        # The job says why, in Kueue's words (housekeeping's condition Queued, repeated in the message).
        waiting = team.wait_condition("second", "Queued")
        assert waiting["reason"] == "WaitingForAdmission" and "insufficient" in waiting["message"].lower()
        message = team.wait_status("second", lambda s: waiting["message"] in s["message"])["message"]
        assert message.startswith("waiting for Kueue to admit it from queue team: ")
        assert pods_of(team, "second-g0") == [] and team.status("first")["phase"] == "Running"
        assert team.status("second")["phase"] == "Pending"

        first = team.wait_phase("first", "Succeeded", WHOLE_JOB_S)["status"]
        second = team.wait_phase("second", "Succeeded", WHOLE_JOB_S)["status"]
        assert team.wait_condition("second", "Queued", status="False")["reason"] == "Admitted"
        assert started_at(team, "second-g0") >= first["conditions"][-1]["lastTransitionTime"]
        # Kueue admitted the Jobs by un-suspending them and giving their pods the flavor's node selector.
        (admitted,) = team.children("second", "jobs")
        assert admitted["spec"]["template"]["spec"]["nodeSelector"][POOL] == "queued"
        never_restarted(first, "first")
        never_restarted(second, "second")


def test_a_required_topology_lands_the_gang_in_one_block_and_a_gang_no_block_holds_waits(kueue, tmp_path):
    name = f"tas-{tmp_path.name}"[:40].lower().replace("_", "-")
    blocks = topology(name, [BLOCK, HOSTNAME])
    flavor = resource_flavor(name, node_labels={POOL: name}, topology_name=name)
    queue = cluster_queue(name, name, cpu="8", memory="8Gi")
    nodes = [FakeNode(f"{name}-{node}", {POOL: name, BLOCK: block, HOSTNAME: f"{name}-{node}"}, cpu="1500m")
             for node, block in (("a1", "a"), ("b1", "b"), ("b2", "b"))]  # fmt: skip
    one_block = {"topology": {"required": BLOCK}}
    with queued_namespace(kueue, tmp_path, nodes, queue, flavor, extra=[blocks]) as team:
        stand_in(team, "pair", nodes=2, seconds=600, placement=one_block)
        status = team.wait_phase("pair", "Running", WHOLE_JOB_S)["status"]
        placed = sorted(pod["spec"]["nodeName"] for pod in pods_of(team, "pair-g0"))
        assert placed == [f"{name}-b1", f"{name}-b2"]  # block a has room for one pod only
        never_restarted(status, "pair")
        team.kube.delete("stj", team.namespace, "pair")
        wait_until(lambda: pods_of(team, "pair-g0") == [], WHOLE_JOB_S, "the pods of pair to go")

        stand_in(team, "trio", nodes=3, seconds=600, placement=one_block)
        workload = wait_until(lambda: _pending_workload(kueue, team, "trio-g0"), KUEUE_REACTION_S + OPERATOR_REACTION_S,
                              "Kueue to say why trio waits")  # fmt: skip
        assert "topology" in workload.lower(), workload  # Kueue's reason: no block holds three pods
        status = team.wait_status("trio", lambda s: "topology" in s["message"])
        assert status["phase"] == "Pending" and status["message"].startswith("waiting for Kueue to admit it from")
        assert pods_of(team, "trio-g0") == []


def _pending_workload(kueue, team: Team, job_name: str) -> str | None:
    """The message of Kueue's QuotaReserved=False condition on the Job's Workload, once Kueue tried it."""
    job = team.kube.get("jobs", team.namespace, job_name)
    workload = kueue.workload_of(job) if job else None
    conditions = (workload or {}).get("status", {}).get("conditions", [])
    reserved = next((c for c in conditions if c["type"] == "QuotaReserved"), None)
    return reserved["message"] if reserved and reserved["status"] == "False" and reserved.get("message") else None
