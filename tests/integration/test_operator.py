"""The real operator process on the real control plane, as the chart installs it (its ServiceAccount,
its RBAC). The real Job controller makes the pods and the garbage collector removes them; without a
kubelet here, the tests report pod phases and exit codes as a kubelet would, and watch how the
operator reacts."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from datetime import datetime, timezone

import pytest
import yaml

from scaletrain_testing.audit import counts
from scaletrain_testing.hostile_http import HostileServer
from scaletrain_testing.jobs import REPO, base_job, patched
from scaletrain_testing.kube import Kube
from scaletrain_testing.malformed import REFUSED_ONLY_BY_THE_OPERATOR
from scaletrain_testing.operator_harness import PROGRESS_EACH_READ, Team, condition, install_watching, operator_process
from scaletrain_testing.progress_server import RANK0_PROGRESS, ProgressServer, promise
from scaletrain_testing.timeouts import OPERATOR_REACTION_S
from scaletrain_testing.trainer_runs import free_port
from scaletrain_testing.waiting import wait_until

METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def installed(control_plane, tmp_path_factory):
    """The chart installed for one watched namespace, and its operator running, for the whole module."""
    namespace = control_plane.create_namespace(f"team-{free_port()}")
    install = install_watching(control_plane, namespace, tmp_path_factory.mktemp("operator"))
    args = (*PROGRESS_EACH_READ, "--liveness-port", "0", "--metrics-port", str(METRICS_PORT))
    env = {"SCALETRAIN_OPERATOR_PROGRESS_URL": "http://127.0.0.1:{port}/progress"}
    with operator_process(install, *args, env=env):
        yield install, Team(Kube(control_plane.api_client()), namespace)


@pytest.fixture
def team(installed):
    return installed[1]


def test_children_are_created_once_as_rendered(team, installed, control_plane):
    mark = control_plane.audit.mark()
    team.submit("create-once")
    status = team.wait_phase("create-once", "Pending")["status"]
    assert status["currentJob"] == "create-once-g0" and condition({"status": status}, "Created")["status"] == "True"
    time.sleep(0.5)  # later events (the operator's own status patch) must not create anything again
    services = sorted(s["metadata"]["name"] for s in team.children("create-once", "services"))
    assert services == ["create-once", "create-once-master"]  # the headless Service and the master alias
    (job,) = team.children("create-once", "jobs")
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    owner = job["metadata"]["ownerReferences"][0]
    assert owner["uid"] == team.stj("create-once")["metadata"]["uid"] and owner["controller"] is True
    assert ("Normal", "Created", "created Job create-once-g0") in team.events("create-once")
    made = counts(control_plane.audit.requests(installed[0].user, after=mark))  # by the operator's account
    assert made[("create", "jobs.batch")] == 1 and made[("create", "services")] == 2
    assert "finalizers" not in team.stj("create-once")["metadata"]  # deletion never waits for us


def test_running_then_succeeded(team):
    team.submit("happy")
    pods = team.start_pods("happy-g0")
    team.wait_phase("happy", "Running")
    status = team.wait_status("happy", lambda s: s["nodes"]["active"] == 2)
    counts = {"current": 2, "active": 2, "pending": 0, "succeeded": 0, "failed": 0}
    assert status["nodes"] == counts and status["startTime"]
    for pod in pods:
        team.set_pod_phase(pod, "Succeeded")  # the real Job controller then marks the Job Complete
    done = team.wait_phase("happy", "Succeeded")
    assert done["status"]["completionTime"] and condition(done, "Succeeded")["status"] == "True"
    assert condition(done, "Running")["status"] == "False"
    # No nodes here: the scheduler may report the pods unschedulable before the test plays their kubelet.
    said = [reason for _, reason, _ in team.events("happy") if reason != "Unschedulable"]
    assert said == ["Created", "Running", "Succeeded"]


def test_a_failed_rank_restarts_the_gang_up_to_max_restarts(team):
    team.submit("flaky", maxRestarts=1)
    pods = team.start_pods("flaky-g0")
    team.wait_phase("flaky", "Running")
    team.fail_pod(pods[1], exit_code=137)
    restarted = team.wait_status("flaky", lambda s: s.get("restarts") == 1)
    assert restarted["currentJob"] == "flaky-g1"
    wait_until(
        lambda: team.kube.get("jobs", team.namespace, "flaky-g0") is None,
        OPERATOR_REACTION_S,
        "the Job flaky-g0 deleted",
    )
    # The old gang went with its Job: the real garbage collector deleted its pods.
    wait_until(
        lambda: team.kube.get("pods", team.namespace, pods[0]["metadata"]["name"]) is None,
        OPERATOR_REACTION_S,
        "the first pod deleted",
    )
    warning = next(e for e in team.events("flaky") if e[1] == "Restarting")
    assert warning[0] == "Warning" and f"{pods[1]['metadata']['name']} failed (Error, exit code 137)" in warning[2]

    new_pods = team.start_pods("flaky-g1")
    team.wait_phase("flaky", "Running")
    team.fail_pod(new_pods[0], exit_code=1)
    failed = team.wait_phase("flaky", "Failed")
    assert condition(failed, "Failed")["reason"] == "RestartLimitReached"
    assert "maxRestarts (1) reached" in failed["status"]["message"]
    assert [j["metadata"]["name"] for j in team.children("flaky", "jobs")] == ["flaky-g1"]


def test_a_config_error_fails_at_once(team):
    team.submit("bad-config")
    pods = team.start_pods("bad-config-g0")
    team.fail_pod(pods[0], exit_code=78)
    failed = team.wait_phase("bad-config", "Failed")
    assert condition(failed, "Failed")["reason"] == "ConfigError" and failed["status"]["restarts"] == 0
    assert [j["metadata"]["name"] for j in team.children("bad-config", "jobs")] == ["bad-config-g0"]


def test_suspend_and_resume(team):
    team.submit("pausable")
    team.start_pods("pausable-g0")
    team.wait_phase("pausable", "Running")
    team.patch_stj("pausable", {"spec": {"suspend": True}})
    team.wait_phase("pausable", "Suspended")
    assert team.kube.get("jobs", team.namespace, "pausable-g0")["spec"]["suspend"] is True
    team.patch_stj("pausable", {"spec": {"suspend": False}})
    # The next gang goes on from the suspension's checkpoint, as neither a restart nor a disruption.
    wait_until(lambda: team.kube.get("jobs", team.namespace, "pausable-g1"), OPERATOR_REACTION_S, "the Job pausable-g1")
    team.start_pods("pausable-g1")
    team.wait_phase("pausable", "Running")
    status = team.stj("pausable")["status"]
    assert status["restarts"] == 0 and status.get("disruptions", 0) == 0


def test_a_drifted_job_is_patched_back_while_the_status_stays_the_same(team):
    """The Job's deadline edited by hand: the operator patches it back. The status does not change, and the
    Job to patch was once taken from the status patch, which is dropped when unchanged: a patch of Job None
    then failed on every event."""
    team.submit("drifted", activeDeadlineSeconds=600)
    team.start_pods("drifted-g0")
    team.wait_phase("drifted", "Running")
    team.wait_status("drifted", lambda s: s["nodes"]["active"] == 2)
    team.kube.patch("jobs", team.namespace, "drifted-g0", {"spec": {"activeDeadlineSeconds": 60}})
    deadline = lambda: team.kube.get("jobs", team.namespace, "drifted-g0")["spec"]["activeDeadlineSeconds"]  # noqa: E731
    wait_until(lambda: deadline() == 600, OPERATOR_REACTION_S, "the Job's activeDeadlineSeconds 600")
    assert team.stj("drifted")["status"]["phase"] == "Running"


def test_a_queued_job_is_created_suspended_for_kueue(team):
    team.submit("queued", queueName="h100")
    status = team.wait_phase("queued", "Pending")["status"]
    job = team.kube.get("jobs", team.namespace, "queued-g0")
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "h100"
    team.wait_status("queued", lambda s: "Kueue" in s.get("message", ""))
    assert status["restarts"] == 0
    assert team.kube.list("pods", team.namespace, "batch.kubernetes.io/job-name=queued-g0") == []  # really held


def test_a_spec_change_restarts_the_gang_with_the_new_spec(team):
    team.submit("resized")
    team.start_pods("resized-g0")
    team.wait_phase("resized", "Running")
    team.patch_stj("resized", {"spec": {"nodes": 4, "training": {"globalBatchSize": 32}}})
    job = wait_until(
        lambda: team.kube.get("jobs", team.namespace, "resized-g1"), OPERATOR_REACTION_S, "the Job resized-g1"
    )
    assert job["spec"]["completions"] == 4
    status = team.wait_status("resized", lambda s: s.get("currentJob") == "resized-g1")
    assert status["restarts"] == 0 and status["observedGeneration"] == 2
    assert len(team.pods("resized-g1")) == 4


def test_an_invalid_spec_that_passes_the_schema_fails_once(team, installed, control_plane):
    team.submit("reserved-env", env=[{"name": "WORLD_SIZE", "value": "8"}])
    failed = team.wait_phase("reserved-env", "Failed")
    assert condition(failed, "Failed")["reason"] == "InvalidSpec"
    assert "spec.env[0].name: WORLD_SIZE is set by ScaleTrain" in failed["status"]["message"]
    mark = control_plane.audit.mark()
    team.patch_stj("reserved-env", {"metadata": {"labels": {"touched": "yes"}}})
    requests = control_plane.audit.requests(installed[0].user, after=mark)
    status_patches = [r for r in requests if r.verb == "patch" and r.name == "reserved-env"]
    assert status_patches == []  # no retry loop
    assert team.children("reserved-env", "jobs") == []
    assert [e[1] for e in team.events("reserved-env")] == ["InvalidSpec"]


@pytest.mark.parametrize("case", REFUSED_ONLY_BY_THE_OPERATOR, ids=lambda case: case.name)
def test_each_operator_only_case_gets_past_the_server_and_is_marked_invalid(case, team):
    """The cases the CRD cannot express: the API server stores them, the operator fails them at once,
    naming the field."""
    name = f"bad-{case.name}"
    document = patched(base_job(), case.patch)
    document["metadata"] = {"name": name, "namespace": team.namespace}
    team.kube.create("stj", document)
    failed = team.wait_phase(name, "Failed")
    assert condition(failed, "Failed")["reason"] == "InvalidSpec"
    message = failed["status"]["message"]
    assert f"{case.field_path}: " in message and case.message_fragment in message
    assert team.children(name, "jobs") == []


def test_progress_of_rank_zero_reaches_the_status(team):
    with ProgressServer() as server:
        team.submit("watched", training={"metricsPort": server.port})
        team.start_pods("watched-g0")
        team.wait_phase("watched", "Running")
        progress = team.wait_status("watched", lambda s: s.get("progress"))["progress"]
        read_at = progress.pop("readAt")  # the operator's stamps: when it read, and the gang it read
        assert progress == RANK0_PROGRESS | {"generation": 0}
        assert abs((datetime.now(timezone.utc) - datetime.fromisoformat(read_at.replace("Z", "+00:00"))).seconds) < 30
        # Each answer replaces the one before whole: nothing of an earlier answer stays beside it.
        server.progress = {"step": 43, "maxSteps": 100}
        progress = team.wait_status("watched", lambda s: (s.get("progress") or {}).get("step") == 43)["progress"]
        assert set(progress) == {"step", "maxSteps", "generation", "readAt"}


def test_a_gang_whose_rank_0_answers_a_broken_promise_is_restarted_as_hung(team):
    """Rank 0 reports once, after the job has settled as Running, promising its next report within 2 s; its
    server then goes on answering that report, as a trainer whose training loop is stuck does (the server
    runs in a thread of its own). The operator's own copy of that report is the last change the job sees:
    the operator must hold the gang to the promise by itself, with a Hang and a restart."""
    with ProgressServer(progress=None) as server:  # rank 0 not serving yet
        team.submit("silent", training={"metricsPort": server.port}, maxRestarts=1)
        team.start_pods("silent-g0")
        team.wait_phase("silent", "Running")
        time.sleep(2.0)  # the reconciles after the job turned Running have found nothing more to do
        server.progress = RANK0_PROGRESS | promise(2)
        due = datetime.fromisoformat(server.progress["staleAfter"].replace("Z", "+00:00"))
        # Found by the first read after the promise and a read's time (2 s) have passed: 0.3 s apart.
        hung = wait_until(
            lambda: [message for _, reason, message in team.events("silent") if reason == "Hang"],
            OPERATOR_REACTION_S,
            "a Hang Event",
        )
        found_after = (datetime.now(timezone.utc) - due).total_seconds()
    assert found_after <= 2 + 1 + 3, f"found {found_after:.1f} s after the promise"
    assert "rank 0 reported no progress since step 42" in hung[0]
    assert team.wait_status("silent", lambda status: status.get("restarts") == 1)["currentJob"] == "silent-g1"


def test_an_unreadable_rank_0_is_progress_unreachable_and_never_a_restart(team):
    """Rank 0 answered, promising its next report within 2 s, then its endpoint stops answering (a
    NetworkPolicy, a crashed server, a node cut off). That says nothing of the training: the job shows
    ProgressUnreachable, with why, and keeps its gang; the condition clears once rank 0 answers again."""
    with ProgressServer() as server:
        server.healthy(2)
        team.submit("unreachable", training={"metricsPort": server.port}, maxRestarts=1)
        team.start_pods("unreachable-g0")
        team.wait_status("unreachable", lambda s: (s.get("progress") or {}).get("staleAfter"))
        server.progress = None  # 503: not progress
        unreachable = team.wait_condition("unreachable", "ProgressUnreachable", "True")
        assert "cannot be read (HTTP 503)" in unreachable["message"]
        time.sleep(5.0)  # well past the last promise, many passes
        status = team.stj("unreachable")["status"]
        assert status["phase"] == "Running" and status["restarts"] == 0 and status["currentJob"] == "unreachable-g0"
        server.healthy(2)
        readable = team.wait_condition("unreachable", "ProgressUnreachable", "False")
        assert readable["reason"] == "Read"
    assert "Hang" not in [reason for _, reason, _ in team.events("unreachable")]


def test_after_succeeded_kubectl_get_shows_rank_zeros_final_step_and_rounded_loss(team, control_plane):
    """The last poll found step 190, an ETA and a loss as the trainer logs it; rank 0's termination message
    holds the final step, which the Succeeded status shows, however long rank 0's endpoint still answers."""
    with ProgressServer(RANK0_PROGRESS | {"step": 190, "maxSteps": 200, "loss": 5.3174591064453125}) as server:
        team.submit("finished", training={"metricsPort": server.port, "maxSteps": 200})
        pods = team.start_pods("finished-g0")
        polled = team.wait_status("finished", lambda s: s.get("progress"))["progress"]
        assert (polled["step"], polled["loss"], polled["etaSeconds"]) == (190, 5.317, 70.0)
        summary = {"result": "Succeeded", "step": 200, "maxSteps": 200, "loss": 1.0987654321, "evalLoss": 1.23456,
                   "seconds": 21.3}  # fmt: skip
        team.set_pod_phase(pods[0], "Succeeded", termination_message=json.dumps(summary))
        team.set_pod_phase(pods[1], "Succeeded")
        team.wait_phase("finished", "Succeeded")
        time.sleep(1.0)  # several more housekeeping passes
    progress = team.stj("finished")["status"]["progress"]
    assert (progress["step"], progress["loss"]) == (200, 1.099) and "etaSeconds" not in progress
    table = control_plane.kubectl("get", "stj", "-n", team.namespace, "finished").stdout.splitlines()
    assert table[1].split()[:7] == ["finished", "Succeeded", "2", "2", "200", "1.099", "0"]
    wide = control_plane.get_wide("stj", team.namespace, "finished")
    shown = ("LOSS", "EVAL-LOSS", "TOKENS/S", "TFLOPS/DEVICE", "MFU", "ETA-SECONDS", "PROGRESS-%", "RESTARTS")
    # The last poll's throughput; no ETA once it succeeded, and no percentage from the built-in trainer.
    assert [wide[column] for column in shown] == ["1.099", "1.235", "128", "0.5", "0.25", "", "", "0"]


