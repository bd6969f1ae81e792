"""A gang that restarts in place, as its pods are rendered (render/in_place.py), and a pod whose agent said how its
workload ended, as the gang policy judges it (in_place.as_said_by_agents)."""

from __future__ import annotations

from datetime import datetime, timezone

from scaletrain_operator.api.conditions import PodPhase
from scaletrain_operator.in_place import WorkloadEnd, as_said_by_agents
from scaletrain_operator.local.pod_spec import restart_rules, restarts_all_containers
from scaletrain_operator.policy.gang_policy import Action, GangLimits, judge, pod_outcome
from scaletrain_operator.render.child_annotations import hash_of, with_spec_hash
from scaletrain_operator.render.children import render_job
from scaletrain_operator.render.in_place import STATE_DIR, replaces_disrupted_pods, restarting_in_place
from scaletrain_testing.gang_objects import AGENT_IMAGE, STATUS_ENDPOINT, gang_pod, scaletrain_job
from scaletrain_testing.jobs import DELETE
from scaletrain_trainer.contract.exit_codes import EXIT_CONFIG_ERROR, EXIT_RESTART_IN_PLACE

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=timezone.utc)


def test_the_built_in_trainers_pods_run_the_agent_whose_restart_code_restarts_the_pod_in_place():
    job = scaletrain_job()
    plain = with_spec_hash(render_job(job, 0))
    restarting = restarting_in_place(with_spec_hash(render_job(job, 0)), job, STATUS_ENDPOINT, AGENT_IMAGE)
    assert hash_of(restarting) == hash_of(plain)  # how restarts go is not the gang's spec
    pod = restarting["spec"]["template"]["spec"]
    (trainer,) = pod["containers"]
    assert trainer["command"] == ["python", "-m", "scaletrain_trainer.agent", "--", "python", "-m",
                                  "scaletrain_trainer.launch"]  # fmt: skip
    rules = restart_rules(trainer, ("containers", 0))
    assert restarts_all_containers(rules, EXIT_RESTART_IN_PLACE)
    assert not any(restarts_all_containers(rules, code) for code in (0, 1, 137, EXIT_CONFIG_ERROR))
    env = {var["name"]: var.get("value") for var in trainer["env"]}
    assert env["SCALETRAIN_IN_PLACE_URL"] == "https://scaletrain-status-reports.scaletrain-system.svc/v1/in-place"
    assert env["SCALETRAIN_IN_PLACE_STATE"] == f"{STATE_DIR}/generation"
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"].endswith("/token")  # the pod's own, projected: no API permission
    assert "KUBEFLOW_TRAINER_SERVER_URL" not in env  # the built-in trainer serves /progress instead
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    state = next(m for m in trainer["volumeMounts"] if m["mountPath"] == STATE_DIR)
    assert "emptyDir" in volumes[state["name"]]  # kept by an in-place restart, unlike the writable layer


def test_a_script_of_ones_own_gets_the_agent_from_an_init_container_and_runs_it_with_its_images_python():
    own = scaletrain_job(training=DELETE, command=["torchrun", "--nproc-per-node=1", "train.py"])
    restarting = restarting_in_place(with_spec_hash(render_job(own, 0)), own, STATUS_ENDPOINT, AGENT_IMAGE)
    pod = restarting["spec"]["template"]["spec"]
    (writer,) = pod["initContainers"]
    assert writer["image"] == AGENT_IMAGE and writer["command"][-1] == STATE_DIR
    assert writer["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # Pod Security "restricted" takes it
    (trainer,) = pod["containers"]
    assert trainer["command"] == ["python3", f"{STATE_DIR}/agent.pyz", "--", "torchrun", "--nproc-per-node=1",
                                  "train.py"]  # fmt: skip
    assert restarts_all_containers(restart_rules(trainer, ("containers", 0)), EXIT_RESTART_IN_PLACE)


def test_the_job_controller_replaces_a_disrupted_pod_of_an_in_place_gang_but_not_of_an_elastic_one():
    """A pod evicted, or of a node drained or lost, is replaced where the gang restarts in place; an elastic gang's
    Job fails, and the next gang goes on at the size there is room for."""
    job, elastic = scaletrain_job(), scaletrain_job(nodes=4, elastic={"minNodes": 2})
    restarting = restarting_in_place(render_job(job, 0), job, STATUS_ENDPOINT, AGENT_IMAGE)
    (disrupted, stopped) = restarting["spec"]["podFailurePolicy"]["rules"]
    assert disrupted == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert stopped["action"] == "FailJob" and restarting["spec"]["backoffLimit"] == 0  # any other failed pod
    assert replaces_disrupted_pods(restarting) and not replaces_disrupted_pods(render_job(job, 0))
    assert not replaces_disrupted_pods(
        restarting_in_place(render_job(elastic, 0), elastic, STATUS_ENDPOINT, AGENT_IMAGE)
    )


def test_without_an_agent_image_a_script_of_ones_own_recreates_as_do_recreate_and_no_endpoint():
    own = scaletrain_job(training=DELETE, command=["torchrun", "train.py"])
    assert restarting_in_place(render_job(own, 0), own, STATUS_ENDPOINT, "") == render_job(own, 0)
    recreating = scaletrain_job(restartStrategy="Recreate")
    assert restarting_in_place(render_job(recreating, 0), recreating, STATUS_ENDPOINT, AGENT_IMAGE) == render_job(
        recreating, 0
    )
    builtin = scaletrain_job()
    assert restarting_in_place(render_job(builtin, 0), builtin, None, AGENT_IMAGE) == render_job(builtin, 0)


def test_a_pod_whose_agent_said_its_workload_ended_is_judged_as_the_pod_that_failed_so():
    healthy, running = gang_pod(0, PodPhase.RUNNING), gang_pod(1, PodPhase.RUNNING)
    config_error = {1: WorkloadEnd(0, EXIT_CONFIG_ERROR, "data.path: not a readable file", NOW)}
    pods = as_said_by_agents([healthy, running], config_error)
    said = pod_outcome(pods[1])
    assert (said.failed, said.exit_code, said.message, said.finished_at) == (True, 78, said.message, NOW)
    assert pods[0] is healthy
    limits = GangLimits.of(scaletrain_job().spec)
    assert judge([pod_outcome(p) for p in (healthy, running)], limits, restarts=0).action is Action.KEEP_RUNNING
    verdict = judge([pod_outcome(p) for p in pods], limits, restarts=0)
    assert verdict.action is Action.FAIL and verdict.exit_code == EXIT_CONFIG_ERROR  # not retried, as a pod's own
    crashed = as_said_by_agents([healthy, running], {1: WorkloadEnd(0, 1, "ValueError", NOW)})
    restart = judge([pod_outcome(p) for p in crashed], limits, restarts=0)
    assert restart.action is Action.RESTART and restart.root_cause.name == said.name
