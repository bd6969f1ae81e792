"""The training configuration: `spec.training` of a ScaleTrainJob, and what the trainer reads.

Torch-free on purpose: the operator imports this module to validate and serialize the config, and
the operator image has no torch. The operator passes the config to every pod as JSON in the
`SCALETRAIN_CONFIG` environment variable; `--config FILE` (YAML or JSON) works too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from . import wire
from .documents import DocumentError, load_documents
from .exit_codes import EXIT_HANG, EXIT_NON_FINITE
from .storage_urls import object_url_problem
from .validation import (
    Problem,
    ProblemsError,
    SpecModel,
    problems_from_validation_error,
)

# "package.module:function": how a custom model factory or dataset is named.
IMPORT_PATH_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
HF_MODEL = "hf"
BUILTIN_MODELS = ("gpt", HF_MODEL)
INSTRUCTIONS_SOURCE = "instructions"
BUILTIN_DATA_SOURCES = ("synthetic", "text", "tokens", INSTRUCTIONS_SOURCE)
# The sources that read data.path.
FILE_DATA_SOURCES = ("text", "tokens", INSTRUCTIONS_SOURCE)


def _builtin_or_import_path(builtins: tuple[str, ...]) -> str:
    return "^(" + "|".join(builtins) + "|" + IMPORT_PATH_PATTERN + ")$"


Options = Annotated[
    dict[str, Any],
    Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}),
]


# The precisions the trainer computes in (precision.py); `auto` in a config resolves to one of them.
PrecisionName = Literal["bf16", "fp16", "fp32"]


# What the descriptions of the fields that take an object-storage URL say of it (storage_urls.py).
_STORE = "an S3-compatible store's endpoint and the credentials: spec.objectStorage"
_PREFIX_URL = f"an s3://BUCKET/PREFIX URL ({_STORE})"
_OBJECT_URL = f"an s3://BUCKET/KEY URL ({_STORE})"


# The options of `model.name: hf` (hf.py): a Hugging Face config (a mapping of its fields with model_type, or a
# directory holding config.json) and a directory of weights saved by save_pretrained; each directory local or on
# object storage.
HF_CONFIG_OPTION = "config"
HF_PRETRAINED_OPTION = "pretrained"


class LoraConfig(SpecModel):
    """Low-rank adapters: the model's weights frozen, each targeted linear layer trained as a low-rank update B·A
    scaled by alpha / rank (PEFT's LoRA layers). Only the adapters train, are in the optimizer and are checkpointed."""

    rank: int = Field(8, ge=1, le=4096, description="The adapters' rank r: B is out × r, A is r × in.")
    alpha: float = Field(16.0, gt=0, le=1 << 16, description="The update is scaled by alpha / rank.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input, in [0, 1).")
    target_modules: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        None,
        max_length=256,
        description="The layers to adapt, by name or the end of one (e.g. [q_proj, v_proj, gate_proj]). Unset: "
        "every linear layer of the attention modules (Llama's q_proj, k_proj, v_proj and o_proj; the built-in "
        "gpt's attn.qkv and attn.proj).",
    )


