"""`scaletrain run-local`: the job's rendered pods on the pod executor, one torchrun per node, with
gang restarts, config errors, interruption without orphans (kill -9 included), one run per workdir,
the README's default example, and the fine-tuning example on its fixture (a claim bound to a directory).
(The executor's rules are unit-tested in tests/unit/test_pod_executor.py; third-party scripts
under both pod network modes are in test_third_party_scripts.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from scaletrain_operator.local.gang import POD_NETWORK_ENV
from scaletrain_operator.local.pod_network import LOOPBACK, NAMESPACES, why_no_namespaces
from scaletrain_operator.local.processes import signal_processes
from scaletrain_testing.hf_models import assert_exports_give_the_trained_logits
from scaletrain_testing.jobs import DELETE, REPO, base_job, patched
from scaletrain_testing.process_tree import descendants, processes_with_env, survivors
from scaletrain_testing.timeouts import RUN_LOCAL_JOB_S
from scaletrain_testing.trainer_runs import BASE_CONFIG, FP32_EXACT, TRAINER_ENV, plugin_data
from scaletrain_testing.waiting import wait_until

SCRATCH = "/scratch"  # the job's volume, a claim; run-local keeps it in WORKDIR/volumes/NAMESPACE/CLAIM


def tiny_job(name, training=None, nodes=2, **spec):
    """A 2-node (or `nodes`) CPU job on the tiny test GPT, with checkpoints and outputs on a persistent volume claim
    (an emptyDir is each pod's own, and a restarted gang's new pods would not find the checkpoints)."""
    config = patched(
        BASE_CONFIG,
        {
            "checkpoint": {"dir": f"{SCRATCH}/checkpoints", "everySteps": 5},
            "outputDir": f"{SCRATCH}/out",
            "metricsPort": 9400,  # each pod's own; on the shared loopback run-local moves it to a free port
        },
    )
    job = base_job(
        nodes=nodes,
        training=patched(config, training or {}),
        volumes=[{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}],
        volumeMounts=[{"name": "scratch", "mountPath": SCRATCH}],
        env=[{"name": name, "value": value} for name, value in TRAINER_ENV.items()],
        **spec,
    )
    job["metadata"] = {"name": name}
    return job


def write_job(tmp_path, job):
    path = tmp_path / f"{job['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run_local(*args, cwd, timeout_s=RUN_LOCAL_JOB_S, env=None):
    command = [sys.executable, "-m", "scaletrain_operator.cli", "run-local", *map(str, args)]
    environment = os.environ | (env or {})
    return subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def scratch(workdir):
    return Path(workdir) / "volumes" / "default" / "scratch"


def metrics(workdir):
    path = scratch(workdir) / "out" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def processes_of(job_name):
    """Live processes of a job, found by the SCALETRAIN_JOB_NAME every pod's env carries."""
    return processes_with_env(f"SCALETRAIN_JOB_NAME={job_name}")


@pytest.mark.parametrize("network", ["auto", LOOPBACK])  # as root, auto is a network namespace per pod
def test_a_two_node_job_runs_to_the_end_on_its_volume(tmp_path, network):
    workdir = tmp_path / "work"
    job = write_job(tmp_path, tiny_job("local-ok"))
    result = run_local(job, "--workdir", workdir, cwd=tmp_path, env={POD_NETWORK_ENV: network})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "local-ok: Succeeded" in result.stdout and "0 restart(s)" in result.stdout
    records = metrics(workdir)
    assert [r["step"] for r in records] == list(range(1, 21))
    assert records[-1]["loss"] < records[0]["loss"]
    assert (scratch(workdir) / "checkpoints" / "step-00000020").is_dir()
    assert re.search(r"^step \d+/20  loss \d", result.stderr, re.MULTILINE)  # progress lines (no terminal here)
    assert processes_of("local-ok") == []


SCRIPTS = Path(__file__).resolve().parent / "scripts"
SCRIPT_ENV = [{"name": "PYTHONPATH", "value": str(SCRIPTS)}, {"name": "OMP_NUM_THREADS", "value": "1"}]


