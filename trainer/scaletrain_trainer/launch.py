"""Pod entry point: check the training config, then run torchrun with the given arguments.

torchrun reports any failed worker as exit code 1, so a config error found inside the workers would
look like a crash worth restarting. Checking first, in the pod's own process, lets the pod exit with
EXIT_CONFIG_ERROR, which the operator does not retry. What only a worker can find (a token id out of
range, a full disk) it records as the termination message's result; when torchrun fails, the pod
exits with that result's code instead of torchrun's 1 (exit_codes.result_of). Usage (the rendered
default):

    python -m scaletrain_trainer.launch --module scaletrain_trainer
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from .__main__ import config_error
from .config import CONFIG_ENV, load_training_config
from .exit_codes import EXIT_CODES, result_of
from .metrics import termination_message_path
from .validation import Problem, ProblemsError

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# torchrun, stopped by a signal, passes it to its workers and SIGKILLs those still running after this many
# seconds (default 30: torch/distributed/launcher/api.py). The trainer needs one step and one checkpoint
# save after a SIGTERM, and bounds that itself (watchdog.py), so the pod's terminationGracePeriodSeconds,
# after which the kubelet kills the container, is left as the only limit.
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
TRAINER_SHUTDOWN_TIMEOUT_SECONDS = 24 * 3600
# torchrun (torchrun.py) with this Python, without depending on PATH; torchrun's arguments follow.
TORCHRUN = (sys.executable, "-m", "scaletrain_trainer.torchrun")


def preflight(environ: dict[str, str]) -> None:
    """The checks that need no torch: the config, its fit to the world size, and the data file."""
    config = load_training_config(environ=environ)
    world_size = int(environ.get("PET_NNODES", "1")) * int(environ.get("PET_NPROC_PER_NODE", "1"))
    config.accumulation_steps(world_size)
    if config.data.source in ("text", "tokens") and not Path(config.data.path or "").is_file():
        raise ProblemsError([Problem(("data", "path"), f"{config.data.path} is not a readable file in this pod")])


def main(argv: list[str]) -> int:
    # A job without a training block (args of its own, e.g. `--module my_train`) has no config to check.
    try:
        if CONFIG_ENV in os.environ:
            preflight(dict(os.environ))
    except ProblemsError as error:
        return config_error(error)
    # torchrun runs as a child, not exec'd, so that its exit can be read; the pod's stop signals reach it
    # through this process.
    torchrun = subprocess.Popen([*TORCHRUN, *argv], env=torchrun_env(os.environ))
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: torchrun.send_signal(received))
    return pod_exit_code(torchrun.wait(), termination_message_path())


def torchrun_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The pod's environment, and for the built-in trainer (a training config) time to checkpoint after a
    SIGTERM; a script of one's own keeps torchrun's default, as does a timeout the pod's env sets."""
    if CONFIG_ENV not in environ:
        return dict(environ)
    return {SHUTDOWN_TIMEOUT_ENV: str(TRAINER_SHUTDOWN_TIMEOUT_SECONDS)} | dict(environ)


def pod_exit_code(torchrun_exit: int, termination_message: Path) -> int:
    """torchrun's exit code, or the code of the result a worker recorded in the termination message."""
    if torchrun_exit == 0:
        return 0
    if torchrun_exit < 0:  # killed by a signal: a shell's 128 + N, as a container runtime reports it
        return 128 - torchrun_exit
    try:
        message = termination_message.read_text()
    except OSError:
        return torchrun_exit
    result = result_of(None, message)
    return EXIT_CODES[result] if result is not None else torchrun_exit


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