class ModelConfig(SpecModel):
    """The model. The built-in `gpt` is a GPT-style decoder; `hf` any Hugging Face causal LM; anything else is a
    factory function."""

    name: str = Field(
        "gpt",
        pattern=_builtin_or_import_path(BUILTIN_MODELS),
        max_length=256,
        description='"gpt" (built-in decoder), "hf" (a Hugging Face causal LM, from options.config and optionally '
        "options.pretrained: directories, local or s3://BUCKET/PREFIX, or a config mapping) or "
        '"package.module:function" returning an nn.Module.',
    )
    layers: int = Field(4, ge=1, le=512, description="Transformer blocks.")
    heads: int = Field(4, ge=1, le=512, description="Attention heads; must divide width.")
    width: int = Field(128, ge=8, le=65536, description="Embedding width (d_model).")
    vocab_size: int = Field(256, ge=2, le=1 << 24, description="Vocabulary size; 256 for byte-level text.")
    context_length: int = Field(64, ge=2, le=1 << 20, description="Tokens per sample.")
    dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="Dropout probability of the built-in gpt model, in [0, 1); 0 disables it."
    )
    lora: LoraConfig | None = Field(
        None, description="Train low-rank adapters only, the model's own weights frozen; unset: every weight trains."
    )
    options: Options = Field(
        default_factory=dict,
        description="Keyword arguments for a custom factory. For hf: config (a mapping of a Hugging Face config's "
        "fields, with model_type, or a directory holding config.json; default: pretrained's) and pretrained "
        f"(a directory of weights saved by save_pretrained). Either directory may be {_PREFIX_URL}.",
    )

    def problems(self) -> Iterator[Problem]:
        if self.width % self.heads:
            yield Problem(
                ("width",), f"{self.width} is not divisible by heads ({self.heads}); pick a multiple of heads"
            )
        if self.name == HF_MODEL:
            yield from self._hf_option_problems()

    def _hf_option_problems(self) -> Iterator[Problem]:
        """The options' shapes; whether they name a usable config and weights is checked where transformers is."""
        for unknown in sorted(set(self.options) - {HF_CONFIG_OPTION, HF_PRETRAINED_OPTION}):
            yield Problem(
                ("options", unknown),
                f"unknown option of the hf model; known: {HF_CONFIG_OPTION}, {HF_PRETRAINED_OPTION}",
            )
        config, pretrained = self.options.get(HF_CONFIG_OPTION), self.options.get(HF_PRETRAINED_OPTION)
        if config is None and pretrained is None:
            message = "required for model hf: a Hugging Face config's fields (with model_type) or a local directory"
            yield Problem(("options", HF_CONFIG_OPTION), message)
        elif config is not None and not (
            (isinstance(config, dict) and isinstance(config.get("model_type"), str)) or _is_path(config)
        ):
            message = "a mapping of a Hugging Face config's fields, with model_type (e.g. llama), or a local directory"
            yield Problem(("options", HF_CONFIG_OPTION), message)
        if pretrained is not None and not _is_path(pretrained):
            yield Problem(("options", HF_PRETRAINED_OPTION), "a local directory of weights saved by save_pretrained")
        for option, value in ((HF_CONFIG_OPTION, config), (HF_PRETRAINED_OPTION, pretrained)):
            if isinstance(value, str):
                yield from _storage_url_problems(value, ("options", option), names_object=False)


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _storage_url_problems(path: str | None, where: tuple[str, ...], names_object: bool) -> Iterator[Problem]:
    """A malformed object-storage URL at `where` (storage_urls.object_url_problem); a plain path is the pod's."""
    if path is not None and (problem := object_url_problem(path, names_object)):
        yield Problem(where, problem)


class DataConfig(SpecModel):
    """Where training samples come from."""

    source: str = Field(
        "synthetic",
        pattern=_builtin_or_import_path(BUILTIN_DATA_SOURCES),
        max_length=256,
        description='"synthetic" (a learnable pattern), "text" (UTF-8 file, byte tokens), "tokens" '
        '(uint16/uint32 memmap .bin, the nanoGPT convention), "instructions" (JSONL of {prompt, response} or chat '
        "{messages}, tokenized by the hf model's tokenizer, the loss on responses only) or "
        '"package.module:function" returning a Dataset.',
    )
    path: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description=f"File for the text, tokens and instructions sources: a path in the pod, or {_OBJECT_URL}.",
    )
    token_dtype: Literal["uint16", "uint32"] = Field("uint16", description="Element type of a tokens .bin file.")
    synthetic_samples: int = Field(65536, ge=1, le=1 << 31, description="Samples in the synthetic data set.")
    options: Options = Field(default_factory=dict, description="Keyword arguments for a custom dataset.")
    workers: int | None = Field(
        None,
        ge=0,
        le=64,
        description="Processes per rank that read and collate the next steps' samples while the current step "
        "trains (a torch DataLoader); 0 reads in the training process. Unset: 2 on GPUs, 0 on CPU (where workers "
        "would take cores from the ranks), chosen by each process from its device. The samples and their order "
        "do not depend on it.",
    )
    prefetch_factor: int = Field(
        2, ge=1, le=64, description="Steps each data worker loads ahead of training; unused with 0 workers."
    )
    packing: bool = Field(
        False,
        description="instructions only: pack several records into each sample of contextLength tokens (fewer "
        "padding tokens, so fewer steps an epoch); each record attends to itself alone where the model takes "
        "position ids (transformers' models). Off: one record a sample.",
    )

    def problems(self) -> Iterator[Problem]:
        if self.source in FILE_DATA_SOURCES and self.path is None:
            yield Problem(("path",), f"required for source {self.source}: set the file to read")
        if self.packing and self.source != INSTRUCTIONS_SOURCE:
            yield Problem(
                ("packing",), f"packs {INSTRUCTIONS_SOURCE} only: set source {INSTRUCTIONS_SOURCE}, or remove it"
            )
        yield from _storage_url_problems(self.path, ("path",), names_object=True)


