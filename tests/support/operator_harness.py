"""The real kopf operator against the API emulator: settings and a Cluster passed through kopf's memo,
the operator in this process or in its own, and the moves of a Job controller and kubelet that the
operator tests play by hand."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import kopf
import yaml

from scaletrain_operator.api.naming import COMPLETION_INDEX_ANNOTATION
from scaletrain_operator.controller import handlers  # noqa: F401  (importing it registers the handlers with kopf)
from scaletrain_operator.controller.cluster import Cluster
from scaletrain_operator.controller.settings import OperatorConfig

from .emulator import EmulatedCluster
from .jobs import REPO, base_job

NAMESPACE = "team-a"
PEERING_CRDS = list(yaml.safe_load_all((REPO / "charts/scaletrain/crds/kopf-peering.yaml").read_text()))
TIMEOUT = 10.0


def operator_config(metrics_port: int = 0) -> OperatorConfig:
    """The in-process operator's settings: NAMESPACE only, progress from 127.0.0.1 every 0.3 s."""
    return OperatorConfig(
        namespaces=[NAMESPACE],
        progress_url="http://127.0.0.1:{port}/progress",
        progress_interval_seconds=0.3,
        metrics_port=metrics_port,
        request_timeout_seconds=5.0,
    )


def emulated_cluster() -> EmulatedCluster:
    """An emulated cluster with the operator's CRD and NAMESPACE (a context manager: it runs in the block)."""
    return EmulatedCluster(namespaces=(NAMESPACE,))


@contextmanager
def running_operator(cluster, config: OperatorConfig | None = None):
    """The operator's handlers in this process, configured as main.py does: through kopf's memo."""
    config = config or operator_config()
    memo = kopf.Memo(config=config, cluster=Cluster(cluster.api_client(), config.request_timeout_seconds))
    with cluster.operator(kopf.get_default_registry(), namespaces=[NAMESPACE], memo=memo):
        yield


@contextmanager
def operator_process(cluster, *args):
    """`scaletrain-operator ARGS` in its own process, as its Deployment runs it, against `cluster`.
    Its log goes to a file (a pipe nobody reads would block it), `process.log_path`, shown if the test fails."""
    command = [sys.executable, "-m", "scaletrain_operator.controller.main", *args]
    env = os.environ | {"KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1"}  # as in its image
    with tempfile.NamedTemporaryFile("w", suffix=".log") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        process.log_path = Path(log.name)  # read through its own handle: the child writes through `log`

        def show_log():
            print("operator log (tail):\n" + process.log_path.read_text()[-5000:])

        try:
            yield process
        except BaseException:
            show_log()
            raise
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                show_log()
                raise


def create_peering(cluster, name, namespace=None):
    """kopf's peering object, as the chart creates it: cluster-wide, or in `namespace`."""
    kind = "KopfPeering" if namespace else "ClusterKopfPeering"
    plural = "kopfpeerings" if namespace else "clusterkopfpeerings"
    body = {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": name}}
    return cluster.create(f"kopf.dev/v1/{plural}", body, namespace)


def submit(cluster, name, **spec):
    document = base_job(**spec)
    document["metadata"] = {"name": name, "namespace": NAMESPACE}
    return cluster.create("stj", document)


def stj(cluster, name):
    return cluster.get("stj", NAMESPACE, name)


def wait_phase(cluster, name, phase, timeout=TIMEOUT):
    return cluster.wait_until(
        lambda: (s := stj(cluster, name)) and s.get("status", {}).get("phase") == phase and s, timeout=timeout
    )


def children(cluster, name, kind):
    return cluster.list(kind, NAMESPACE, label_selector=f"scaletrain.io/job-name={name}")


def start_pods(cluster, job_name, phase="Running"):
    """Play the Job controller and the kubelet: one pod per completion index, in `phase`."""
    job = cluster.wait_until(lambda: cluster.get("jobs", NAMESPACE, job_name), timeout=TIMEOUT)
    labels = job["spec"]["template"]["metadata"]["labels"]
    return [
        cluster.create_pod(
            NAMESPACE,
            f"{job_name}-{index}-x",
            labels=labels,
            annotations={COMPLETION_INDEX_ANNOTATION: str(index)},
            phase=phase,
            owner=job,
        )
        for index in range(job["spec"]["completions"])
    ]


def fail_pod(cluster, pod_name, exit_code):
    cluster.set_pod_phase(NAMESPACE, pod_name, "Failed", exit_code=exit_code)


def events(cluster, name):
    return [
        (e["type"], e["reason"], e["message"])
        for e in cluster.list("events", NAMESPACE)
        if e["involvedObject"]["name"] == name
    ]


def condition(obj, kind):
    return next((c for c in obj["status"]["conditions"] if c["type"] == kind), None)
