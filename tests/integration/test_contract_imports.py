"""Importing the operator, as a process: no torch, and of the trainer only its contract."""

from __future__ import annotations

import subprocess
import sys

from scaletrain_testing.imports import PACKAGE_DIR, is_torch, is_trainer_beyond_contract, module_name
from scaletrain_testing.timeouts import INTERPRETER_IMPORT_S


def test_importing_every_operator_module_loads_no_torch_and_only_the_trainers_contract():
    modules = sorted(module_name(path) for path in PACKAGE_DIR.rglob("*.py"))
    code = f"import importlib, sys\nfor name in {modules!r}: importlib.import_module(name)\nprint(*sorted(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=INTERPRETER_IMPORT_S, check=True
    )
    loaded = result.stdout.split()
    assert "scaletrain_operator.cli" in loaded and "scaletrain_trainer.contract.wire" in loaded
    assert [name for name in loaded if is_torch(name) or is_trainer_beyond_contract(name)] == []


def test_the_importtime_check_in_contributing_holds():
    """CONTRIBUTING.md's one-line check: `python -X importtime -c "import scaletrain_operator.cli"`."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import scaletrain_operator.cli"],
        capture_output=True, text=True, timeout=INTERPRETER_IMPORT_S, check=True,
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    imported = [line.rsplit("|", 1)[-1].strip() for line in lines]
    assert "scaletrain_trainer.contract.wire" in imported
    assert [name for name in imported if is_torch(name) or is_trainer_beyond_contract(name)] == []
