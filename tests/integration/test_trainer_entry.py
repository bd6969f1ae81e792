"""The trainer's entry points as processes: `python -m scaletrain_trainer` and the pod launcher exit 78 on
a config error, naming the field, before any training or torchrun starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scaletrain_testing.jobs import REPO
from scaletrain_testing.trainer_runs import free_port
from scaletrain_trainer.contract.config import parse_training_config
from scaletrain_trainer.contract.exit_codes import EXIT_CONFIG_ERROR


def _module(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
        check=False,
    )


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"globalBatchSize": 8}, "microBatchSize: required field is missing"),
        (
            {"globalBatchSize": 8, "microBatchSize": 2, "precison": "bf16"},
            "precison: unknown field; did you mean precision?",
        ),
        (
            {"globalBatchSize": 8, "microBatchSize": 2, "syncBatchNorm": True},
            "syncBatchNorm: SyncBatchNorm only works on GPUs",
        ),
        (
            {"globalBatchSize": 8, "microBatchSize": 2, "data": {"source": "tokens", "path": "/nope.bin"}},
            "data.path: /nope.bin is not a readable file",
        ),
    ],
)
def test_config_errors_exit_78_with_the_field_named(tmp_path, config, fragment):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config | {"outputDir": str(tmp_path / "out"), "metricsPort": free_port()}))
    termination_log = tmp_path / "termination-log"
    termination_log.touch()
    result = _module(
        "scaletrain_trainer",
        "--config",
        str(path),
        env=os.environ | {"SCALETRAIN_TERMINATION_LOG": str(termination_log)},
    )
    assert result.returncode == EXIT_CONFIG_ERROR, result.stderr[-2000:]
    assert fragment in result.stderr and "Traceback" not in result.stderr
    assert json.loads(termination_log.read_text())["result"] == "ConfigError"


def test_pod_launcher_checks_the_config_before_torchrun(tmp_path):
    training = parse_training_config({"globalBatchSize": 12, "microBatchSize": 2})
    env = os.environ | {"SCALETRAIN_CONFIG": training.to_json(), "PET_NNODES": "2", "PET_NPROC_PER_NODE": "4"}
    result = _module("scaletrain_trainer.launch", "--module", "scaletrain_trainer", env=env)
    assert result.returncode == EXIT_CONFIG_ERROR
    assert "globalBatchSize: 12 is not divisible by microBatchSize × world size (2 × 8 = 16)" in result.stderr


def test_the_pod_launcher_runs_a_module_of_ones_own_without_a_training_config():
    """A job without a training block, with args of its own: nothing to check, torchrun runs the module."""
    env = {k: v for k, v in os.environ.items() if k != "SCALETRAIN_CONFIG"} | {"OMP_NUM_THREADS": "1"}
    result = _module("scaletrain_trainer.launch", "--standalone", "--nproc-per-node=1", "--module", "platform", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Linux" in result.stdout


def test_a_config_error_only_a_worker_finds_is_the_pods_exit_code_not_torchruns_1(tmp_path):
    """Token ids beyond vocabSize are found by the workers' data checks, inside torchrun."""
    tokens = tmp_path / "tokens.bin"
    tokens.write_bytes(bytes(range(200)) * 40)  # uint16 ids up to 0xC7C6, far beyond vocabSize 64
    training = parse_training_config(
        {
            "globalBatchSize": 4,
            "microBatchSize": 2,
            "model": {"layers": 1, "heads": 2, "width": 16, "vocabSize": 64, "contextLength": 8},
            "data": {"source": "tokens", "path": str(tokens)},
            "outputDir": str(tmp_path / "out"),
            "metricsPort": free_port(),
        }
    )
    termination_log = tmp_path / "termination-log"
    termination_log.touch()
    env = os.environ | {
        "SCALETRAIN_CONFIG": training.to_json(),
        "SCALETRAIN_TERMINATION_LOG": str(termination_log),
        "OMP_NUM_THREADS": "1",
    }
    args = ("--standalone", "--nproc-per-node=2", "--module", "scaletrain_trainer")
    result = _module("scaletrain_trainer.launch", *args, env=env)
    assert "exitcode  : 78" in result.stderr, result.stderr[-3000:]  # torchrun saw the worker's 78 ...
    assert result.returncode == EXIT_CONFIG_ERROR  # ... and the pod exits with it, not torchrun's 1
    assert json.loads(termination_log.read_text())["result"] == "ConfigError"