class OptimizerConfig(SpecModel):
    """The optimizer: AdamW, or SGD with momentum."""

    name: Literal["adamw", "sgd"] = Field(
        "adamw", description="adamw (uses beta1, beta2 and eps) or sgd (uses momentum)."
    )
    lr: float = Field(3e-4, gt=0, le=10, description="Peak learning rate.")
    weight_decay: float = Field(
        0.1, ge=0, le=10, description="Weight decay of the weight matrices; biases and norms get none."
    )
    beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1.")
    beta2: float = Field(0.95, ge=0, lt=1, description="AdamW beta2.")
    eps: float = Field(1e-8, gt=0, le=1, description="AdamW epsilon, added to the denominator for numerical stability.")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum.")


class SchedulerConfig(SpecModel):
    """Linear warmup, then decay to minLrRatio × lr at maxSteps."""

    name: Literal["cosine", "linear", "constant"] = Field(
        "cosine", description="Decay after warmup: cosine, linear, or constant (stays at lr)."
    )
    warmup_steps: int = Field(
        0, ge=0, description="Optimizer steps of linear warmup up to lr; 0 starts at lr. At most maxSteps."
    )
    min_lr_ratio: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Final learning rate as a fraction of lr, reached at maxSteps (ignored by constant).",
    )


class CheckpointConfig(SpecModel):
    """Periodic checkpoints, which a restarted or resumed gang continues from; off unless dir is set."""

    dir: str | None = Field(
        None,
        min_length=1,
        description="Checkpoint directory, on shared storage for multi-node jobs: a path in the pod (a shared "
        f"volume), or {_PREFIX_URL}; unset disables checkpoints. The trainer resumes from the newest "
        "checkpoint here on start.",
    )
    every_steps: int = Field(100, ge=1, description="Save every N optimizer steps (and at the end).")
    keep: int = Field(3, ge=1, le=1000, description="How many of the newest checkpoints to keep.")
    asynchronous: bool = Field(
        False,
        alias="async",  # a Python keyword, hence the field's own name
        description="Write checkpoints in the background: a save pauses training only to copy the state to host "
        "memory (one more copy of the model and optimizer state per process, held for the run), then the copy is "
        "written, verified and renamed into place while training continues. The next save, a stop and the end of "
        "the run wait for it first; a crash meanwhile leaves only step-N.partial, which resuming ignores.",
    )

    def problems(self) -> Iterator[Problem]:
        yield from _storage_url_problems(self.dir, ("dir",), names_object=False)


