"""The `scaletrain` command: run in this process, for the unit tier (the same `main` the console script
calls, with its stdin, stdout and stderr captured), or `run-local` of a job as a process of its own."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml

from scaletrain_operator.cli import main


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`scaletrain ARGS`, with its exit code and output as a CompletedProcess."""
    out, err = io.StringIO(), io.StringIO()
    saved_stdin, sys.stdin = sys.stdin, io.StringIO(stdin or "")
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["scaletrain", *args], code, out.getvalue(), err.getvalue())


def run_local_job(directory: Path, job: dict[str, Any], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`scaletrain run-local job.yaml --workdir work` of `job` in `directory`, its output captured."""
    (directory / "job.yaml").write_text(yaml.safe_dump(job))
    command = [sys.executable, "-m", "scaletrain_operator.cli", "run-local", "job.yaml", "--workdir", "work"]
    return subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=timeout_s, check=False)
