"""The README's way to try ScaleTrain on a real Kubernetes: `make cluster`, then `kubectl apply -f
examples/cpu-gloo.yaml` with the local trainer image. The job runs to Succeeded in containers of the
node's runtime, evaluates, and leaves its outputs on the claim and its checkpoints on an S3 store (the e2e
tier runs the example with its checkpoints on the claim)."""

from __future__ import annotations

import yaml

from scaletrain_testing.jobs import REPO, load_yaml
from scaletrain_testing.local_cluster import EXAMPLE_CLAIM, GATEWAY
from scaletrain_testing.node_jobs import container_id
from scaletrain_testing.operator_harness import Team
from scaletrain_testing.seaweedfs import SeaweedS3
from scaletrain_testing.timeouts import TRAINER_RUN_S


def test_the_cpu_example_runs_to_succeeded_with_its_checkpoints_on_an_s3_store(
    node_cluster, restricted_namespace, tmp_path
):
    """The example as a user applies it, its outputs on the claim and its checkpoints on SeaweedFS, which runs
    on the host where the pods reach it (the bridge's address), its key in a Secret the job names."""
    team = Team(node_cluster.kube, restricted_namespace)
    volume = node_cluster.cluster.provide_claim(team.namespace, EXAMPLE_CLAIM)
    with SeaweedS3(tmp_path / "seaweedfs", GATEWAY) as store:
        store.make_bucket("cpu-gloo")
        access_key, secret_key = store.credentials()
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-credentials"},
            "stringData": {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key},
        }
        example = load_yaml(REPO / "examples" / "cpu-gloo.yaml")
        example["spec"]["image"] = node_cluster.images["TRAINER_IMAGE"]
        example["spec"]["training"]["checkpoint"]["dir"] = "s3://cpu-gloo/run"
        example["spec"]["objectStorage"] = {
            "endpoint": store.endpoint,
            "region": store.region,
            "credentialsSecret": {"name": "s3-credentials"},
        }
        documents = yaml.safe_dump_all([secret, example])
        node_cluster.cluster.kubectl("--namespace", team.namespace, "apply", "-f", "-", stdin=documents)
        status = team.wait_phase("cpu-gloo", "Succeeded", TRAINER_RUN_S)["status"]
        manifests = sorted(store.filesystem().glob("cpu-gloo/run/step-*/manifest.json"))
    assert status["progress"]["step"] == example["spec"]["training"]["maxSteps"]
    assert status["progress"]["evalLoss"] > 0
    pods = team.kube.list("pods", team.namespace, "scaletrain.io/job-name=cpu-gloo")
    assert len(pods) == 2 and all(container_id(pod) for pod in pods)
    assert manifests == ["cpu-gloo/run/step-00000150/manifest.json", "cpu-gloo/run/step-00000200/manifest.json"]
    outputs = node_cluster.cluster.node_run("find", volume, "-name", "metrics.jsonl").split()
    assert outputs, "no metrics.jsonl on the claim"
