"""Preemption by the real Kueue (v0.17.0, scaletrain_testing/kueue.py) of a job that really trains: a
high-priority job takes the quota of a running low-priority one. The low one checkpoints on the SIGTERM of
Kueue's suspension, is counted as a disruption (not a restart), queues again, is admitted once the quota is
free, and resumes: every step trained once, none lost."""

from __future__ import annotations

import secrets

from scaletrain_testing.e2e_jobs import e2e_namespace, e2e_operator, paced, steps, submit_training, wait_event
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.kueue import local_queue
from scaletrain_testing.timeouts import WHOLE_JOB_S
from scaletrain_testing.waiting import wait_until

MAX_STEPS = 40
ONE_CPU = {"requests": {"cpu": "1", "memory": "512Mi"}}  # a gang of 2 takes the whole queue


def priority_class(name: str, value: int) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def test_a_preempted_gang_checkpoints_queues_again_and_resumes_with_no_step_twice(kueue, tmp_path):
    name = f"preempt-{secrets.token_hex(3)}"
    nodes = [FakeNode(f"{name}-1"), FakeNode(f"{name}-2")]  # room for both jobs: only the quota is short
    try:
        with (
            kueue.quota(name, cpu="2", memory="4Gi"),
            e2e_namespace(kueue.control_plane, tmp_path, nodes) as team,
            e2e_operator(team.install),
        ):
            for priority, value in (("low", 100), ("high", 1000)):
                team.kube.create("priorityclasses", priority_class(f"{name}-{priority}", value))
            kueue.create(local_queue("team", team.namespace, name))
            directory = submit_training(
                team, "low", {"data": paced(0.05), "maxSteps": MAX_STEPS},
                queueName="team", priorityClassName=f"{name}-low", resources=ONE_CPU,
            )  # fmt: skip
            wait_until(lambda: len(steps(directory)) >= 7, WHOLE_JOB_S, "7 steps of low", interval_s=0.05)

            team.submit("high", nodes=2, command=["sleep", "3"], training=DELETE, queueName="team",
                        priorityClassName=f"{name}-high", resources=ONE_CPU, shmSize="64Mi")  # fmt: skip
            (preempted,) = wait_event(team, "low", "Preempted")
            assert "Kueue suspended Job low-g0" in preempted
            team.wait_phase("high", "Succeeded", WHOLE_JOB_S)
            status = team.wait_phase("low", "Succeeded", WHOLE_JOB_S)["status"]
    finally:
        for priority in ("low", "high"):
            kueue.control_plane.kubectl("delete", "priorityclass", f"{name}-{priority}", "--ignore-not-found")

    assert (status["restarts"], status["disruptions"], status["currentJob"]) == (0, 1, "low-g1"), status
    # The suspension's SIGTERM had the gang save the step it was in: the next gang went on from there, so
    # each step was trained (and logged) once.
    assert steps(directory) == list(range(1, MAX_STEPS + 1))
