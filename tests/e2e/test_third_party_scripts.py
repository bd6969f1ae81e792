"""Third-party scripts as ScaleTrainJob custom commands under run-local (2 nodes × 1 process, gloo),
behaving as they would on a cluster: `$(MASTER_ADDR)` in args is expanded, a workingDir is where
the script runs, each pod has a working directory of its own, and the caller's env stays out. A c10d
rendezvous on `localhost` fails with a network namespace per pod, as on a cluster (each pod's
`localhost` is its own), and forms only on the shared-loopback fallback. Each test runs in each pod
network mode this machine offers; its id says which, and a skipped mode says why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scaletrain_operator.local.gang import POD_NETWORK_ENV
from scaletrain_operator.local.pod_network import LOOPBACK, NAMESPACES, free_port, why_no_namespaces
from support.jobs import base_job

SCRIPTS = Path(__file__).resolve().parent / "scripts"  # on the "image": PYTHONPATH points here
TIMEOUT = 120
SENTINEL = {"SCALETRAIN_TEST_SENTINEL": "leaked"}  # in run-local's env, which no pod may see


@pytest.fixture(params=[NAMESPACES, LOOPBACK])
def network(request):
    """The pod network run-local is told to use."""
    if request.param == NAMESPACES and (missing := why_no_namespaces()) is not None:
        pytest.skip(f"per-pod network namespaces: {missing}; only the shared-loopback case runs")
    return request.param


def script_job(name, command, **spec):
    env = [{"name": "PYTHONPATH", "value": str(SCRIPTS)}, {"name": "OMP_NUM_THREADS", "value": "1"}]
    job = base_job(nodes=2, command=command, env=env, **spec)
    job["metadata"] = {"name": name}
    return job


def run_local(tmp_path, job, network):
    """run-local on `job` in `network` mode; returns its result and each pod's log, rank 0 first."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    command = [sys.executable, "-m", "scaletrain_operator.cli", "run-local", str(path), "--workdir", "work"]
    env = os.environ | SENTINEL | {POD_NETWORK_ENV: network}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    output = result.stdout + result.stderr
    assert f"pod network: {network} (" in result.stderr, output
    logs = [log.read_text() for log in sorted((tmp_path / "work" / "logs").glob("*.log"))]
    return result.returncode, output, logs


def test_master_addr_in_args_is_expanded_and_each_pod_has_its_own_cwd_and_env(tmp_path, network):
    command = ["python", "-m", "allreduce", "--master", "$(MASTER_ADDR)", "--port", "$(MASTER_PORT)"]
    returncode, output, logs = run_local(tmp_path, script_job("tp-master", command), network)
    assert returncode == 0, output
    # The master's DNS name, resolved in each pod's network; on the loopback it points at this machine.
    master = "tp-master-g0-0.tp-master" if network == NAMESPACES else "127.0.0.1"
    for rank, log in enumerate(logs):
        assert f"rank {rank} of 2: sum 3, master {master}, " in log and "caller's env absent" in log, log
    cwds = {line.split("cwd ")[1].split(",")[0] for log in logs for line in log.splitlines() if "cwd " in line}
    assert len(cwds) == 2 and all(cwd.startswith(str(tmp_path / "work" / "pods")) for cwd in cwds), cwds


def test_a_working_dir_is_where_the_script_runs(tmp_path, network):
    code = tmp_path / "work" / "volumes" / "default" / "code"  # the claim "code", as run-local keeps it
    code.mkdir(parents=True)
    shutil.copy(SCRIPTS / "relative_paths.py", code)
    (code / "settings.txt").write_text("hello\n")
    job = script_job(
        "tp-workdir",
        ["python", "relative_paths.py"],
        volumes=[{"name": "code", "persistentVolumeClaim": {"claimName": "code"}}],
        volumeMounts=[{"name": "code", "mountPath": "/code"}],
        podTemplate={"spec": {"containers": [{"name": "trainer", "workingDir": "/code"}]}},
    )
    returncode, output, _ = run_local(tmp_path, job, network)
    assert returncode == 0, output
    assert (code / "results" / "rank-0.txt").read_text() == "hello from tp-workdir-g0-0\n"
    assert (code / "results" / "rank-1.txt").read_text() == "hello from tp-workdir-g0-1\n"


def test_a_c10d_rendezvous_on_localhost_forms_only_on_a_shared_loopback(tmp_path, network):
    torchrun = ["python", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--max-restarts=0"]
    rendezvous = ["--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{free_port()}", "--rdzv-conf=join_timeout=5"]
    job = script_job("tp-localhost", [*torchrun, *rendezvous, "-m", "allreduce"], maxRestarts=0)
    returncode, output, logs = run_local(tmp_path, job, network)
    if network == NAMESPACES:
        # As on a cluster: each pod's localhost is its own, so each node waits alone for the other.
        assert returncode == 1 and "RendezvousTimeoutError" in output, output
    else:
        assert returncode == 0, output
        assert all("of 2: sum 3" in log for log in logs), logs
