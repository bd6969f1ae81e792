"""The rendered pod really trains: run its container command with its env, as a kubelet would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trainer_runs import free_port

from conftest import base_job
from scaletrain_operator.api import parse_job
from scaletrain_operator.render import render_job


def _resolve(env: list[dict], node_rank: str, master_port: int) -> dict[str, str]:
    """Resolve the downward-API node rank, and point the master's DNS name at this machine."""
    values = {var["name"]: var["value"] if "value" in var else node_rank for var in env}
    for name in ("PET_MASTER_ADDR", "MASTER_ADDR"):
        values[name] = "127.0.0.1"
    for name in ("PET_MASTER_PORT", "MASTER_PORT"):
        values[name] = str(master_port)
    return values


def test_rendered_container_command_trains_with_two_processes(tmp_path):
    training = {
        "globalBatchSize": 8,
        "microBatchSize": 2,
        "maxSteps": 5,
        "logEverySteps": 1,
        "model": {"layers": 1, "heads": 2, "width": 16, "vocabSize": 32, "contextLength": 8},
        "data": {"syntheticSamples": 64},
        "outputDir": str(tmp_path / "out"),
        "metricsPort": free_port(),
    }
    job = render_job(parse_job(base_job(nodes=1, procsPerNode=2, training=training)))
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = [sys.executable if part == "python" else part for part in container["command"] + container["args"]]
    env = os.environ | _resolve(container["env"], node_rank="0", master_port=free_port()) | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert "world size 2" in result.stderr