def test_a_master_alias_written_into_the_args_survives_a_gang_restart(tmp_path):
    """`NAME-master` is rank 0 of whichever gang runs: a script's hardcoded endpoint works after a restart,
    where the first gang's rank-0 name (NAME-g0-0.NAME) would point at a pod that is gone."""
    if (missing := why_no_namespaces()) is not None:
        pytest.skip(f"per-pod network namespaces (the pods' own DNS): {missing}")
    own = "python -m allreduce --master local-alias-master --port $MASTER_PORT"
    crash_first_gang = f'[ "$SCALETRAIN_GENERATION$NODE_RANK" = 01 ] && exit 3; exec {own}'
    job = base_job(nodes=2, training=DELETE, command=["sh", "-c", crash_first_gang], env=SCRIPT_ENV, maxRestarts=1)
    job["metadata"] = {"name": "local-alias"}
    workdir = tmp_path / "work"
    result = run_local(write_job(tmp_path, job), "--workdir", workdir, cwd=tmp_path, env={POD_NETWORK_ENV: NAMESPACES})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "local-alias: Succeeded" in result.stdout and "1 restart(s)" in result.stdout
    logs = sorted((workdir / "logs").glob("local-alias-g1-*.log"))
    assert [("of 2: sum 3, master local-alias-master" in log.read_text()) for log in logs] == [True, True]