def test_damaged_checkpoints_rank_zero_set_aside_get_one_warning_event(team):
    with ProgressServer(RANK0_PROGRESS | {"checkpointsSetAside": ["step-00000020.corrupt"]}) as server:
        team.submit("resumed", training={"metricsPort": server.port, "checkpoint": {"dir": "/ckpt"}})
        team.start_pods("resumed-g0")
        team.wait_status("resumed", lambda s: (s.get("progress") or {}).get("checkpointsSetAside"))
        time.sleep(1.0)  # several more passes: one Event, not one per pass
    warnings = [message for _, reason, message in team.events("resumed") if reason == "CheckpointSetAside"]
    assert warnings == [
        "damaged checkpoints moved aside in /ckpt: step-00000020.corrupt; training resumed from the newest sound "
        "one (rank 0's log says what was wrong)"
    ]


def test_hostile_progress_endpoints_delay_no_other_jobs_ttl(team):
    """Jobs whose rank 0 answers /progress with garbage, slowly, at length or not at all come first in
    every pass; a finished job after them still expires on time, and the operator keeps working."""
    shapes = ("list", "not-http", "deep", "trickle", "huge", "silent")
    with contextlib.ExitStack() as stack:
        for shape in shapes:
            server = stack.enter_context(HostileServer(shape))
            team.submit(f"aaa-{shape}", training={"metricsPort": server.port})
            team.start_pods(f"aaa-{shape}-g0")
        for shape in shapes:
            team.wait_phase(f"aaa-{shape}", "Running")
        started = time.monotonic()
        team.submit("zzz-victim", ttlSecondsAfterFinished=0)
        team.start_pods("zzz-victim-g0", phase="Succeeded")
        wait_until(lambda: team.stj("zzz-victim") is None, OPERATOR_REACTION_S, "zzz-victim deleted")
        assert time.monotonic() - started < 15  # a pass at 0.3 s intervals, each read at most 2 s
        assert all("progress" not in team.stj(f"aaa-{shape}")["status"] for shape in shapes)


