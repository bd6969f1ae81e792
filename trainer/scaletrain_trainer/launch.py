"""Pod entry point: check the training config, then exec torchrun with the given arguments.

torchrun reports any failed worker as exit code 1, so a config error found inside the workers would
look like a crash worth restarting. Checking first, in the pod's own process, lets the pod exit with
EXIT_CONFIG_ERROR, which the operator does not retry. Usage (the rendered default):

    python -m scaletrain_trainer.launch --module scaletrain_trainer
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .__main__ import config_error
from .config import load_training_config
from .validation import Problem, ProblemsError


def preflight(environ: dict[str, str]) -> None:
    """The checks that need no torch: the config, its fit to the world size, and the data file."""
    config = load_training_config(environ=environ)
    world_size = int(environ.get("PET_NNODES", "1")) * int(environ.get("PET_NPROC_PER_NODE", "1"))
    config.accumulation_steps(world_size)
    if config.data.source in ("text", "tokens") and not Path(config.data.path or "").is_file():
        raise ProblemsError([Problem(("data", "path"), f"{config.data.path} is not a readable file in this pod")])


def main(argv: list[str]) -> int:
    try:
        preflight(dict(os.environ))
    except ProblemsError as error:
        return config_error(error)
    # `python -m torch.distributed.run` is torchrun, without depending on PATH.
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
