"""A CPU/gloo job from the built trainer image, applied with kubectl in a namespace that enforces Pod
Security "restricted": its pods run in containers as the image's user 10001, checkpoint to a volume whose
root is owned by root with mode 0755, restart in place from their checkpoint when one's trainer dies (the
kubelet's RestartAllContainers), checkpoint first when one is evicted (whose pod alone is replaced), and the job
ends Succeeded with its progress in status."""

from __future__ import annotations

import re

import yaml

from scaletrain_testing.jobs import patched
from scaletrain_testing.node_jobs import PACKAGE, eviction, job, paced_training_job, plugins_config_map
from scaletrain_testing.operator_harness import Team
from scaletrain_testing.timeouts import TRAINER_RUN_S
from scaletrain_testing.trainer_runs import BASE_CONFIG
from scaletrain_testing.waiting import wait_until

MAX_STEPS = 120
CHECKPOINT_EVERY = 10
READS_PER_STEP = 8  # samples of each rank's data set per step: its half of a global batch of 16
CRASH_STEP = CHECKPOINT_EVERY + 3  # rank 1's trainer dies in this step of the first generation
TRAINER_UID = 10001  # the Dockerfile's TRAINER_UID


def running_pods(team: Team, generation: int) -> list[dict]:
    """The gang's pods of the Job made for one generation, by index, once all run their trainer container."""
    pods = team.kube.list("pods", team.namespace, f"scaletrain.io/generation={generation}")

    def running(pod: dict) -> bool:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return pod["status"].get("phase") == "Running" and all("running" in s["state"] for s in statuses)

    pods = [pod for pod in pods if running(pod)]
    return sorted(pods, key=lambda pod: pod["metadata"]["name"]) if len(pods) == 2 else []


def resumed_gang_progress(status):
    """status.progress while it is the second gang's (generation 1), else {}."""
    progress = status.get("progress") or {}
    return progress if progress.get("generation") == 1 else {}


def test_a_job_runs_recovers_and_succeeds_in_restricted_containers(node_cluster, restricted_namespace):
    cluster, team = node_cluster.cluster, Team(node_cluster.kube, restricted_namespace)
    volume = cluster.provide_claim(team.namespace, "checkpoints")
    assert cluster.node_run("stat", "--format=%u %a", volume).split() == ["0", "755"]
    job = paced_training_job(
        "gloo",
        team.namespace,
        node_cluster.images["TRAINER_IMAGE"],
        "checkpoints",
        seconds_per_read=0.02,
        maxSteps=MAX_STEPS,
        checkpoint={"everySteps": CHECKPOINT_EVERY},
    )
    crash = {"crash_at_read": READS_PER_STEP * (CRASH_STEP - 1) + 2, "crash_rank": 1, "crash_generation": 0}
    job["spec"]["training"]["data"]["source"] = f"{PACKAGE}.faults:CrashingSynthetic"
    job["spec"]["training"]["data"]["options"] |= crash
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([plugins_config_map(team.namespace), job]))

    # Recover, 1: rank 1's trainer dies after the first checkpoint: the gang restarts in place from it.
    first = wait_until(lambda: running_pods(team, 0), TRAINER_RUN_S, "the first gang running")
    # The restarted gang's rank 0 says where it resumed from in its every answer; wait for one of those.
    restarted = team.wait_status(
        "gloo",
        lambda s: s.get("restarts") == 1 and "resumedFromStep" in resumed_gang_progress(s),
        TRAINER_RUN_S,
        "a gang restart whose rank 0 answered",
    )
    assert restarted["progress"]["resumedFromStep"] >= CHECKPOINT_EVERY
    assert (restarted["gangGeneration"], restarted["currentJob"]) == (1, "gloo-g0")  # the same Job
    in_place = wait_until(lambda: running_pods(team, 0), TRAINER_RUN_S, "the gang running again")
    assert [pod["metadata"]["uid"] for pod in in_place] == [pod["metadata"]["uid"] for pod in first]
    assert all(pod["status"]["containerStatuses"][0]["restartCount"] >= 1 for pod in in_place)

    # Recover, 2: an eviction through the API; the pods checkpoint on the SIGTERM, a disruption.
    resumed_at = team.wait_status(
        "gloo",
        lambda s: (s.get("progress") or {}).get("step", 0) > restarted["progress"]["resumedFromStep"] + 5,
        TRAINER_RUN_S,
        "steps after the restart",
    )
    team.kube.request(
        "POST",
        f"/api/v1/namespaces/{team.namespace}/pods/{in_place[0]['metadata']['name']}/eviction",
        eviction(in_place[0]),
    )

    done = team.wait_phase("gloo", "Succeeded", TRAINER_RUN_S)["status"]
    assert done["restarts"] == 1 and done["disruptions"] == 1
    assert done["progress"]["step"] == MAX_STEPS
    assert (done["gangGeneration"], done["currentJob"]) == (2, "gloo-g0")  # the same Job still
    # The evicted gang saved where it stopped, after the steps seen before the eviction. The evicted rank 0's pod
    # was replaced alone, rank 1 restarted in place, and the third gang resumed from there (the replacement's log
    # says so: it may end before the operator's next progress read).
    pods = team.kube.list("pods", team.namespace, "batch.kubernetes.io/job-name=gloo-g0")
    (rank_0,) = [pod for pod in pods if pod["metadata"]["name"].startswith("gloo-g0-0-")
                 and pod["metadata"]["uid"] != in_place[0]["metadata"]["uid"]]  # fmt: skip
    (rank_1,) = [pod for pod in pods if pod["metadata"]["name"].startswith("gloo-g0-1-")]
    assert rank_1["metadata"]["uid"] == in_place[1]["metadata"]["uid"]
    log = cluster.kubectl("--namespace", team.namespace, "logs", rank_0["metadata"]["name"]).stdout
    resumed = re.search(r"resumed from \S+ at step (\d+)", log)
    assert resumed and int(resumed.group(1)) >= resumed_at["progress"]["step"], log[-2000:]

    # Run: in containers of the image, as its user, on the volume (what the pods wrote is theirs).
    owners = cluster.node_run("find", volume, "-type", "f", "-printf", "%U\\n").split()
    assert owners and set(owners) == {str(TRAINER_UID)}


def test_a_checkpoint_directory_the_user_cannot_write_fails_the_job_at_once(node_cluster, restricted_namespace):
    """A checkpoint directory on no volume is in the image's root-owned filesystem: the trainer's user may
    not create it. That is a final failure said in one line, not a crash loop of gangs with a traceback."""
    team = Team(node_cluster.kube, restricted_namespace)
    training = patched(BASE_CONFIG, {"checkpoint": {"dir": "/checkpoints/nowhere", "everySteps": 5}})
    unwritable = job("unwritable", team.namespace, node_cluster.images["TRAINER_IMAGE"], training=training)
    node_cluster.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(unwritable))
    failed = team.wait_phase("unwritable", "Failed", TRAINER_RUN_S)["status"]
    assert failed["restarts"] == 0, failed["message"]
    assert "permission denied" in failed["message"] and "/checkpoints" in failed["message"], failed["message"]
    assert "Traceback" not in failed["message"]
