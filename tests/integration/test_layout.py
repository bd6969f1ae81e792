"""Packaging and layout: import packages one level down, one distribution. That the operator imports no
torch is checked in test_contract_imports.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata

import pytest
import tomllib

from scaletrain_testing.imports import import_graph
from scaletrain_testing.imports import room as room_of
from scaletrain_testing.jobs import REPO


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


def test_bench_and_the_tests_share_the_harness_as_an_installed_package():
    """tests/scaletrain_testing is installed with the editable set-up: bench/ imports it from anywhere, and
    nothing reaches into tests/ by editing sys.path."""
    result = _python("import scaletrain_testing.control_plane, scaletrain_testing.plugins.faults; print('ok')", cwd="/")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    for path in [*(REPO / "bench").glob("*.py"), *(REPO / "tests").rglob("*.py")]:
        assert not re.search(r"sys\.path\.(insert|append)|sys\.path\s*\+?=", path.read_text()), f"{path} edits sys.path"


def test_cli_help_lists_the_commands():
    result = subprocess.run(
        [sys.executable, "-m", "scaletrain_operator.cli", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0
    for command in ("render", "validate", "crd"):
        assert command in result.stdout


# Importing every module of a room (in a fresh interpreter) loads exactly these rooms, and never these heavy
# dependencies: the operator image has no torch, and nothing but the controller needs a Kubernetes client.
KIT = {"api", "validation"}  # the types, and the checks they run on themselves
ROOM_LOADS = {
    "api": (KIT, ("torch", "kopf", "kubernetes")),
    "validation": (KIT, ("torch", "kopf", "kubernetes")),
    "render": (KIT | {"render"}, ("torch", "kopf", "kubernetes")),
    "policy": (KIT | {"render", "policy"}, ("torch", "kopf", "kubernetes")),
    "progress": (KIT | {"progress"}, ("torch", "kopf", "kubernetes")),
    "in_place": (KIT | {"render", "policy", "in_place"}, ("torch", "kopf", "kubernetes")),
    "report_server": (KIT | {"render", "policy", "in_place", "report_server"}, ("torch", "kopf", "kubernetes")),
    "convert": (KIT | {"render", "convert"}, ("torch", "kopf", "kubernetes")),
    "controller": (KIT | {"render", "policy", "progress", "in_place", "report_server", "controller"}, ("torch",)),
    "local": (KIT | {"render", "policy", "progress", "in_place", "report_server", "local"}, ("kopf", "kubernetes")),
    "cli": (KIT | {"render", "convert", "cli"}, ("torch", "kopf", "kubernetes")),  # run-local loads local when run
}


@pytest.mark.parametrize("room", ROOM_LOADS)
def test_importing_a_room_loads_only_the_rooms_below_it(room):
    modules = [name for name in import_graph() if room_of(name) == room]
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "loaded = [m for m in sys.modules if m.startswith('scaletrain_operator.')]\n"
        "heavy = [m for m in ('torch', 'kopf', 'kubernetes') if m in sys.modules]\n"
        "print(json.dumps({'rooms': sorted({m.split('.')[1] for m in loaded}), 'heavy': heavy}))"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    expected_rooms, never = ROOM_LOADS[room]
    assert set(loaded["rooms"]) == expected_rooms
    assert not set(loaded["heavy"]) & set(never), f"the {room} room loads {loaded['heavy']}"
