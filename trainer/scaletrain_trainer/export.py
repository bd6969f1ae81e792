"""`python -m scaletrain_trainer.export CHECKPOINT OUTDIR [--adapter] [--base DIR]`: the model of a checkpoint
(a `step-N` directory) as a Hugging Face directory, config.json and model.safetensors, which
`AutoModelForCausalLM.from_pretrained(OUTDIR)` loads; with LoRA (model.lora) the base with the adapters merged
into it, or with --adapter the adapters alone in PEFT's format (adapter_config.json, adapter_model.safetensors),
which `PeftModel.from_pretrained(base, OUTDIR)` loads.

For `model.name: hf` only: the built-in gpt and custom models have no Hugging Face class to load them with.
The model is rebuilt from the training config saved in the checkpoint (its `model.options.config`, if a
directory, must be readable here; `pretrained` is read only for a merged LoRA model, whose frozen base the
checkpoint does not hold) and the weights are read from the checkpoint in this one process, at any world size
the run had. `--base` names the model's directory where this machine sees it, when the training config names it
as the training's pods saw it (a volume's mountPath, say).

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

from .contract.config import HF_CONFIG_OPTION, HF_MODEL, HF_PRETRAINED_OPTION, TrainingConfig, parse_training_config
from .contract.validation import ProblemsError
from .models.hf import one_line
from .models.lora import merge_adapters, save_adapter
from .models.model import build_model
from .training.checkpoint import TRAINING_CONFIG_FILE

EXIT_CANNOT_EXPORT = 2


class CannotExport(Exception):
    """Why a checkpoint cannot be exported, in one line."""


def export(checkpoint: Path, output: Path, adapter_only: bool = False, base: Path | None = None) -> None:
    """Write the checkpoint's Hugging Face model to `output` (created if needed): whole, with LoRA's adapters
    merged into the base, or (`adapter_only`) the adapters alone in PEFT's format. `base`: the model's directory
    here, for the one the training config names."""
    config = _training_config(checkpoint)
    if base is not None:
        config = _based_at(config, base)
    if config.model.name != HF_MODEL:
        raise CannotExport(
            f"{checkpoint} holds model {config.model.name!r}; export writes Hugging Face models (model.name: hf) only"
        )
    lora = config.model.lora
    if adapter_only and lora is None:
        raise CannotExport(f"{checkpoint} has no adapters (model.lora is unset): export it whole, without --adapter")
    model = _model(config, with_base=lora is not None and not adapter_only)
    _load_trained_weights(model, checkpoint)
    if adapter_only:
        assert lora is not None
        save_adapter(model.hf, lora, config.model.options.get(HF_PRETRAINED_OPTION), output)
        return
    if lora is not None:
        merge_adapters(model.hf)
    model.hf.save_pretrained(output)


def _model(config: TrainingConfig, with_base: bool) -> torch.nn.Module:
    """The model to give the checkpoint's weights. Where the checkpoint holds every weight that is written (all of
    them, or LoRA's adapters alone), built on the meta device, then given storage: initializing weights first
    (minutes, for a large model) would be wasted; non-persistent buffers stay uninitialized, which save_pretrained
    does not write. A merged LoRA model needs its frozen base, which only `pretrained` has: built as for training."""
    if with_base:
        return build_model(config.model)
    with torch.device("meta"):
        model = build_model(config.model)
    return model.to_empty(device="cpu")


def _load_trained_weights(model: torch.nn.Module, checkpoint: Path) -> None:
    """The weights that trained (every weight, or LoRA's adapters), read from the checkpoint in this process."""
    frozen = {name for name, parameter in model.named_parameters() if not parameter.requires_grad}
    state = {"model": {name: value for name, value in model.state_dict().items() if name not in frozen}}
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
    model.load_state_dict(state["model"], strict=not frozen)


def _based_at(config: TrainingConfig, base: Path) -> TrainingConfig:
    """The config with its hf model's directory (`pretrained`, and `config` where it names the same one, or
    `config` alone) moved to `base`."""
    options = config.model.options
    named = options.get(HF_PRETRAINED_OPTION, options.get(HF_CONFIG_OPTION))
    if config.model.name != HF_MODEL or not isinstance(named, str):
        raise CannotExport("--base: the checkpoint's model names no directory (model.options.pretrained or config)")
    if not base.is_dir():
        raise CannotExport(f"--base: {base} is not a directory")
    moved = {key: str(base) if value == named else value for key, value in options.items()}
    return config.model_copy(update={"model": config.model.model_copy(update={"options": moved})})


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
    parser.add_argument(
        "--adapter", action="store_true", help="LoRA: write the adapters alone, in PEFT's format, not the merged model"
    )
    parser.add_argument(
        "--base",
        type=Path,
        metavar="DIR",
        help="the hf model's directory (options.pretrained, or config) where this machine sees it, when the "
        "training's pods saw it elsewhere",
    )
    args = parser.parse_args(argv)
    try:
        export(args.checkpoint, args.output, adapter_only=args.adapter, base=args.base)
    except CannotExport as error:
        print(f"scaletrain export: {error}", file=sys.stderr)
        return EXIT_CANNOT_EXPORT
    except ProblemsError as error:  # the saved config no longer builds here: its config directory, transformers
        where = "" if args.base else " (where the model's directory is elsewhere here, give it with --base DIR)"
        print(f"scaletrain export: {args.checkpoint}: {error}{where}", file=sys.stderr)
        return EXIT_CANNOT_EXPORT
    print(f"exported {args.checkpoint} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
