"""Third-party scripts as ScaleTrainJob custom commands under run-local (2 nodes × 1 process, gloo),
behaving as they would on a cluster: `$(MASTER_ADDR)` in args is expanded, a workingDir is where
the script runs, each pod has a working directory of its own, and the caller's env stays out. A c10d
rendezvous on `localhost` fails with a network namespace per pod, as on a cluster (each pod's
`localhost` is its own), and forms only on the shared-loopback fallback. Each test runs in each pod
network mode this machine offers; its id says which, and a skipped mode says why."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scaletrain_operator.local.gang import POD_NETWORK_ENV
from scaletrain_operator.local.pod_network import LOOPBACK, NAMESPACES, free_port, why_no_namespaces
from scaletrain_testing.jobs import DELETE, base_job
from scaletrain_testing.timeouts import RUN_LOCAL_SCRIPT_S

SCRIPTS = Path(__file__).resolve().parent / "scripts"  # on the "image": PYTHONPATH points here
SENTINEL = {"SCALETRAIN_TEST_SENTINEL": "leaked"}  # in run-local's env, which no pod may see


@pytest.fixture(params=[NAMESPACES, LOOPBACK])
def network(request):
    """The pod network run-local is told to use."""
    if request.param == NAMESPACES and (missing := why_no_namespaces()) is not None:
        pytest.skip(f"per-pod network namespaces: {missing}; only the shared-loopback case runs")
    return request.param


def script_job(name, command, **spec):
    env = [{"name": "PYTHONPATH", "value": str(SCRIPTS)}, {"name": "OMP_NUM_THREADS", "value": "1"}]
    job = base_job(nodes=2, training=DELETE, command=command, env=env, **spec)  # a script's own: no training block
    job["metadata"] = {"name": name}
    return job


def run_local(tmp_path, job, network):
    """run-local on `job` in `network` mode; returns its result and each pod's log, rank 0 first."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    command = [sys.executable, "-m", "scaletrain_operator.cli", "run-local", str(path), "--workdir", "work"]
    env = os.environ | SENTINEL | {POD_NETWORK_ENV: network}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_LOCAL_SCRIPT_S)
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
    cwds = [line.split("cwd ")[1].split(",")[0] for log in logs for line in log.splitlines() if "cwd " in line]
    if "pod filesystem: contained" in output:  # each container's own root, where an image without WORKDIR starts
        assert cwds == ["/", "/"], cwds
    else:  # one directory of this machine's per pod
        assert len(set(cwds)) == 2 and all(cwd.startswith(str(tmp_path / "work" / "pods")) for cwd in cwds), cwds


def test_an_hf_trainer_script_reports_its_progress_as_it_would_to_the_operator(tmp_path, network):
    """run-local serves the status-report endpoint (the Kubeflow Trainer status protocol) where its pods reach
    this machine: HF's Trainer, told nothing, reports its step, loss and ETA, which run-local shows."""
    command = ["python", "-m", "hf_trainer", "--max-steps", "30", "--seconds-per-step", "0.2"]
    job = script_job("tp-hf", command)
    job["spec"]["nodes"] = 1
    returncode, output, logs = run_local(tmp_path, job, network)
    assert returncode == 0, output
    assert re.search(r"step \d+/30 +loss \d+\.\d+ .*ETA", output), output


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


def test_kubeflows_sendrecv_smoke_test_with_plain_python(tmp_path, network):
    """As its PyTorchJob starts it: `python dist_sendrecv.py`, no launcher, env:// from the pod's env."""
    job = script_job("tp-sendrecv", ["python", str(SCRIPTS / "dist_sendrecv.py")], maxRestarts=0)
    returncode, output, logs = run_local(tmp_path, job, network)
    assert returncode == 0, output
    for rank, log in enumerate(logs):
        assert f"RANK: {rank}\n" in log and "WORLD_SIZE: 2\n" in log, log
    assert "rank 1 of 2 received from rank 0: [1.0, 2.0, 3.0, 4.0]" in logs[1], logs[1]
    assert "result from worker 1: [1.0, 4.0, 9.0, 16.0]" in logs[0], logs[0]


