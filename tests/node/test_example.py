"""The README's way to try ScaleTrain on a real Kubernetes: `make cluster`, then `kubectl apply -f
examples/cpu-gloo.yaml` with the local trainer image. The job runs to Succeeded in containers of the
node's runtime, evaluates, and leaves its checkpoints and outputs on the claim."""

from __future__ import annotations

import yaml

from scaletrain_testing.jobs import REPO, load_yaml
from scaletrain_testing.local_cluster import EXAMPLE_CLAIM
from scaletrain_testing.node_jobs import container_id
from scaletrain_testing.operator_harness import Team
from scaletrain_testing.timeouts import TRAINER_RUN_S


def test_the_cpu_example_runs_to_succeeded(node_cluster, restricted_namespace):
    team = Team(node_cluster.kube, restricted_namespace)
    volume = node_cluster.cluster.provide_claim(team.namespace, EXAMPLE_CLAIM)
    example = load_yaml(REPO / "examples" / "cpu-gloo.yaml")
    example["spec"]["image"] = node_cluster.images["TRAINER_IMAGE"]
    node_cluster.cluster.kubectl("--namespace", team.namespace, "apply", "-f", "-", stdin=yaml.safe_dump(example))
    status = team.wait_phase("cpu-gloo", "Succeeded", TRAINER_RUN_S)["status"]
    assert status["progress"]["step"] == example["spec"]["training"]["maxSteps"]
    assert status["progress"]["evalLoss"] > 0
    pods = team.kube.list("pods", team.namespace, "scaletrain.io/job-name=cpu-gloo")
    assert len(pods) == 2 and all(container_id(pod) for pod in pods)
    saved = node_cluster.cluster.node_run("find", volume, "-maxdepth", "2", "-name", "step-*").split()
    assert saved, "no checkpoint on the claim"
