"""Run a benchmark script's worker mode under torchrun and collect what rank 0 reports."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from scaletrain_trainer.launch import TORCHRUN


def run_worker(script: str, worker_args: list[str], nproc: int = 2, timeout: int = 900) -> Any:
    """`torchrun SCRIPT --worker ... --result-file F` on CPU/gloo; returns the JSON rank 0 wrote to F."""
    with tempfile.TemporaryDirectory() as scratch:
        result_file = Path(scratch) / "result.json"
        command = [*TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", script, *worker_args,
                   "--result-file", str(result_file)]  # fmt: skip
        env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=timeout)
        return json.loads(result_file.read_text())
