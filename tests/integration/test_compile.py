"""torch.compile (training/parallel.py), which runs the C++ compiler to check for it: every block compiled
in place, and no compiler a config error."""

from __future__ import annotations

import pytest
import torch

from scaletrain_testing.tiny_training import CPU, RUNTIME, Bigram
from scaletrain_trainer.contract.config import parse_training_config
from scaletrain_trainer.contract.validation import ProblemsError
from scaletrain_trainer.models.model import build_model
from scaletrain_trainer.training.precision import resolve_precision

pytestmark = pytest.mark.usefixtures("process_group")


def test_compile_compiles_every_block_in_place_keeping_parameter_names():
    from scaletrain_trainer.training.parallel import apply_parallelism

    def parallel_model(**overrides):
        config = parse_training_config({"globalBatchSize": 2, "microBatchSize": 1} | overrides)
        torch.manual_seed(0)
        return apply_parallelism(build_model(config.model), "ddp", resolve_precision("fp32", CPU), RUNTIME, config)

    compiled = parallel_model(compile=True, activationCheckpointing=True)
    # Compiled lazily, at the first call: nothing is compiled here.
    # At world size 1 the model is not wrapped in DDP.
    assert all(block._compiled_call_impl is not None for block in compiled.blocks)
    assert compiled._compiled_call_impl is None  # per block, not the whole model as well
    plain = parallel_model(activationCheckpointing=True)
    assert compiled.state_dict().keys() == plain.state_dict().keys()  # checkpoints move between on and off


def test_compile_without_a_cpp_compiler_is_a_config_error_naming_the_field(monkeypatch):
    import torch._inductor.config as inductor_config

    from scaletrain_trainer.training.parallel import compile_in_place

    monkeypatch.setattr(inductor_config.cpp, "cxx", ("/nonexistent/g++",))
    with pytest.raises(ProblemsError) as error:
        compile_in_place(Bigram(), CPU)
    assert str(error.value) == (
        "compile: torch.compile on cpu needs a C++ compiler (g++, or $CXX): add it to the image, or set compile: false"
    )
