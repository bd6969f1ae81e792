"""The `scaletrain` command run in this process, for the unit tier: the same `main` the console script
calls, with its stdin, stdout and stderr captured."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

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
