"""2-node jobs on the real control plane with their checkpoints on S3 (SeaweedFS, reached by the pods at the
kubelet stand-in's host address), the credentials in a Secret that the job names in spec.objectStorage: a
node lost mid-run restarts the gang, which resumes exactly from the newest checkpoint on the store, with
synchronous and with asynchronous saves; and a key the store refuses fails the job at once with the reason."""

from __future__ import annotations

import secrets

import pytest

from scaletrain_testing.e2e_jobs import (
    CHECKPOINT_EVERY,
    e2e_namespace,
    e2e_operator,
    losses,
    paced,
    pods_of,
    rank_log,
    steps,
    submit_training,
)
from scaletrain_testing.jobs import secret_key_ref
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.seaweedfs import SeaweedS3
from scaletrain_testing.timeouts import WHOLE_JOB_S
from scaletrain_testing.trainer_runs import config_for, run_trainer
from scaletrain_testing.waiting import wait_until

NODES = [FakeNode("s3-node-1"), FakeNode("s3-node-2")]
CREDENTIALS = "s3-credentials"
MAX_STEPS = 20


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with e2e_namespace(control_plane, tmp_path_factory.mktemp("e2e-s3"), NODES) as team, e2e_operator(team.install):
        yield team


@pytest.fixture(scope="module")
def store(cluster):
    """An S3 server where the cluster's pods reach this machine, with a bucket, and the admin's key in the
    Secret CREDENTIALS of the cluster's namespace."""
    with SeaweedS3(cluster.workdir / "seaweedfs", cluster.kubelet.executor.network.host_ip) as server:
        server.make_bucket("checkpoints")
        access_key, secret_key = server.credentials()
        secret = {
            "metadata": {"name": CREDENTIALS},
            "stringData": {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key},
        }
        cluster.kube.create("secrets", secret, cluster.namespace)
        yield server


def object_storage(store, secret=CREDENTIALS):
    return {"endpoint": store.endpoint, "region": store.region, "credentialsSecret": {"name": secret}}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The jobs' training config run through without a fault, on this machine (2 processes, no checkpoints)."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    run = run_trainer(directory, config_for(directory, training_on_s3("unused") | {"checkpoint": {}}), nproc=2)
    assert run.returncode == 0, run.output[-3000:]
    return run


def training_on_s3(name, asynchronous=False):
    return {
        "data": paced(0.02),
        "maxSteps": MAX_STEPS,
        "checkpoint": {"dir": f"s3://checkpoints/{name}", "async": asynchronous},
    }


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_lost_node_restarts_the_gang_which_resumes_exactly_from_s3(cluster, store, asynchronous, uninterrupted):
    name = f"s3-{'async' if asynchronous else 'sync'}"
    training = training_on_s3(name, asynchronous)
    directory = submit_training(cluster, name, training, maxRestarts=2, objectStorage=object_storage(store))
    wait_until(lambda: len(steps(directory)) >= CHECKPOINT_EVERY + 2, WHOLE_JOB_S, "steps logged", interval_s=0.05)
    # An asynchronous save may still be uploading two steps later: a node lost before its commit rightly
    # resumes from step 0, which this test is not about.
    saved = f"saved checkpoint s3://checkpoints/{name}/step-"
    wait_until(lambda: saved in rank_log(cluster, f"{name}-g0", 0), WHOLE_JOB_S, "a checkpoint saved", interval_s=0.05)
    node_1 = next(p for p in pods_of(cluster, f"{name}-g0") if p["metadata"]["name"].startswith(f"{name}-g0-1-"))
    cluster.kubelet.running(cluster.namespace, node_1["metadata"]["name"]).stop(grace_seconds=0)  # a lost node
    killed_at = max(steps(directory))

    status = cluster.wait_phase(name, "Succeeded", WHOLE_JOB_S)["status"]
    assert status["restarts"] == 1, cluster.events(name)
    logged = steps(directory)
    resumed_at = next(i for i in range(1, len(logged)) if logged[i] <= logged[i - 1])
    first_after = logged[resumed_at]
    assert first_after > 1 and (first_after - 1) % CHECKPOINT_EVERY == 0 and first_after - 1 <= killed_at + 1
    assert logged[resumed_at:] == list(range(first_after, MAX_STEPS + 1))  # each step once after the resume
    assert f"resumed from s3://checkpoints/{name}/step-{first_after - 1:08d}" in rank_log(cluster, f"{name}-g1", 0)

    by_step = dict(zip(logged, losses(directory), strict=True))  # the resumed gang's, for steps logged twice
    assert [by_step[step] for step in range(1, MAX_STEPS + 1)] == uninterrupted.losses()


def test_a_key_the_store_refuses_fails_the_job_at_once_with_the_reason(cluster, store):
    wrong = f"wrong-{secrets.token_hex(3)}"
    secret = {"metadata": {"name": wrong}, "stringData": {"AWS_ACCESS_KEY_ID": "nobody", "AWS_SECRET_ACCESS_KEY": "x"}}
    cluster.kube.create("secrets", secret, cluster.namespace)
    name = "s3-refused"
    submit_training(cluster, name, training_on_s3(name), maxRestarts=2, objectStorage=object_storage(store, wrong))
    status = cluster.wait_phase(name, "Failed", WHOLE_JOB_S)["status"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert status["restarts"] == 0
    assert "checkpoint storage refused it" in failed["message"] and "InvalidAccessKeyId" in failed["message"]
    assert "s3://checkpoints/s3-refused" in failed["message"]
    # The key reached the pods from the Secret alone: the Job names it, and nothing else says it.
    (container,) = cluster.kube.get("jobs", cluster.namespace, f"{name}-g0")["spec"]["template"]["spec"]["containers"]
    key = next(var for var in container["env"] if var["name"] == "AWS_ACCESS_KEY_ID")
    assert key == {"name": "AWS_ACCESS_KEY_ID", "valueFrom": secret_key_ref(wrong, "AWS_ACCESS_KEY_ID")}
    assert "nobody" not in str(cluster.events(name)) + str(status)
