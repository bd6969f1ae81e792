"""examples/finetune-lora/ is what `make generate` writes (hf_models.write_finetune_fixture): regenerated, its
records, tokenizer and config are byte for byte the same, and its weights the same within the float rounding in
which one CPU's pretraining may differ from another's."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from scaletrain_testing.hf_models import write_finetune_fixture
from scaletrain_testing.jobs import REPO

pytestmark = pytest.mark.integration

SHIPPED = REPO / "examples" / "finetune-lora"
WEIGHTS = "model/model.safetensors"


def test_the_fine_tuning_fixture_is_what_make_generate_writes(tmp_path):
    write_finetune_fixture(tmp_path)
    files = sorted(str(path.relative_to(SHIPPED)) for path in SHIPPED.rglob("*") if path.is_file())
    assert files == sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file())
    stale = [
        name for name in files if name != WEIGHTS and (SHIPPED / name).read_bytes() != (tmp_path / name).read_bytes()
    ]
    assert not stale, f"{stale} differ from what `make generate` writes: run it"
    shipped, regenerated = load_file(SHIPPED / WEIGHTS), load_file(tmp_path / WEIGHTS)
    assert shipped.keys() == regenerated.keys()
    # A changed generator (another seed, more steps) moves weights by far more than 1e-2.
    assert all(torch.allclose(shipped[name], regenerated[name], atol=1e-2, rtol=0) for name in shipped)
