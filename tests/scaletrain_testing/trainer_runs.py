"""Run the real trainer entry point (under torchrun for several processes) and read what it wrote."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scaletrain_testing.jobs import patched
from scaletrain_testing.process_tree import descendants
from scaletrain_testing.timeouts import TRAINER_RUN_S
from scaletrain_trainer.launch import TORCHRUN

# pytest.approx tolerances for fp32 runs that should train the same and differ only in the order of their
# float sums (another world size, strategy or split of the batch).
FP32_EXACT = {"rel": 1e-5, "abs": 1e-6}
GPT_OPTIONS = {"vocab_size": 64, "context_length": 16, "layers": 2, "heads": 2, "width": 32}

# Tiny GPT, 200 samples: 13 steps per epoch of 16, the 13th a short window of 8 samples, so 20 steps
# cross an epoch boundary and include a short window.
BASE_CONFIG: dict[str, Any] = {
    "globalBatchSize": 16,
    "microBatchSize": 4,
    "maxSteps": 20,
    "logEverySteps": 1,
    "precision": "fp32",
    "strategy": "ddp",
    "seed": 7,
    "model": {"layers": 2, "heads": 2, "width": 32, "vocabSize": 64, "contextLength": 16},
    "data": {"source": "synthetic", "syntheticSamples": 200},
    "optimizer": {"lr": 0.01, "weightDecay": 0.1},
    "scheduler": {"name": "cosine", "warmupSteps": 3},
    "distributedTimeoutSeconds": 60,
}


# The base config's synthetic data set, as keyword arguments of the fault plugins' data sets.
SYNTHETIC_OPTIONS = {
    "samples": BASE_CONFIG["data"]["syntheticSamples"],
    "context_length": BASE_CONFIG["model"]["contextLength"],
    "vocab_size": BASE_CONFIG["model"]["vocabSize"],
    "seed": BASE_CONFIG["seed"],
}
# One thread per process on small CPUs. (The fault plugins import as part of the installed scaletrain_testing.)
TRAINER_ENV = {"OMP_NUM_THREADS": "1"}


def plugin_data(name: str, **options: Any) -> dict[str, Any]:
    """A `data` config for the data set `name` of tests/plugins/faults.py over the base synthetic data."""
    return {"source": f"scaletrain_testing.plugins.faults:{name}", "options": options | SYNTHETIC_OPTIONS}


@dataclass
class Run:
    returncode: int
    output: str
    directory: Path

    def metrics(self) -> list[dict[str, Any]]:
        path = self.directory / "out" / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def losses(self) -> list[float]:
        return [record["loss"] for record in self.metrics() if "loss" in record]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_for(directory: Path, overrides: dict[str, Any] | None = None, checkpoints: bool = False) -> dict[str, Any]:
    config = patched(copy.deepcopy(BASE_CONFIG), overrides or {})
    config["outputDir"] = str(directory / "out")
    config["metricsPort"] = free_port()
    if checkpoints:
        config["checkpoint"] = {"dir": str(directory / "checkpoints"), "everySteps": 5, "keep": 2} | config.get(
            "checkpoint", {}
        )
    return config


def run_trainer(
    directory: Path,
    config: dict[str, Any],
    nproc: int = 1,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> Run:
    """`python -m scaletrain_trainer --config FILE`, under `torchrun --standalone` when nproc > 1, after
    `prefix` (e.g. prlimit with its options)."""
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    launcher = [*TORCHRUN, "--standalone", f"--nproc-per-node={nproc}"]
    command = [
        *prefix,
        *(launcher if nproc > 1 else [sys.executable]),
        "-m",
        "scaletrain_trainer",
        "--config",
        str(config_path),
    ]
    environment = os.environ | TRAINER_ENV | (env or {})
    result = subprocess.run(
        command, cwd=directory, env=environment, capture_output=True, text=True, timeout=TRAINER_RUN_S, check=False
    )
    return Run(result.returncode, result.stdout + result.stderr, directory)


class SharedRuns:
    """Trainer runs that several tests share, each made once: calling it with a name and a run's arguments
    (as `config_for` and `run_trainer` take them) gives the run made with exactly those, in root/NAME.
    `base` goes into every run's overrides, under the run's own. A name is a directory: one asked for again
    with other arguments is an error, not the run made first."""

    def __init__(self, root: Path, base: dict[str, Any] | None = None):
        self.root = root
        self.base = base or {}
        self._runs: dict[tuple[str, str], Run] = {}

    def __call__(
        self,
        name: str,
        overrides: dict[str, Any] | None = None,
        nproc: int = 2,
        checkpoints: bool = False,
        env: dict[str, str] | None = None,
    ) -> Run:
        arguments = json.dumps([overrides, nproc, checkpoints, env], sort_keys=True)  # every argument, frozen
        if (name, arguments) not in self._runs:
            if any(made == name for made, _ in self._runs):
                raise ValueError(f"run {name!r} was made with other arguments; give this one a name of its own")
            directory = self.root / name
            config = config_for(directory, self.base | (overrides or {}), checkpoints)
            self._runs[name, arguments] = run_trainer(directory, config, nproc, env)
        return self._runs[name, arguments]


@dataclass
class PodRun:
    """A pod's main process (the launcher) started in the background; its output goes to a file, so that
    nothing blocks on a full pipe."""

    process: subprocess.Popen
    directory: Path

    @property
    def log(self) -> Path:
        return self.directory / "pod.log"

    def wait(self, timeout: float) -> Run:
        returncode = self.process.wait(timeout)
        return Run(returncode, self.log.read_text(), self.directory)

    def kill(self) -> None:
        """SIGKILL to what is left of the pod's processes (a failed test's), workers first."""
        for pid in [*descendants(self.process.pid), self.process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()


def start_pod(directory: Path, config: dict[str, Any], nproc: int = 2, env: dict[str, str] | None = None) -> PodRun:
    """`python -m scaletrain_trainer.launch --module scaletrain_trainer`, as the kubelet starts a pod's
    container: the config in $SCALETRAIN_CONFIG, torchrun --standalone with `nproc` workers, the
    termination message in directory/termination-log, and `env`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "termination-log").touch()
    environment = (
        os.environ
        | TRAINER_ENV
        | {
            "SCALETRAIN_CONFIG": json.dumps(config),
            "SCALETRAIN_TERMINATION_LOG": str(directory / "termination-log"),
        }
        | (env or {})
    )
    launcher = [sys.executable, "-m", "scaletrain_trainer.launch", "--standalone", f"--nproc-per-node={nproc}"]
    with (directory / "pod.log").open("w") as log:
        process = subprocess.Popen(
            [*launcher, "--module", "scaletrain_trainer"], cwd=directory, env=environment, stdout=log, stderr=log
        )
    return PodRun(process, directory)
