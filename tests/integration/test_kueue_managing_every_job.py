"""Kueue v0.17.0 managing every Job (manageJobsWithoutQueueName), as on shared GPU clusters where each Job goes
through a queue: its webhook creates each gang's Job suspended, and a Job that names no queue gets the namespace's
LocalQueue "default". The operator must take neither for the user's resume, and must never fight Kueue over the
suspend flag: one Job per gang generation that ran, counted in the API server's audit log."""

from __future__ import annotations

from scaletrain_testing.audit import counts
from scaletrain_testing.e2e_jobs import queued_namespace
from scaletrain_testing.jobs import DELETE
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.kueue import cluster_queue, local_queue, resource_flavor
from scaletrain_testing.operator_harness import Team
from scaletrain_testing.timeouts import KUEUE_QUOTA_RELEASE_S, OPERATOR_REACTION_S, WHOLE_JOB_S
from scaletrain_testing.waiting import wait_until

JOBS = 20
SMALL = {"requests": {"cpu": "100m", "memory": "64Mi"}}


def _short(team: Team, name: str, seconds: int, **spec) -> dict:
    """A 1-node gang that runs `sleep` for `seconds` and succeeds."""
    return team.submit(name, nodes=1, command=["sleep", str(seconds)], training=DELETE, resources=SMALL,
                       shmSize="64Mi", **spec)  # fmt: skip


def _job_creates(kueue, team: Team, mark: int) -> int:
    return counts(kueue.control_plane.audit.requests(team.install.user, after=mark))[("create", "jobs.batch")]


def _setup(kueue, tmp_path, name: str):
    flavor = resource_flavor(name)
    queue = cluster_queue(name, name, cpu="4", memory="8Gi")
    return queued_namespace(kueue, tmp_path, [FakeNode(f"{name}-1")], queue, flavor)


def test_jobs_with_and_without_a_queue_run_once_each_where_kueue_suspends_every_job(kueue, tmp_path):
    name = f"every-{tmp_path.name}"[:40].lower().replace("_", "-")
    with kueue.managing_every_job(), _setup(kueue, tmp_path, name) as team:
        kueue.create(local_queue("default", team.namespace, name))  # where a Job that names no queue goes
        mark = kueue.control_plane.audit.mark()
        names = [f"job-{number}" for number in range(JOBS)]
        for number, job in enumerate(names):
            _short(team, job, seconds=1, **({"queueName": "team"} if number % 2 else {}))
        for job in names:
            status = team.wait_phase(job, "Succeeded", WHOLE_JOB_S)["status"]
            assert (status["currentJob"], status["restarts"], status.get("disruptions", 0)) == (f"{job}-g0", 0, 0)
        assert _job_creates(kueue, team, mark) == JOBS  # one Job per gang generation that ran: no churn


def test_suspending_and_resuming_a_queued_job_deletes_its_job_once_and_makes_one_more(kueue, tmp_path):
    name = f"pause-{tmp_path.name}"[:40].lower().replace("_", "-")
    with kueue.managing_every_job(), _setup(kueue, tmp_path, name) as team:
        _short(team, "paused", seconds=600, queueName="team")
        team.wait_phase("paused", "Running", WHOLE_JOB_S)
        mark = kueue.control_plane.audit.mark()
        team.patch_stj("paused", {"spec": {"suspend": True}})
        team.wait_phase("paused", "Suspended")
        # The Job goes, and Kueue releases its quota: nothing for Kueue to start again, nothing to fight over.
        wait_until(lambda: team.children("paused", "jobs") == [], OPERATOR_REACTION_S, "the Job of paused to go")
        wait_until(lambda: kueue.objects("Workload", team.namespace) == [], KUEUE_QUOTA_RELEASE_S,
                   "Kueue to release the quota of paused")  # fmt: skip
        operator = kueue.control_plane.audit.requests(team.install.user, after=mark)
        assert counts(operator)[("patch", "jobs.batch")] == 0 and counts(operator)[("delete", "jobs.batch")] == 1
        team.patch_stj("paused", {"spec": {"suspend": False}})
        status = team.wait_phase("paused", "Running", WHOLE_JOB_S)["status"]
        assert (status["currentJob"], status["restarts"], status.get("disruptions", 0)) == ("paused-g1", 0, 0)
        assert _job_creates(kueue, team, mark) == 1
