"""Packaging and layout: import packages one level down, a torch-free config, one distribution."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import tomllib

from conftest import REPO

BLOCK_TORCH = "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError


def _python(code: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_operator_and_trainer_dirs_are_not_packages():
    for directory in ("operator", "trainer"):
        assert not (REPO / directory / "__init__.py").exists()
    assert (REPO / "operator" / "scaletrain_operator" / "__init__.py").exists()
    assert (REPO / "trainer" / "scaletrain_trainer" / "__init__.py").exists()


def test_stdlib_operator_is_not_shadowed_in_the_repo_root():
    result = _python("import operator; print(operator.add(2, 3), operator.__file__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("5 ") and "/operator/" not in result.stdout.split(" ", 1)[1]


def test_api_crd_render_and_training_config_import_without_torch():
    code = BLOCK_TORCH + (
        "import scaletrain_trainer.config, scaletrain_operator.api, scaletrain_operator.render, "
        "scaletrain_operator.crd, scaletrain_operator.cli\n"
        "print('ok')"
    )
    result = _python(code)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_torch_blocker_really_blocks():
    """The test above would prove nothing if the blocker let torch through."""
    result = _python(BLOCK_TORCH + "import torch")
    assert result.returncode != 0 and "import of torch halted" in result.stderr


def test_one_distribution_with_extras_and_console_script():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "scaletrain"
    base = " ".join(project["dependencies"])
    for requirement in ("kopf", "kubernetes", "pydantic", "PyYAML"):
        assert requirement in base
    assert "torch" not in base
    assert "torch==2.13.0" in project["optional-dependencies"]["train"]
    assert any(r.startswith("pytest") for r in project["optional-dependencies"]["dev"])
    scripts = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    assert scripts["scaletrain"] == "scaletrain_operator.cli:main"


def test_cli_help_lists_the_commands():
    result = subprocess.run(
        [sys.executable, "-m", "scaletrain_operator.cli", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0
    for command in ("render", "validate", "crd"):
        assert command in result.stdout
