"""Why a script failed reaches the job's status: under run-local, as on a cluster, a script run by the
pod launcher's torchrun, or by a torchrun of the script's own command, raises in rank 1, and the
exception's last line ends the job's failure message (run-local prints the message the operator writes to
status.message and the Failed Event) and, with the launcher, the pod's termination message."""

from __future__ import annotations

import re
from pathlib import Path

from scaletrain_testing.cli import run_local_job
from scaletrain_testing.jobs import DELETE, base_job
from scaletrain_testing.timeouts import RUN_LOCAL_SCRIPT_S

SCRIPTS = Path(__file__).resolve().parent / "scripts"  # on the "image": PYTHONPATH points here
SCRIPT_ENV = [{"name": "PYTHONPATH", "value": str(SCRIPTS)}, {"name": "OMP_NUM_THREADS", "value": "1"}]
LAST_LINE = "ValueError: shard 7 of the training data is corrupt (rank 1 raises this on purpose)"


def test_the_exception_of_a_rank_under_torchrun_is_in_its_termination_message_and_the_jobs_message(tmp_path):
    # No command: the default one, the pod launcher, runs torchrun with these arguments.
    job = base_job(training=DELETE, args=["--module", "raise_in_rank_1"], maxRestarts=0, env=SCRIPT_ENV)
    job["metadata"] = {"name": "raises"}
    result = run_local_job(tmp_path, job, RUN_LOCAL_SCRIPT_S)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    # The summary's first line is "NAME: Failed: MESSAGE in N s, ...", before the pod's log tail.
    message = result.stdout.split(" s, 0 restart(s)")[0]
    assert re.search(
        r"pod raises-g0-1-\w+ failed \(Error, exit code 1\); maxRestarts \(0\) reached\. Trace", message
    ), output
    assert re.search(f"{re.escape(LAST_LINE)} in [0-9.]+$", message), output
    (termination_log,) = (tmp_path / "work" / "pods").glob("*_raises-g0-1-*/containers/trainer/termination-log")
    assert termination_log.read_text().rstrip().endswith(LAST_LINE), termination_log.read_text()


def test_the_exception_of_a_rank_under_a_scripts_own_torchrun_ends_the_jobs_message(tmp_path):
    """A command of one's own runs torchrun itself. torchrun copies its first failed worker's error into its
    own TORCHELASTIC_ERROR_FILE, removing that file first: were it the termination message (a mount), that
    failed (EBUSY here, EACCES on a node), and torchrun's own traceback ended the log and the message."""
    job = base_job(
        training=DELETE,
        command=["python", "-m", "torch.distributed.run", "--nproc-per-node=2", "-m", "raise_in_rank_1"],
        nodes=1,
        procsPerNode=2,
        maxRestarts=0,
        env=SCRIPT_ENV,
    )
    job["metadata"] = {"name": "own"}
    result = run_local_job(tmp_path, job, RUN_LOCAL_SCRIPT_S)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    message = result.stdout.split(" s, 0 restart(s)")[0]
    assert "maxRestarts (0) reached. Root Cause (first observed failure):" in message, output
    assert re.search(f"{re.escape(LAST_LINE)} in [0-9.]+$", message), output
    (log,) = (tmp_path / "work" / "logs").glob("own-g0-0-*_trainer.log")
    assert "OSError" not in log.read_text() and "PermissionError" not in log.read_text()