def test_a_non_finite_loss_is_reported_as_such_never_as_nan(team):
    with HostileServer("nan") as server:
        team.submit("diverged", training={"metricsPort": server.port})
        team.start_pods("diverged-g0")
        status = team.wait_status("diverged", lambda s: (s.get("progress") or {}).get("lossFinite") is False)
        time.sleep(1.0)  # several more passes: one Event, not one per pass
    assert status["progress"].pop("readAt")
    assert status["progress"] == {
        "step": 9,
        "maxSteps": 30,
        "lossFinite": False,
        "updatedAt": "2026-12-01T00:00:00Z",
        "generation": 0,
    }
    warnings = [message for kind, reason, message in team.events("diverged") if reason == "LossNotFinite"]
    assert warnings == ["rank 0 reports a non-finite loss at step 9: the run diverged"]


def test_a_child_the_api_server_refuses_fails_the_job_with_the_servers_message(team):
    # Passes the CRD and the operator's checks (an env source is the cluster's to judge); the Job is refused.
    team.submit("refused", env=[{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.nonsense"}}}])
    status = team.wait_phase("refused", "Failed")["status"]
    failed = condition({"status": status}, "Failed")
    assert failed["reason"] == "ChildRejected" and "the API server refused Job refused-g0" in failed["message"]
    assert "error converting fieldPath: field label not supported: metadata.nonsense" in failed["message"]
    assert [reason for kind, reason, _ in team.events("refused") if kind == "Warning"] == ["ChildRejected"]


def test_a_child_name_held_by_someone_else_is_a_name_conflict_never_adopted(team):
    theirs = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken"},
              "spec": {"clusterIP": "None", "selector": {"app": "theirs"}}}  # fmt: skip
    team.kube.create("services", theirs, team.namespace)
    team.submit("taken")
    status = team.wait_phase("taken", "Failed")["status"]
    failed = condition({"status": status}, "Failed")
    assert failed["reason"] == "NameConflict" and "Service taken already exists" in failed["message"]
    service = team.kube.get("services", team.namespace, "taken")
    assert "ownerReferences" not in service["metadata"] and service["spec"]["selector"] == {"app": "theirs"}
    assert team.children("taken", "jobs") == []


def test_a_job_deleted_and_created_again_waits_for_its_predecessors_children(team):
    """Not a name conflict: the children of the deleted job of the same name are about to be collected."""
    first = team.submit("again")
    team.wait_phase("again", "Pending")
    team.kube.delete("stj", team.namespace, "again")
    second = team.submit("again")
    team.wait_phase("again", "Pending")
    owners = lambda kind: [ref["uid"] for c in team.children("again", kind) for ref in c["metadata"]["ownerReferences"]]  # noqa: E731
    uid = second["metadata"]["uid"]
    wait_until(
        lambda: owners("services") == [uid, uid] and owners("jobs") == [uid],
        OPERATOR_REACTION_S,
        "the children owned by the job",
    )
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert "NameConflict" not in [reason for _, reason, _ in team.events("again")]


def test_a_foreign_pod_with_a_jobs_labels_does_not_fail_its_gang(team):
    team.submit("victim")
    team.wait_phase("victim", "Pending")
    # ScaleTrain's labels only: with the Job controller's own, the Job would adopt the orphan (as it does).
    labels = {
        k: v for k, v in team.pods("victim-g0")[0]["metadata"]["labels"].items() if "batch.kubernetes.io" not in k
    }
    intruder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder", "labels": labels},
                "spec": {"containers": [{"name": "x", "image": "busybox"}]}}  # fmt: skip
    team.fail_pod(team.kube.create("pods", intruder, team.namespace), exit_code=1)
    time.sleep(2.0)  # several reconciles' worth
    status = team.stj("victim")["status"]
    assert status["phase"] == "Pending" and status.get("restarts", 0) == 0 and status["currentJob"] == "victim-g0"
    assert team.kube.get("jobs", team.namespace, "victim-g0") is not None


def test_ttl_deletes_a_finished_job_with_its_children(team):
    team.submit("short-lived", ttlSecondsAfterFinished=0)
    team.start_pods("short-lived-g0", phase="Succeeded")  # the Job controller then completes the Job
    wait_until(lambda: team.stj("short-lived") is None, OPERATOR_REACTION_S, "short-lived deleted")
    for kind in ("jobs", "services", "pods"):  # the garbage collector follows the ownerReferences
        wait_until(
            lambda kind=kind: team.children("short-lived", kind) == [],
            OPERATOR_REACTION_S,
            "short-lived's children deleted",
        )


def test_kubectl_apply_and_get_show_the_printer_columns(team, control_plane):
    example = yaml.safe_load((REPO / "examples" / "cpu-gloo.yaml").read_text())
    control_plane.kubectl("apply", "-n", team.namespace, "-f", str(REPO / "examples" / "cpu-gloo.yaml"))
    name = example["metadata"]["name"]
    team.wait_phase(name, "Pending")
    table = control_plane.kubectl("get", "stj", "-n", team.namespace, name).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "NODES", "DESIRED", "STEP", "LOSS", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == [name, "Pending", "2", "2"]
    selector = f"scaletrain.io/job-name={name}"
    jobs = control_plane.kubectl("get", "jobs", "-n", team.namespace, "-l", selector, "-o", "name")
    assert jobs.stdout.split() == [f"job.batch/{name}-g0"]


def test_metrics_endpoint_counts_jobs(team):
    team.submit("counted")
    team.wait_phase("counted", "Pending")
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).read().decode()
    created = next(line for line in text.splitlines() if line.startswith('scaletrain_jobs_total{outcome="created"}'))
    assert float(created.split()[-1]) >= 1
    assert "scaletrain_reconcile_seconds_count" in text


def test_events_reference_the_job(team):
    team.submit("evented")
    team.wait_phase("evented", "Pending")
    event = next(e for e in team.kube.list("events", team.namespace) if e["involvedObject"]["name"] == "evented")
    assert event["involvedObject"]["kind"] == "ScaleTrainJob"
    assert event["involvedObject"]["uid"] == team.stj("evented")["metadata"]["uid"]


def test_steady_state_makes_no_writes(installed, control_plane):
    """Last in this module: with every job above settled, the operator writes nothing (no patch loops)."""
    time.sleep(1.0)
    mark = control_plane.audit.mark()
    time.sleep(1.5)
    # kopf's peering keepalive, once a lifetime (58 s of 60), is a heartbeat, not a patch loop.
    requests = control_plane.audit.requests(installed[0].user, after=mark)
    writes = [r for r in requests if r.is_write and r.resource != "kopfpeerings.kopf.dev"]
    assert writes == []
