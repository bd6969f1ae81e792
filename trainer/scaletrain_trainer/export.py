"""`python -m scaletrain_trainer.export CHECKPOINT OUTDIR`: the model of a checkpoint (a `step-N` directory)
as a Hugging Face directory, config.json and model.safetensors, which
`AutoModelForCausalLM.from_pretrained(OUTDIR)` loads.

For `model.name: hf` only: the built-in gpt and custom models have no Hugging Face class to load them with.
The model is rebuilt from the training config saved in the checkpoint (its `model.options.config`, if a
directory, must be readable here; `pretrained` is not read: the checkpoint has the weights) and the weights
are read from the checkpoint in this one process, at any world size the run had.

Exit codes: 0 written; 2 when the checkpoint cannot be exported, with one line on stderr saying why.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from .contract.config import HF_MODEL, TrainingConfig, parse_training_config
from .contract.validation import ProblemsError
from .models.hf import one_line
from .models.model import build_model
from .training.checkpoint import TRAINING_CONFIG_FILE

EXIT_CANNOT_EXPORT = 2


class CannotExport(Exception):
    """Why a checkpoint cannot be exported, in one line."""


def export(checkpoint: Path, output: Path) -> None:
    """Write the checkpoint's Hugging Face model to `output` (created if needed)."""
    config = _training_config(checkpoint)
    if config.model.name != HF_MODEL:
        raise CannotExport(
            f"{checkpoint} holds model {config.model.name!r}; export writes Hugging Face models (model.name: hf) only"
        )
    # Built on the meta device, then given storage: the weights all come from the checkpoint, so initializing
    # them first (minutes, for a large model) would be wasted. Non-persistent buffers stay uninitialized, which
    # save_pretrained does not write.
    with torch.device("meta"):
        model = build_model(config.model)
    model.to_empty(device="cpu")
    state = {"model": model.state_dict()}
    try:
        # Read first on its own: without it, DCP would log a traceback for each place it looks.
        dcp.FileSystemReader(checkpoint).read_metadata()
        with warnings.catch_warnings():  # that it loads in one process without a process group, as meant
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(state, checkpoint_id=checkpoint, no_dist=True)
    except CheckpointException as error:  # a message per rank, each with a traceback: the first cause is enough
        cause, _ = next(iter(error.failures.values()))
        raise CannotExport(f"cannot read the model's weights from {checkpoint}: {one_line(cause)}") from None
    except (OSError, RuntimeError) as error:
        raise CannotExport(f"cannot read the model's weights from {checkpoint}: {one_line(error)}") from None
    model.load_state_dict(state["model"])
    model.hf.save_pretrained(output)


def _training_config(checkpoint: Path) -> TrainingConfig:
    saved = checkpoint / TRAINING_CONFIG_FILE
    if not saved.is_file():
        raise CannotExport(
            f"{checkpoint} is not a checkpoint: it has no {TRAINING_CONFIG_FILE} (give a step-N directory)"
        )
    try:
        return parse_training_config(json.loads(saved.read_text()))
    except json.JSONDecodeError as error:
        raise CannotExport(f"{saved} is not valid JSON: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scaletrain_trainer.export", description=__doc__)
    parser.add_argument("checkpoint", type=Path, help="a checkpoint directory, step-N in checkpoint.dir")
    parser.add_argument("output", type=Path, help="the Hugging Face directory to write")
    args = parser.parse_args(argv)
    try:
        export(args.checkpoint, args.output)
    except CannotExport as error:
        print(f"scaletrain export: {error}", file=sys.stderr)
        return EXIT_CANNOT_EXPORT
    except ProblemsError as error:  # the saved config no longer builds here: its config directory, transformers
        print(f"scaletrain export: {args.checkpoint}: {error}", file=sys.stderr)
        return EXIT_CANNOT_EXPORT
    print(f"exported {args.checkpoint} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
