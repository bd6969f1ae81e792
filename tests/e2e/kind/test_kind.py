"""The CPU example on a real Kubernetes cluster (kind): build both images from the Dockerfile, load them
into kind, install the Helm chart, apply examples/cpu-gloo.yaml and wait for Succeeded.

Needs docker (with a running engine), kind, helm and kubectl; skipped otherwise. Runs in
.github/workflows/e2e-kind.yaml on a hosted runner. SCALETRAIN_E2E_KEEP=1 keeps the cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scaletrain_testing.jobs import REPO

CLUSTER = "scaletrain-e2e"
NAMESPACE = "scaletrain-e2e"
OPERATOR_IMAGE, TRAINER_IMAGE = "scaletrain/operator:e2e", "scaletrain/trainer:e2e"
CPU_TORCH = "https://download.pytorch.org/whl/cpu"  # a CPU trainer image: kind nodes have no GPU
EXAMPLE = REPO / "examples" / "cpu-gloo.yaml"


def _tool(name: str) -> str | None:
    local = Path(sys.executable).parent / name  # kubectl comes with the dev extra
    return str(local) if local.exists() else shutil.which(name)


def _missing() -> list[str]:
    missing = [name for name in ("docker", "kind", "helm", "kubectl") if _tool(name) is None]
    if "docker" not in missing and subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        missing.append("a running docker engine")
    return missing


pytestmark = pytest.mark.skipif(bool(_missing()), reason=f"kind e2e needs {', '.join(_missing())}")


def run(*command: str, input: str | None = None, timeout: float = 1800) -> str:
    tool = _tool(command[0]) or command[0]
    print("+", " ".join(command), flush=True)
    result = subprocess.run([tool, *command[1:]], input=input, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


@pytest.fixture(scope="module")
def kind_cluster():
    existing = run("kind", "get", "clusters").split()
    if CLUSTER not in existing:
        run("kind", "create", "cluster", "--name", CLUSTER, "--wait", "180s")
    try:
        yield
    finally:
        if not os.environ.get("SCALETRAIN_E2E_KEEP"):
            run("kind", "delete", "cluster", "--name", CLUSTER)


@pytest.fixture(scope="module")
def images(kind_cluster):
    run("docker", "build", "--target", "operator", "-t", OPERATOR_IMAGE, str(REPO))
    cpu_trainer = ("--build-arg", "TRAINER_BASE=python:3.11-slim", "--build-arg", f"TORCH_EXTRA_INDEX_URL={CPU_TORCH}")
    run("docker", "build", "--target", "trainer", *cpu_trainer, "-t", TRAINER_IMAGE, str(REPO))
    for image in (OPERATOR_IMAGE, TRAINER_IMAGE):
        run("kind", "load", "docker-image", image, "--name", CLUSTER)


@pytest.fixture(scope="module")
def operator(images):
    repository, tag = OPERATOR_IMAGE.split(":")
    values = ("--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never")
    run("helm", "upgrade", "--install", "scaletrain", str(REPO / "charts" / "scaletrain"), "--namespace",
        "scaletrain-system", "--create-namespace", *values, "--wait", "--timeout", "5m")  # fmt: skip
    run("kubectl", "create", "namespace", NAMESPACE)
    yield
    run("kubectl", "delete", "namespace", NAMESPACE, "--wait=false")


def test_the_cpu_example_succeeds_on_kind(operator):
    job = yaml.safe_load(EXAMPLE.read_text())
    job["spec"] |= {"image": TRAINER_IMAGE, "imagePullPolicy": "Never"}
    claim = job["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]  # kind's default StorageClass serves it
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    run("kubectl", "apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump_all([pvc, job]))
    name = job["metadata"]["name"]
    try:
        run(
            "kubectl",
            "wait",
            "-n",
            NAMESPACE,
            f"stj/{name}",
            "--for=jsonpath={.status.phase}=Succeeded",
            "--timeout=20m",
        )
    except AssertionError:
        for command in (
            ("describe", "stj", name),
            ("get", "pods", "-o", "wide"),
            ("logs", "-l", f"scaletrain.io/job-name={name}"),
        ):
            print(subprocess.run([_tool("kubectl"), "-n", NAMESPACE, *command], capture_output=True, text=True).stdout)
        raise
    status = yaml.safe_load(run("kubectl", "get", "-n", NAMESPACE, f"stj/{name}", "-o", "yaml"))["status"]
    assert status["restarts"] == 0 and status["nodes"]["succeeded"] == job["spec"]["nodes"]
