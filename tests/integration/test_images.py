"""The Dockerfile without a Docker engine: hadolint, its targets and build args, and smoke tests of
what each image runs (its entry point from the package, with --help)."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from scaletrain_testing.jobs import REPO

DOCKERFILE = REPO / "Dockerfile"
BIN = Path(sys.executable).parent


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each build stage's instructions as (INSTRUCTION, arguments), continuation lines joined;
    the global ARGs before the first FROM are the stage ''."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    result: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            current = arguments.split(" AS ")[-1].strip()
            result[current] = []
        result[current].append((instruction.upper(), arguments.strip()))
    return result


def instruction(stage: str, name: str) -> list[str]:
    return [arguments for kind, arguments in stages()[stage] if kind == name]


def exec_form(stage: str, name: str) -> list[str]:
    (arguments,) = instruction(stage, name)
    return yaml.safe_load(arguments)  # a JSON array


def test_hadolint_has_no_warnings_or_errors():
    result = subprocess.run(
        [str(BIN / "hadolint"), "--failure-threshold", "warning", str(DOCKERFILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_targets_with_version_build_args():
    assert {"operator", "trainer"} <= set(stages())
    args = dict(arg.split("=", 1) for arg in instruction("", "ARG"))
    assert {"PYTHON_VERSION", "TORCH_VERSION", "CUDA_VERSION"} <= set(args)
    assert instruction("trainer", "FROM") == ["${TRAINER_BASE} AS trainer"]
    base = args["TRAINER_BASE"]  # by default the PyTorch CUDA runtime of the pinned torch
    assert base.startswith("pytorch/pytorch:${TORCH_VERSION}-cuda${CUDA_VERSION}") and base.endswith("-runtime")
    # The base's torch must be the one the package pins, or pip would download a second build.
    assert f'torch=={args["TORCH_VERSION"]}; extra == "train"' in importlib.metadata.requires("scaletrain")


def test_the_operator_image_has_no_torch_and_the_trainer_image_runs_as_non_root():
    operator_installs = " ".join(instruction("operator", "RUN"))
    assert not any(word in operator_installs for word in ("[train", "requirements", "torch"))
    trainer_installs = " ".join(instruction("trainer", "RUN"))
    wheel = " ".join(instruction("wheel", "RUN"))
    assert "trainer-requirements.txt" in trainer_installs and "[train,hf,tensorboard,s3]" in wheel
    for stage in ("operator", "trainer"):
        (user,) = instruction(stage, "USER")
        assert user.split(":")[0] not in ("root", "0")
    # The operator's package imports no torch: its image can stay slim.
    check = "import sys, scaletrain_operator.controller.main; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)


def test_dockerignore_lets_in_exactly_what_the_build_copies():
    ignore = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignore[0] == "**"  # everything else stays out of the build context
    copied = {
        source.rstrip("/")
        for stage in stages()
        for arguments in instruction(stage, "COPY")
        if not arguments.startswith("--from")
        for source in shlex.split(arguments)[:-1]
    }
    assert {entry.lstrip("!").rstrip("/") for entry in ignore if entry.startswith("!")} == copied


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel the images install, built as the Dockerfile's `wheel` stage builds it: from a copy of
    just what that stage copies (so nothing else in the checkout can leak in)."""
    context, out = tmp_path_factory.mktemp("context"), tmp_path_factory.mktemp("wheel")
    for arguments in instruction("wheel", "COPY"):
        *sources, _ = shlex.split(arguments)
        for source in sources:
            if (REPO / source).is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
                shutil.copytree(REPO / source, context / source, ignore=ignore)
            else:
                shutil.copy(REPO / source, context / source)
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out)]
    subprocess.run([*build, str(context)], check=True, timeout=300, capture_output=True)
    (path,) = out.glob("scaletrain-*.whl")
    return path


def test_the_wheel_ships_the_operator_command_and_both_packages(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    (operator_command,) = exec_form("operator", "ENTRYPOINT")
    assert re.search(rf"^{re.escape(operator_command)} = ", scripts, re.MULTILINE)
    assert {name.split("/")[0] for name in names} >= {"scaletrain_operator", "scaletrain_trainer"}
    assert not any(name.startswith(("tests/", "bench/")) for name in names)


@pytest.mark.parametrize("target", ["operator", "trainer"])
def test_each_image_entry_point_runs(target):
    """The entry point each image declares exists once the package is installed (here: with its
    `train` extra, as in the trainer image) and answers --help."""
    command = exec_form(target, "ENTRYPOINT")
    run = [str(BIN / command[0]), *command[1:], "--help"]
    result = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


def test_the_chart_runs_the_operator_image_entry_point():
    deployment = (REPO / "charts/scaletrain/templates/deployment.yaml").read_text()
    assert f"command: {exec_form('operator', 'ENTRYPOINT')}".replace("'", '"') in deployment