class EvalConfig(SpecModel):
    """Held-out evaluation: every everySteps steps, the mean token loss over the same held-out samples."""

    every_steps: int = Field(100, ge=1, le=1 << 31, description="Evaluate every N optimizer steps (and at the end).")
    steps: int = Field(
        10,
        ge=1,
        le=1 << 20,
        description="Global batches (globalBatchSize samples each) per evaluation; fewer if the held-out set holds "
        "fewer. The same samples every time, whatever the world size.",
    )
    fraction: float | None = Field(
        None,
        gt=0,
        le=0.5,
        description="Hold out this share of the data set (chosen by seed, never trained on), e.g. 0.01.",
    )
    path: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Evaluate on this file instead, read as data.source reads data.path (text and tokens sources): "
        f"a path in the pod, or {_OBJECT_URL}.",
    )

    def problems(self) -> Iterator[Problem]:
        if (self.fraction is None) == (self.path is None):
            message = "set exactly one of fraction (hold out a share of the data) and path (a separate file)"
            yield Problem(("fraction",), message)
        yield from _storage_url_problems(self.path, ("path",), names_object=True)


class TrainingConfig(SpecModel):
    """Everything the trainer needs that does not depend on where it runs."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    strategy: Literal["auto", "ddp", "fsdp"] = Field(
        "auto", description="auto: ddp when the model and optimizer state fit comfortably on one device, else fsdp."
    )
    precision: Literal["auto", PrecisionName] = Field(
        "auto", description="auto: bf16 on GPUs with compute capability >= 8.0, fp16 on older GPUs, fp32 on CPU."
    )
    global_batch_size: int = Field(
        ge=1,
        le=1 << 24,
        description="Samples per optimizer step, over all processes; must be divisible by microBatchSize × world size.",
    )
    micro_batch_size: int = Field(ge=1, le=1 << 16, description="Samples per forward/backward pass on one process.")
    max_steps: int = Field(1000, ge=1, le=1 << 31, description="Optimizer steps to train for.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    grad_clip_norm: float = Field(1.0, ge=0, description="Clip gradients to this global norm; 0 disables clipping.")
    activation_checkpointing: bool = Field(False, description="Recompute each block's activations in backward.")
    compile: bool = Field(
        False,
        description="torch.compile (inductor) each block of the model's `blocks` ModuleList, or the whole model if "
        "it has none: faster steps after a one-off compile of tens of seconds at start. Needs a C++ compiler on CPU "
        "and Triton on GPUs.",
    )
    sync_batch_norm: bool = Field(False, description="Convert BatchNorm to SyncBatchNorm (GPU only).")
    seed: int = Field(
        1337,
        ge=0,
        le=(1 << 32) - 1,
        description="Random seed of model initialization, data order and synthetic data, the same on every rank.",
    )
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    eval: EvalConfig | None = Field(
        None, description="Held-out evaluation, logged as evalLoss (metrics.jsonl, status.progress); unset: none."
    )
    loss: str | None = Field(
        None,
        pattern="^" + IMPORT_PATH_PATTERN + "$",
        max_length=256,
        description='"package.module:function(logits, targets) -> (summed loss, token count)", both 0-dim tensors; '
        "the loss is a sum over the tokens the count counts. Unset: token cross-entropy, ignoring targets of -100. "
        "Accumulation stays exact: the gradients are divided by the global batch's token count.",
    )
    tensorboard: bool = Field(
        False,
        description="Write TensorBoard event files into outputDir/tensorboard (rank 0): every logged metric and "
        "evalLoss. Needs the tensorboard package in the image (pip install 'scaletrain[tensorboard]').",
    )
    log_every_steps: int = Field(
        10,
        ge=1,
        description="Log loss and throughput (metrics.jsonl, status.progress) every N optimizer steps and at the last.",
    )
    output_dir: str = Field("/tmp/scaletrain", min_length=1, description="metrics.jsonl and other outputs (rank 0).")
    distributed_timeout_seconds: int = Field(
        600,
        ge=10,
        le=86400,
        description="Timeout for every collective: a dead peer fails the job instead of hanging it.",
    )
    metrics_port: int = Field(
        9400, ge=1024, le=65535, description="Rank 0 serves progress JSON and Prometheus metrics here."
    )
    on_non_finite: Literal["fail", "skip"] = Field(
        "fail",
        description="A NaN or infinite loss or gradient norm. fail: stop at the next log step or save, exit "
        f"{EXIT_NON_FINITE}, "
        "naming the step (nothing after it is saved). skip: drop that update, as the fp16 loss scaler does (one "
        "host sync per step), save no checkpoint until an update is applied again, and fail as fail does after "
        "maxNonFiniteSteps dropped steps in a row. Either way a run whose last loss is not finite fails.",
    )
    max_non_finite_steps: int = Field(
        3,
        ge=1,
        le=1 << 31,
        description="onNonFinite: skip: this many steps in a row with a non-finite loss or gradient norm (their "
        f"updates dropped) stop the run as diverged, exit {EXIT_NON_FINITE}. A loss that stays NaN is a divergence, "
        "not a bad batch.",
    )
    hang_timeout_seconds: int | None = Field(
        None,
        ge=1,
        le=86400,
        description="Stop a rank when no optimizer step completes for this long (checkpoint saves excepted): dump "
        f"every thread's stack to outputDir/hang-rank<R>.txt and exit {EXIT_HANG}. Default: the larger of 300 s and "
        "10 × "
        "the median step time. Rank 0's progress promises its next report within this plus a logging interval; "
        "the operator restarts a Running gang silent past that (Event Hang).",
    )

    def problems(self) -> Iterator[Problem]:
        if self.micro_batch_size > self.global_batch_size:
            yield Problem(
                ("microBatchSize",), f"{self.micro_batch_size} exceeds globalBatchSize ({self.global_batch_size})"
            )
        if self.scheduler.warmup_steps > self.max_steps:
            yield Problem(
                ("scheduler", "warmupSteps"), f"{self.scheduler.warmup_steps} exceeds maxSteps ({self.max_steps})"
            )
        if self.eval is not None and self.eval.path is not None and self.data.source not in FILE_DATA_SOURCES:
            sources = ", ".join(FILE_DATA_SOURCES)
            yield Problem(
                ("eval", "path"),
                f"a separate eval file needs a data.source that reads files ({sources}), not {self.data.source}; "
                "use eval.fraction",
            )

    def accumulation_problems(self, world_size: int) -> list[Problem]:
        """Why this config cannot run at `world_size`, if it cannot."""
        per_step = self.micro_batch_size * world_size
        if self.global_batch_size % per_step:
            return [
                Problem(
                    ("globalBatchSize",),
                    f"{self.global_batch_size} is not divisible by microBatchSize × world size "
                    f"({self.micro_batch_size} × {world_size} = {per_step})",
                )
            ]
        return []

    def accumulation_steps(self, world_size: int) -> int:
        """Micro-batches per optimizer step on each process: global / (micro × world size)."""
        problems = self.accumulation_problems(world_size)
        if problems:
            raise ProblemsError(problems)
        return self.global_batch_size // (self.micro_batch_size * world_size)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), separators=(",", ":"))


def parse_training_config(data: Any) -> TrainingConfig:
    """Validate a plain mapping; raises ProblemsError with every problem found."""
    try:
        return TrainingConfig.model_validate(data)
    except ValidationError as error:
        raise ProblemsError(problems_from_validation_error(error, TrainingConfig)) from None


def load_training_config(path: str | None = None, environ: dict[str, str] | None = None) -> TrainingConfig:
    """The trainer's config: from `path` (YAML or JSON: a training config, or a ScaleTrainJob whose
    spec.training is used) if given, else from $SCALETRAIN_CONFIG."""
    environ = os.environ if environ is None else environ
    if path is not None:
        text, origin = Path(path).read_text(), path
    elif wire.CONFIG_ENV in environ:
        text, origin = environ[wire.CONFIG_ENV], f"${wire.CONFIG_ENV}"
    else:
        raise ProblemsError([Problem((), f"no training config: pass --config FILE or set ${wire.CONFIG_ENV}")])
    try:
        documents = load_documents(text, origin)  # JSON is YAML, so one parser reads both
    except DocumentError as error:
        raise ProblemsError([Problem((), str(error))]) from None
    data = documents[0] if documents else None
    if isinstance(data, dict) and data.get("kind") == "ScaleTrainJob":  # a whole job file: use its spec.training
        data = (data.get("spec") or {}).get("training")
    return parse_training_config(data)
