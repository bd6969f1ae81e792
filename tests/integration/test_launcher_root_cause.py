"""The pod launcher with the built-in trainer: a worker's uncaught exception, recorded for torchrun, ends
up at the end of the pod's termination message, where the operator reads why the pod failed."""

from __future__ import annotations

import os
import subprocess
import sys

from scaletrain_operator.local.pod_network import free_port
from scaletrain_testing.plugins.crashes import CRASH_MESSAGE
from scaletrain_testing.timeouts import POD_LAUNCHER_RUN_S
from scaletrain_trainer.contract.config import parse_training_config


def test_a_workers_exception_in_the_built_in_trainer_is_the_end_of_the_termination_message(tmp_path):
    training = parse_training_config(
        {
            "globalBatchSize": 4,
            "microBatchSize": 2,
            "maxSteps": 2,
            "model": {"layers": 1, "heads": 2, "width": 16, "vocabSize": 64, "contextLength": 8},
            "loss": "scaletrain_testing.plugins.crashes:cross_entropy_but_rank_1_raises",
            "outputDir": str(tmp_path / "out"),
            "metricsPort": free_port(),
        }
    )
    termination_log = tmp_path / "termination-log"
    termination_log.touch()  # the kubelet's empty file
    env = os.environ | {
        "SCALETRAIN_CONFIG": training.to_json(),
        "SCALETRAIN_TERMINATION_LOG": str(termination_log),
        "OMP_NUM_THREADS": "1",
    }
    launcher = [sys.executable, "-m", "scaletrain_trainer.launch", "--standalone", "--nproc-per-node=2"]
    result = subprocess.run(
        [*launcher, "--module", "scaletrain_trainer"],
        env=env,
        capture_output=True,
        text=True,
        timeout=POD_LAUNCHER_RUN_S,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    message = termination_log.read_text()
    assert message.startswith("Traceback (most recent call last):"), message
    assert message.rstrip().endswith(f"RuntimeError: {CRASH_MESSAGE}"), message
