"""Whole training jobs on the real control plane, for the e2e tier: a watched namespace with its operator
(as the chart installs it) and fake nodes whose pods run on this machine (kubelet.py), and the builders
and waits the e2e tests share. ScaleTrainJobs really train here: 2 nodes × 1 process, gloo, a tiny GPT."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scaletrain_operator.local.status_reports import serving_pki

from .jobs import patched
from .kube import Kube
from .kubelet import FakeNode, Kubelet
from .kueue import local_queue
from .operator_harness import PROGRESS_EACH_READ, QUIET, OperatorInstall, Team, install_watching, operator_process
from .timeouts import WHOLE_JOB_S
from .trainer_runs import BASE_CONFIG, TRAINER_ENV, free_port, plugin_data
from .waiting import wait_until

CHECKPOINT_EVERY = 5
HANG_TIMEOUT_S = 4  # training.hangTimeoutSeconds for the hang tests
# Rank 0's /progress by its pod IP: the operator runs on this machine, outside the pods' DNS.
OPERATOR_ENV = {"SCALETRAIN_OPERATOR_PROGRESS_URL": "http://{pod_ip}:{port}/progress"}
OPERATOR_ARGS = (*PROGRESS_EACH_READ, *QUIET)


@contextmanager
def e2e_operator(install: OperatorInstall) -> Iterator[Any]:
    """The operator process of an e2e namespace (started again by a test that restarts it)."""
    with operator_process(install, *OPERATOR_ARGS, env=OPERATOR_ENV) as process:
        yield process


@contextmanager
def queued_namespace(
    kueue, workdir: Path, nodes: Sequence[FakeNode], queue: dict, flavor: dict, extra=()
) -> Iterator[Team]:
    """A watched namespace with its operator and fake nodes on Kueue's control plane, and a LocalQueue
    "team" in it for `queue` (a ClusterQueue of `flavor`); the cluster-scoped objects go afterwards."""
    cluster_scoped = [*extra, flavor, queue]
    for obj in cluster_scoped:
        kueue.create(obj)
    try:
        with e2e_namespace(kueue.control_plane, workdir, nodes) as team, e2e_operator(team.install):
            kueue.create(local_queue("team", team.namespace, queue["metadata"]["name"]))
            yield team
    finally:
        for obj in reversed(cluster_scoped):
            kueue.delete(obj)


@contextmanager
def e2e_namespace(control_plane, workdir: Path, nodes: Sequence[FakeNode]) -> Iterator[Team]:
    """One watched namespace with the chart installed, and `nodes` whose pods run here; no operator yet
    (e2e_operator). The Team has its `kubelet`, `workdir` and `install`."""
    namespace = control_plane.create_namespace(f"e2e-{free_port()}")
    install = install_watching(control_plane, namespace, workdir)
    with Kubelet(control_plane.api_client(), nodes, workdir / "kubelet", namespaces=[namespace]) as kubelet:
        yield Team(Kube(control_plane.api_client()), namespace, kubelet=kubelet, workdir=workdir, install=install)


def status_report_args(team: Team, port: int | None = None, url_port: int | None = None) -> tuple[str, ...]:
    """The operator's arguments that serve the status-report endpoint where the team's pods reach this machine
    (the kubelet's host address), with a certificate for that address: on `port` (default: a free one), and
    told to the pods at `url_port` (default: the same; another where a front door relays to it)."""
    address = team.kubelet.executor.network.host_ip
    tls = serving_pki(team.workdir / "status-reports-tls", address)
    port = port or free_port()
    return (f"--status-reports-port={port}", f"--status-reports-url=https://{address}:{url_port or port}",
            f"--status-reports-tls-dir={tls}")  # fmt: skip


def paced(seconds_per_read=0.01):
    """The test data set, slowed down so that the operator sees the job running (and a test can act)."""
    return plugin_data("SlowSynthetic", seconds_per_read=seconds_per_read)


def submit_training(team, name, training=None, **spec):
    """A 2-node CPU job writing checkpoints and metrics under the test's workdir, which every pod mounts
    at the same path (a hostPath volume: the shared storage a multi-node job's checkpoints need), so that
    the test reads what the pods wrote."""
    directory = team.workdir / name
    directory.mkdir(parents=True, exist_ok=True)
    config = patched(
        BASE_CONFIG,
        {"checkpoint": {"dir": str(directory / "checkpoints"), "everySteps": CHECKPOINT_EVERY},
         "outputDir": str(directory / "out")},
    )  # fmt: skip
    env = [{"name": name, "value": value} for name, value in TRAINER_ENV.items()]
    shared = {"volumes": [{"name": "workdir", "hostPath": {"path": str(directory)}}],
              "volumeMounts": [{"name": "workdir", "mountPath": str(directory)}]}  # fmt: skip
    team.submit(name, training=patched(config, training or {}), env=env, **(shared | spec))
    return directory


def wait_event(team, name, reason):
    """The messages of the job's Events with `reason`, once there is one."""
    return wait_until(
        lambda: [message for _, said, message in team.events(name) if said == reason],
        WHOLE_JOB_S,
        f"a {reason} Event of {team.namespace}/{name}",
    )


def steps(directory):
    path = directory / "out" / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def losses(directory):
    """Each step's loss, as the job's rank 0 wrote it to metrics.jsonl."""
    return [json.loads(line)["loss"] for line in (directory / "out" / "metrics.jsonl").read_text().splitlines()]


def text_of(path):
    return path.exists() and path.read_text()


def rank_log(team, job_name, rank):
    """What the pod of `rank` in the gang Job `job_name` has written so far ("" before it has a pod)."""
    pod = next((p for p in pods_of(team, job_name) if f"{job_name}-{rank}-" in p["metadata"]["name"]), None)
    return pod and team.kubelet.running(team.namespace, pod["metadata"]["name"]).log_path.read_text() or ""


def pods_of(team, job_name):
    return sorted(
        team.kube.list("pods", team.namespace, f"batch.kubernetes.io/job-name={job_name}"),
        key=lambda pod: pod["metadata"]["name"],
    )