def test_a_job_of_ones_own_script_without_a_training_block_runs_to_the_end(tmp_path):
    job = base_job(nodes=2, training=DELETE, command=["python", "-m", "allreduce"], env=SCRIPT_ENV)
    job["metadata"] = {"name": "local-own"}
    result = run_local(write_job(tmp_path, job), "--workdir", tmp_path / "work", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "local-own: Succeeded" in result.stdout and "steps" not in result.stdout  # no trainer metrics


def test_a_dead_node_restarts_the_gang_in_place_which_resumes_from_the_checkpoint(tmp_path):
    # Node 1's rank dies during step 8, after the step-5 checkpoint; only in the first gang (its generation, which
    # each pod's agent keeps on an emptyDir: were that lost in the restart, the gang would crash again).
    crash = plugin_data("CrashingSynthetic", crash_at_read=8 * 7 + 3, crash_rank=1, crash_generation=0)
    workdir = tmp_path / "work"
    job = tiny_job("local-crash", {"data": crash}, maxRestarts=2)
    result = run_local(write_job(tmp_path, job), "--workdir", workdir, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # Why, in the end of the dead rank's log (it wrote no termination message), then how the gang goes on.
    restart = next(line for line in result.stderr.splitlines() if "gang restart 1/2 from the last checkpoint" in line)
    assert "exitcode  : 13" in result.stderr and result.stderr.count("the next gang starts in place") == 1, restart
    # The same two pods ran both generations: no pod of a second gang was made.
    assert sorted(log.name.split("-")[2] for log in (workdir / "logs").glob("local-crash-*.log")) == ["g0", "g0"]
    assert "local-crash: Succeeded" in result.stdout and "1 restart(s)" in result.stdout
    steps = [r["step"] for r in metrics(workdir)]
    assert steps == list(range(1, 8)) + list(range(6, 21))  # steps 1-7, then on from the step-5 checkpoint
    assert processes_of("local-crash") == []


def test_a_config_error_found_in_the_pod_fails_at_once(tmp_path):
    job = tiny_job("local-bad", {"data": {"source": "text", "path": "/nonexistent/corpus.txt"}}, maxRestarts=3)
    workdir = tmp_path / "work"
    (workdir / "logs").mkdir(parents=True)
    (workdir / "logs" / "old.log").write_text("from an earlier run")
    (workdir / "notes.txt").write_text("not run-local's")
    result = run_local(write_job(tmp_path, job), "--workdir", workdir, "--fresh", cwd=tmp_path)
    assert result.returncode == 78, result.stdout + result.stderr
    assert "invalid training config, not retried" in result.stdout and "0 restart(s)" in result.stdout
    assert "/nonexistent/corpus.txt is not a readable file" in result.stdout  # the failed pod's log tail
    # --fresh removed what run-local writes (logs, volumes) and nothing else.
    assert not (workdir / "logs" / "old.log").exists() and (workdir / "notes.txt").exists()


def test_a_config_error_only_a_worker_finds_fails_at_once(tmp_path):
    """Token ids beyond vocabSize: found by the workers' data checks inside torchrun, which exits 1 for any
    failed worker; the pod still exits 78 (the launcher reads the worker's result), and nothing restarts."""
    tokens = tmp_path / "tokens.bin"
    tokens.write_bytes(bytes(range(200)) * 40)  # uint16 ids up to 0xC7C6; the test GPT's vocabSize is 64
    job = tiny_job("local-bad-ids", {"data": {"source": "tokens", "path": str(tokens)}}, maxRestarts=3)
    result = run_local(write_job(tmp_path, job), "--workdir", tmp_path / "work", cwd=tmp_path)
    assert result.returncode == 78, result.stdout + result.stderr
    assert "invalid training config, not retried" in result.stdout and "0 restart(s)" in result.stdout
    assert "exit code 78" in result.stdout and "model.vocabSize is 64" in result.stdout


def test_a_passed_deadline_ends_the_run_without_restarts(tmp_path):
    job = tiny_job(
        "local-late",
        {"data": plugin_data("SlowSynthetic", seconds_per_read=0.05), "maxSteps": 1000},
        activeDeadlineSeconds=2,
        maxRestarts=2,
    )
    result = run_local(write_job(tmp_path, job), "--workdir", tmp_path / "work", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "activeDeadlineSeconds (2) passed" in result.stdout and "0 restart(s)" in result.stdout
    assert processes_of("local-late") == []


def test_a_gang_that_ends_at_once_again_and_again_backs_off_instead_of_spinning(tmp_path):
    """A rule that ignores the restart limit, and a pod that exits at once: without a back-off that was 411 gang
    restarts in 300 s. The first restart goes at once, the next ones wait, doubling; maxDisruptions ends it."""
    rule = {"name": "sigterm", "action": "RestartGangIgnoreLimit", "onExitCodes": {"operator": "In", "values": [143]}}
    job = base_job(nodes=1, training=DELETE, command=["sh", "-c", "exit 143"], maxDisruptions=3,
                   failurePolicy={"rules": [rule]}, restartBackoff={"initialSeconds": 1, "maxSeconds": 2})  # fmt: skip
    job["metadata"] = {"name": "local-spin"}
    started = time.monotonic()
    result = run_local(write_job(tmp_path, job), "--workdir", tmp_path / "work", cwd=tmp_path)
    took = time.monotonic() - started
    assert result.returncode == 143, result.stdout + result.stderr  # the failed pod's
    assert "maxDisruptions (3) reached" in result.stdout
    waits = re.findall(r"the next gang starts in (\d+) s", result.stderr)  # where run-local says how it goes
    assert waits == ["1", "2"] and took >= 3, result.stderr


def test_a_command_that_does_not_exist_is_a_clear_error(tmp_path):
    job = tiny_job("local-typo", command=["scaletrain-no-such-command"])
    result = run_local(write_job(tmp_path, job), "--workdir", tmp_path / "work", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "scaletrain: run-local:" in result.stderr and "scaletrain-no-such-command" in result.stderr


def test_a_gpu_job_on_a_machine_without_gpus_is_refused_with_the_field(tmp_path):
    result = run_local(REPO / "examples" / "gpu-h100-fsdp.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert "spec.gpusPerNode" in result.stderr and "no GPU" in result.stderr and "Traceback" not in result.stderr


def test_with_fewer_nodes_available_an_elastic_gang_runs_smaller_and_trains_the_same_model(tmp_path):
    """--nodes-available 1: the 2-node job runs as one node with twice the accumulation, as the operator runs a
    gang it shrank; the global batch, and so each step's loss, is the full gang's."""
    job = write_job(tmp_path, tiny_job("local-elastic", elastic={"minNodes": 1}))
    full = run_local(job, "--workdir", tmp_path / "full", cwd=tmp_path)
    smaller = run_local(job, "--workdir", tmp_path / "smaller", "--nodes-available", "1", cwd=tmp_path)
    for result in (full, smaller):
        assert result.returncode == 0, result.stdout + result.stderr
    assert "local-elastic: 1 of 2 nodes available; the gang runs at 1 (its sizes: 1, 2)" in smaller.stdout
    assert "local-elastic: 1 node(s)" in smaller.stderr + smaller.stdout
    losses = [[record["loss"] for record in metrics(tmp_path / run)] for run in ("full", "smaller")]
    assert losses[1] == pytest.approx(losses[0], **FP32_EXACT)


def test_fewer_nodes_available_than_a_fixed_gang_needs_is_refused_naming_the_fix(tmp_path):
    result = run_local(write_job(tmp_path, tiny_job("local-fixed")), "--nodes-available", "1", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "spec.elastic: --nodes-available 1 is fewer than nodes (2)" in result.stderr
    assert "set elastic.minNodes to let it run smaller" in result.stderr


@contextmanager
def background_run(tmp_path, job, ready, *args):
    """run-local on `job` (and `args`) in the background, handed over once `ready()` (failing at once, with
    its output, if it ends first); killed on the way out if still running."""
    command = [sys.executable, "-m", "scaletrain_operator.cli", "run-local", str(write_job(tmp_path, job)), *args]
    runner = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ready_while_running():
        if ready():
            return True
        assert runner.poll() is None, runner.communicate()
        return False

    try:
        wait_until(ready_while_running, RUN_LOCAL_JOB_S, f"run-local of {job['metadata']['name']} to be ready")
        yield runner
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()


def interrupted_run(tmp_path, job, ready, signals):
    """run-local on `job` in the background; once `ready()`, `signals` half a second apart.
    Returns its exit code and output."""
    with background_run(tmp_path, job, ready) as runner:
        for index, signum in enumerate(signals):
            time.sleep(0.5 * bool(index))
            runner.send_signal(signum)
        out, err = runner.communicate(timeout=60)
    return runner.returncode, out + err


def slow_job(name):
    """A job that trains far longer than a test waits (1000 steps of 50 ms reads)."""
    return tiny_job(name, {"data": plugin_data("SlowSynthetic", seconds_per_read=0.05), "maxSteps": 1000})


def training(job_name, workdir):
    """Whether the job's 2 × (launcher/torchrun + 1 worker) run, past the first step."""
    metrics_file = scratch(workdir) / "out" / "metrics.jsonl"
    return lambda: metrics_file.exists() and len(processes_of(job_name)) >= 4


def both_pods_said(text, workdir):
    """Whether both pods' logs under `workdir` hold `text`."""
    logs = workdir / "logs"
    return lambda: sum(text in log.read_text() for log in logs.glob("*.log")) == 2


def kill_leftovers(job_name):
    """What a failing test's run left running dies here, not with the machine."""
    signal_processes(processes_of(job_name), signal.SIGKILL)


def test_ctrl_c_checkpoints_the_step_the_gang_is_in_then_stops_every_process_of_the_job(tmp_path):
    """The pods get the grace a cluster gives them: SIGTERM, then their grace period. The trainer saves the
    step it is in (every 5 steps it would save anyway) and exits 80 before run-local's clean-up ends."""
    workdir = tmp_path / "scaletrain-runs/local-interrupted"
    ready = training("local-interrupted", workdir)
    returncode, output = interrupted_run(tmp_path, slow_job("local-interrupted"), ready, [signal.SIGINT])
    assert returncode == 130, output
    assert "interrupted (SIGINT); every process of the job is stopped" in output
    assert processes_of("local-interrupted") == []
    last_step = metrics(workdir)[-1]["step"]
    saved = sorted(path.name for path in (scratch(workdir) / "checkpoints").glob("step-*"))
    assert saved and saved[-1] == f"step-{last_step:08d}", (saved, last_step)


def test_a_second_sigterm_cannot_cut_the_clean_up_short(tmp_path):
    """Pods that ignore SIGTERM hold the clean-up for their whole terminationGracePeriodSeconds;
    signals meanwhile wait."""
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ignoring', flush=True)"
    grace = {"spec": {"terminationGracePeriodSeconds": 3}}
    job = tiny_job("local-stubborn", command=["python", "-c", ignore + "; time.sleep(600)"], podTemplate=grace)
    ready = both_pods_said("ignoring", tmp_path / "scaletrain-runs/local-stubborn")
    returncode, output = interrupted_run(tmp_path, job, ready, [signal.SIGTERM, signal.SIGTERM])
    assert returncode == 143, output
    assert processes_of("local-stubborn") == []


def test_kill_9_of_run_local_leaves_no_process_of_the_job(tmp_path):
    """SIGKILL gives run-local no chance to stop its pods: its guard process kills them, torchrun's
    workers (in sessions of their own) included, within 2 s."""
    workdir = tmp_path / "scaletrain-runs/local-killed"
    with background_run(tmp_path, slow_job("local-killed"), training("local-killed", workdir)) as runner:
        tree = {runner.pid, *descendants(runner.pid)}
        runner.kill()
        left, seconds = survivors(tree, str(tmp_path), timeout_s=2.0)  # a zombie counts as gone
        runner.communicate(timeout=10)
    signal_processes(left, signal.SIGKILL)  # a failure leaves nothing running either
    kill_leftovers("local-killed")
    assert left == set(), f"{len(left)} of {len(tree)} processes alive {seconds:.2f} s after SIGKILL"
    assert processes_of("local-killed") == []
    print(f"{len(tree)} processes, all gone {seconds:.2f} s after SIGKILL")


def test_a_pod_whose_agent_is_killed_cannot_restart_in_place_and_its_gang_is_made_anew(tmp_path):
    """A pod whose main process is killed (as an out-of-memory kill would) has ended for good: it cannot restart in
    place, and its gang gets new pods. (One node: a peer of a dead rank would wait out its stop limit.)"""
    name, workdir = "local-agent-killed", tmp_path / "work"
    job = tiny_job(name, {"data": plugin_data("SlowSynthetic", seconds_per_read=0.02), "maxSteps": 40}, nodes=1)
    with background_run(tmp_path, job, lambda: any(is_agent_of_node(p, 0) for p in processes_of(name)),
                        "--workdir", workdir) as runner:  # fmt: skip
        (agent,) = [pid for pid in processes_of(name) if is_agent_of_node(pid, 0)]
        os.kill(agent, signal.SIGKILL)
        out, err = runner.communicate(timeout=RUN_LOCAL_JOB_S)
    assert runner.returncode == 0, out + err
    assert "1 restart(s)" in out and "starts in place" not in err
    assert sorted(log.name.split("-")[3] for log in (workdir / "logs").glob(f"{name}-*.log")) == ["g0", "g1"]


def is_agent_of_node(pid: int, node_rank: int) -> bool:
    try:
        command, environ = (Path(f"/proc/{pid}/{part}").read_bytes() for part in ("cmdline", "environ"))
    except OSError:
        return False
    return b"scaletrain_trainer.agent" in command and f"PET_NODE_RANK={node_rank}".encode() in environ.split(b"\0")


def test_a_second_run_local_on_a_busy_workdir_is_refused_at_once(tmp_path):
    workdir = tmp_path / "work"
    job = tiny_job("local-busy", command=["python", "-c", "print('started', flush=True); import time; time.sleep(600)"])
    with background_run(tmp_path, job, both_pods_said("started", workdir), "--workdir", workdir) as first:
        try:
            second = run_local(write_job(tmp_path, job), "--workdir", workdir, "--fresh", cwd=tmp_path, timeout_s=30)
        finally:
            first.kill()
            first.communicate(timeout=10)
            kill_leftovers("local-busy")
    assert second.returncode == 2, second.stdout + second.stderr
    (line,) = second.stderr.splitlines()
    assert line.startswith(f"scaletrain: run-local: {workdir} is in use by run-local (pid {first.pid})"), line
    assert "--workdir" in line and second.stdout == ""
    assert both_pods_said("started", workdir)()  # the second one's --fresh removed nothing of the first's
    # The lock goes with its holder, however it died.
    quick = tiny_job("local-busy", command=["python", "-c", "pass"])
    again = run_local(write_job(tmp_path, quick), "--workdir", workdir, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr


def test_the_readme_example_runs_and_its_loss_falls(tmp_path):
    """The README's main command: examples/cpu-gloo.yaml as it is (its claim becomes a directory)."""
    env_free = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    command = [sys.executable, "-m", "scaletrain_operator.cli", "run-local", str(REPO / "examples" / "cpu-gloo.yaml")]
    result = subprocess.run(command, cwd=tmp_path, env=env_free, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    output = tmp_path / "scaletrain-runs/cpu-gloo/volumes/default/scaletrain-checkpoints/cpu-gloo/output/metrics.jsonl"
    records = [json.loads(line) for line in output.read_text().splitlines()]
    logged = [record for record in records if "loss" in record]
    assert logged[-1]["step"] == 200
    assert logged[-1]["loss"] < 0.5 * logged[0]["loss"]
    evaluations = {record["step"]: record["evalLoss"] for record in records if "evalLoss" in record}
    assert list(evaluations) == [50, 100, 150, 200] and evaluations[200] < evaluations[50]
    assert f"eval loss   {evaluations[50]:.4f} (step 50) -> {evaluations[200]:.4f} (step 200)" in result.stdout


FINETUNE_EXAMPLE, FINETUNE_FIXTURE = REPO / "examples" / "finetune-lora.yaml", REPO / "examples" / "finetune-lora"


def test_the_fine_tuning_example_runs_its_held_out_loss_falls_and_its_export_loads(tmp_path):
    """examples/finetune-lora.yaml as its header says: its fixture's directory bound to the claim it mounts at
    /fixture (read-only), LoRA on packed instruction records; then its checkpoint exported merged and as an
    adapter, from this machine's copy of the model (--base), with the trained model's logits."""
    claim = f"finetune-lora-fixture={FINETUNE_FIXTURE}"
    result = run_local(FINETUNE_EXAMPLE, "--claim", claim, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    volume = tmp_path / "scaletrain-runs/finetune-lora/volumes/default/scaletrain-checkpoints/finetune-lora"
    records = [json.loads(line) for line in (volume / "output" / "metrics.jsonl").read_text().splitlines()]
    evaluations = {record["step"]: record["evalLoss"] for record in records if "evalLoss" in record}
    assert list(evaluations) == [20, 40, 60] and evaluations[60] < 0.95 * evaluations[20]
    logs = "".join(path.read_text() for path in (tmp_path / "scaletrain-runs/finetune-lora/logs").glob("*.log"))
    assert "packed 320 records into" in logs
    lora = yaml.safe_load(FINETUNE_EXAMPLE.read_text())["spec"]["training"]["model"]["lora"]
    base = FINETUNE_FIXTURE / "model"
    assert_exports_give_the_trained_logits(volume / "step-00000060", base, lora, tmp_path, "--base", str(base))


def test_a_claim_bound_to_what_the_job_does_not_mount_or_to_no_directory_is_refused(tmp_path):
    missing = run_local(FINETUNE_EXAMPLE, "--claim", f"data={FINETUNE_FIXTURE}", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "--claim data=...: " in missing.stderr
    assert "mounts no such claim (its claims: finetune-lora-fixture, scaletrain-checkpoints)" in missing.stderr
    nowhere = run_local(FINETUNE_EXAMPLE, "--claim", f"finetune-lora-fixture={tmp_path / 'nowhere'}", cwd=tmp_path)
    assert nowhere.returncode == 2 and "is not a directory" in nowhere.stderr