def test_an_mnist_style_ddp_script_reading_rank_from_the_env(tmp_path, network):
    """Plain `python`, RANK, LOCAL_RANK and WORLD_SIZE read from the pod's env, env:// for the rest.

    One gang restart is allowed: a DDP script's rank may abort after its last line, at interpreter exit,
    with `terminate called without an active exception` (torch 2.13, gloo; in plain processes too, without
    ScaleTrain), and the gang policy restarts the gang, as on a cluster. The script's clean-up makes that
    rare (see its end); without it, 3 of 20 runs here had a rank abort."""
    command = ["python", str(SCRIPTS / "mnist_style.py"), "--backend", "gloo", "--epochs", "2"]
    returncode, output, logs = run_local(tmp_path, script_job("tp-mnist", command, maxRestarts=1), network)
    assert returncode == 0, output
    logs = logs[-2:]  # the last gang's: the logs sort by pod name, NAME-g<generation>-<index>-…
    checksums = set()
    for rank, log in enumerate(logs):
        # DistributedSampler gave each rank half of the 512 samples, in each of the 2 epochs.
        summary = f"rank {rank} (local rank 0) of 2 / 2: trained on 512 samples in 2 epochs, weights checksum "
        assert summary in log, log
        checksums.add(log.split("weights checksum ")[1].split()[0])
    assert len(checksums) == 1, checksums  # DDP kept the replicas' weights identical
    correct = int(re.search(r"^epoch 2 global metrics: .*, accuracy (\d+)/128$", logs[0], re.MULTILINE)[1])
    assert correct > 64, logs[0]  # it learned: chance is 32 of the 128 test samples


def test_kubeflows_elastic_echo_with_torchrun_and_no_rendezvous_flags_but_the_backend(tmp_path, network):
    """`python -m torch.distributed.run --rdzv_backend=c10d echo.py`, as Kubeflow's elastic example
    runs it: the node count, processes per node and rendezvous endpoint come from PET_* in the pod.
    LOGLEVEL=INFO, as the example's job sets it (DEBUG there), makes torchrun log what it took."""
    command = ["python", "-m", "torch.distributed.run", "--rdzv_backend=c10d", str(SCRIPTS / "elastic_echo.py")]
    job = script_job("tp-echo", command, maxRestarts=0)
    job["spec"]["env"].append({"name": "LOGLEVEL", "value": "INFO"})
    returncode, output, logs = run_local(tmp_path, job, network)
    assert returncode == 0, output
    master = "tp-echo-g0-0.tp-echo" if network == NAMESPACES else "127.0.0.1"
    ranks = set()
    for log in logs:
        launch = dict(re.findall(r"^\S+ \S+ \d+ \S+\]   (\w+) +: (.*)$", log, re.MULTILINE))
        assert launch["rdzv_endpoint"].startswith(f"{master}:"), log  # PET_RDZV_ENDPOINT, $(VAR)s expanded
        assert (launch["min_nodes"], launch["max_nodes"], launch["nproc_per_node"]) == ("2", "2", "1"), log
        agent_env = json.loads(log.split("agent env on pid ")[1].split(": ", 1)[1].splitlines()[0])
        assert agent_env["WORLD_SIZE"] == "2" and agent_env["LOCAL_RANK"] == "0", agent_env
        (after_init,) = [line for line in log.splitlines() if line.startswith("after init on pid ")]
        assert after_init.endswith(f"rank={agent_env['RANK']}, world_size=2"), log
        ranks.add(agent_env["RANK"])
    assert ranks == {"0", "1"}, logs  # the c10d rendezvous hands out the ranks, not the pod index


def test_accelerates_own_test_script_with_accelerate_launch_on_a_shared_working_dir(tmp_path, network):
    """accelerate's test script, multi-node on CPUs, launched on each node as accelerate's docs have a
    user do it, the node rank and the master taken from the pod's env. The script assumes that all
    its processes share a working directory (rank 0 reads back a file the others append to), as on
    one machine; across nodes that takes a shared volume as the workingDir, here a claim of both pods
    (without it: `AssertionError: Main process was not first`, in its process_execution_check)."""
    # The script as it ships in the installed package (what `accelerate test` launches), at its path in the "image".
    script = Path(importlib.util.find_spec("accelerate").origin).parent / "test_utils" / "scripts" / "test_script.py"
    launch = [
        "accelerate", "launch", "--cpu", "--num_machines", "2", "--machine_rank", "$(RANK)", "--num_processes", "2",
        "--main_process_ip", "$(MASTER_ADDR)", "--main_process_port", "$(MASTER_PORT)",
    ]  # fmt: skip
    job = script_job(
        "tp-accelerate",
        [*launch, str(script)],
        maxRestarts=1,  # for an abort at exit, as in the DDP test above: its checks train DDP models too
        volumes=[{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}],
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        podTemplate={"spec": {"containers": [{"name": "trainer", "workingDir": "/scratch"}]}},
    )
    returncode, output, logs = run_local(tmp_path, job, network)
    assert returncode == 0, output
    logs = logs[-2:]  # the last gang's
    for rank, log in enumerate(logs):
        assert "Distributed environment: DistributedType.MULTI_CPU  Backend: gloo\nNum processes: 2\n" in log, log
        assert f"Process index: {rank}\n" in log, log
        for check in (
            "All rng are properly synched.",
            "Shuffled dataloader passing.",
            "Training yielded the same results on one CPU or distributed setup with batch split.",
            "**Test reinstantiated state**",  # its last section
        ):
            assert check in log, log
    assert "**Test process execution**" in logs[0], logs[0]  # the part that needs the shared directory
