"""The operator's API requests on the real control plane, counted in the API server's audit log: it reads
from its watch cache (controller/cache.py) and makes a fresh read only where handlers.py says one is
needed, so creating jobs costs their writes alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from scaletrain_operator.controller.cluster import Cluster, Conflict, ObjectRef
from scaletrain_testing.audit import counts
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import Team, install_crds, install_watching, operator_process
from scaletrain_testing.timeouts import CONTROLLERS_REACTION_S, OPERATOR_REACTION_S
from scaletrain_testing.waiting import wait_until

QUIET = ("--liveness-port", "0", "--metrics-port", "0")
JOBS = 10
# handlers._reconcile's fresh read of one job: GET it, LIST its Service, Jobs and pods by label.
FRESH_READ = {
    ("get", "scaletrainjobs.scaletrain.io"),
    ("list", "services"),
    ("list", "jobs.batch"),
    ("list", "pods"),
}
READS = frozenset({"get", "list", "watch"})
WATCHED = {"scaletrainjobs.scaletrain.io", "services", "jobs.batch", "pods", "workloads.scheduling.k8s.io"}


@pytest.fixture
def install(control_plane, namespace, tmp_path):
    return install_watching(control_plane, namespace, tmp_path, {"replicaCount": 1, "peering": {"enabled": False}})


@pytest.fixture
def team(control_plane, namespace):
    """The test's jobs are deleted when it ends, before their namespace: a cluster-wide operator of a later
    test would otherwise see gangs lose their pods to the namespace's deletion, and restart them."""
    team = Team(Kube(control_plane.api_client()), namespace)
    yield team
    delete_all_jobs(team)


def delete_all_jobs(team: Team) -> None:
    for stj in team.kube.list("stj", team.namespace):
        team.kube.delete("stj", team.namespace, stj["metadata"]["name"])
    wait_until(lambda: team.kube.list("stj", team.namespace) == [], CONTROLLERS_REACTION_S, "the jobs to be deleted")


def made_since(control_plane, install, mark, settle_seconds=0.0):
    """The operator's requests since `mark`, by (verb, resource)."""
    return counts(control_plane.audit.requests(install.user, after=mark, settle_seconds=settle_seconds))


def wait_until_watching(control_plane, install, since) -> None:
    """Until the operator has listed every kind it watches (kopf lists each once, then watches it)."""

    def listed_all() -> bool:
        requests = control_plane.audit.requests(install.user, after=since, settle_seconds=0)
        return WATCHED <= {r.resource for r in requests if r.verb == "list" and r.code == 200}  # kopf retries a 429

    wait_until(listed_all, OPERATOR_REACTION_S, "the operator to list every kind it watches")


def settled(team: Team, names: list[str]) -> bool:
    """Every job Pending with both its pods counted: the operator has seen the whole of each gang."""
    statuses = [(team.stj(name) or {}).get("status") or {} for name in names]
    return all(s.get("phase") == "Pending" and (s.get("nodes") or {}).get("pending") == 2 for s in statuses)


def test_creating_jobs_at_once_costs_their_writes_and_no_reads(install, team, control_plane):
    names = [f"burst-{index}" for index in range(JOBS)]
    started = control_plane.audit.mark()
    with operator_process(install, *QUIET):
        wait_until_watching(control_plane, install, started)
        mark = control_plane.audit.mark()
        with ThreadPoolExecutor(JOBS) as pool:
            list(pool.map(team.submit, names))
        wait_until(lambda: settled(team, names), OPERATOR_REACTION_S, "every job Pending with both its pods counted")
        made = made_since(control_plane, install, mark, settle_seconds=2.0)

    assert {kind: n for kind, n in made.items() if kind[0] in READS} == {}, "reads the cache should have served"
    assert made[("create", "services")] == 2 * JOBS and made[("create", "jobs.batch")] == JOBS  # + the master alias
    assert made[("create", "workloads.scheduling.k8s.io")] == JOBS  # gang placement
    # Created, and Unschedulable where the scheduler said so: this tier has no nodes. (With gang placement,
    # kube-scheduler 1.37 may instead report a SchedulerError of its DynamicResources plugin for a cluster
    # without nodes, which is not Unschedulable.)
    unschedulable = sum(
        any(c["type"] == "Schedulable" and c["status"] == "False" for c in team.status(name).get("conditions", []))
        for name in names
    )
    assert made[("create", "events")] == JOBS + unschedulable
    status_patches = made[("patch", "scaletrainjobs.scaletrain.io/status")]
    assert JOBS <= status_patches <= 3 * JOBS  # Pending, then the pods counted (at most one by one)
    # The target is for a cluster with room for the pods: the Unschedulable Events are this tier's own. It was
    # 6 before the master alias, one more create per job, and one more for the Workload.
    assert (sum(made.values()) - unschedulable) / JOBS <= 8


def test_a_gangs_lifecycle_reads_fresh_only_where_a_decision_cannot_be_undone(install, team, control_plane):
    """Pending → Running → a rank fails, the gang restarts → Running → Succeeded: one fresh read for each
    phase change after the first (a phase the operator reported, or a restart, is confirmed first)."""
    started = control_plane.audit.mark()
    with operator_process(install, *QUIET):
        wait_until_watching(control_plane, install, started)
        mark = control_plane.audit.mark()
        team.submit("lifecycle", maxRestarts=1)
        pods = team.start_pods("lifecycle-g0")
        team.wait_phase("lifecycle", "Running")
        team.fail_pod(pods[1], exit_code=137)
        team.wait_status("lifecycle", lambda s: s.get("currentJob") == "lifecycle-g1")
        team.start_pods("lifecycle-g1")
        team.wait_phase("lifecycle", "Running")
        team.start_pods("lifecycle-g1", phase="Succeeded")
        team.wait_phase("lifecycle", "Succeeded")
        made = made_since(control_plane, install, mark, settle_seconds=2.0)

    # The restart makes sure of the job's Workload (not cached: someone may have deleted it): its create answers
    # AlreadyExists, and one list by name checks that the Workload there is the job's own.
    workload = "workloads.scheduling.k8s.io"
    assert made[("create", workload)] == 2 and made[("list", workload)] == 1
    reads = {kind: n for kind, n in made.items() if kind[0] in READS and kind[1] != workload}
    assert set(reads) == FRESH_READ
    phase_changes = 4  # Running, Restarting, Running, Succeeded
    assert set(reads.values()) == {phase_changes}, reads
    assert made[("delete", "jobs.batch")] == 1 and made[("create", "jobs.batch")] == 2


def test_an_operator_restart_reads_each_job_fresh_and_writes_nothing(install, team, control_plane):
    names = [f"steady-{index}" for index in range(3)]
    with operator_process(install, *QUIET):
        for name in names:
            team.submit(name)
            team.start_pods(f"{name}-g0")
        for name in names:
            team.wait_status(name, lambda s: s.get("phase") == "Running" and s["nodes"]["active"] == 2)
    mark = control_plane.audit.mark()
    with operator_process(install, *QUIET):
        get_stj = ("get", "scaletrainjobs.scaletrain.io")
        wait_until(
            lambda: made_since(control_plane, install, mark)[get_stj] >= len(names),
            OPERATOR_REACTION_S,
            "the new operator to read each job fresh",
        )
        made = made_since(control_plane, install, mark, settle_seconds=2.0)

    # The one request besides reads is its probe of the restart rule, a dry run that makes nothing.
    assert [kind for kind in made if kind[0] not in READS] == [("create (dry run)", "jobs.batch")], (
        "a restart changes nothing"
    )
    kopf_lists = 1  # kopf lists each kind once before watching it
    # Each job is read fresh at its first reconcile; a loaded machine may deliver a kind's first list after that,
    # and a list that brings a job's child to the empty cache distrusts it (handlers.take_in): once more, at most.
    fresh = made[("get", "scaletrainjobs.scaletrain.io")]
    assert len(names) <= fresh <= 2 * len(names)
    assert made[("list", "scaletrainjobs.scaletrain.io")] == kopf_lists
    for resource in ("services", "jobs.batch", "pods"):
        assert made[("list", resource)] == kopf_lists + fresh, resource


def test_a_status_decided_from_a_stale_copy_is_refused(team, control_plane):
    """What makes a status written from the cache safe: the patch carries the version it was decided from,
    and the API server refuses it once the job has changed (here: a newer restart count)."""
    install_crds(control_plane)
    cluster = Cluster(control_plane.api_client())
    stale = ObjectRef.of(team.submit("raced"))
    cluster.patch_status(stale, {"restarts": 1})
    with pytest.raises(Conflict):
        cluster.patch_status(stale, {"restarts": 0})
    assert team.stj("raced")["status"]["restarts"] == 1
    assert cluster.cache.scaletrainjobs.get(team.namespace, "raced")["status"]["restarts"] == 1  # written through
