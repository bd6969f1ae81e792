"""Checkpoints verify themselves: each damage a disk, a copy or a person can do to the newest one is
found before it is loaded, the damaged one is moved aside to step-N.corrupt with a warning naming what
is wrong, and training resumes exactly from the one before it."""

from __future__ import annotations

import json
import shutil

import pytest

from scaletrain_testing.trainer_runs import config_for, run_trainer

# Constant LR so that a run of 20 steps and the resumed tail of it follow the same schedule; saves at
# 10, 15 and 20 are kept.
STRAIGHT = {"maxSteps": 20, "scheduler": {"name": "constant", "warmupSteps": 1}, "checkpoint": {"everySteps": 5}}
SHARD, METADATA = "__0_0.distcp", ".metadata"


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _overwrite_64_bytes(path):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(255 - b for b in data[middle : middle + 64])
    path.write_bytes(bytes(data))


def _empty(directory):
    shutil.rmtree(directory)
    directory.mkdir()


DAMAGE = {
    "shard deleted": (lambda d: (d / SHARD).unlink(), f"{SHARD} is missing"),
    "shard truncated": (lambda d: _truncate(d / SHARD), f"{SHARD} has "),
    "64 bytes of a shard overwritten": (lambda d: _overwrite_64_bytes(d / SHARD), f"{SHARD} does not match"),
    "metadata deleted": (lambda d: (d / METADATA).unlink(), f"{METADATA} is missing"),
    "metadata truncated": (lambda d: _truncate(d / METADATA), f"{METADATA} has "),
    "empty step directory": (_empty, "no manifest.json"),
    "manifest unreadable": (lambda d: (d / "manifest.json").write_text("{"), "manifest.json is unreadable"),
}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    directory = tmp_path_factory.mktemp("straight")
    run = run_trainer(directory, config_for(directory, STRAIGHT, checkpoints=True))
    assert run.returncode == 0, run.output[-2000:]
    return run


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_one_before_resumed(damage, straight, tmp_path):
    shutil.copytree(straight.directory / "checkpoints", tmp_path / "checkpoints")
    newest = tmp_path / "checkpoints" / "step-00000020"
    do_damage, named = DAMAGE[damage]
    do_damage(newest)

    # A longer run resumes: from step-15, the last sound one, so steps 16-20 are trained again.
    (tmp_path / "termination-log").touch()
    env = {"SCALETRAIN_TERMINATION_LOG": str(tmp_path / "termination-log")}
    resumed = run_trainer(tmp_path, config_for(tmp_path, STRAIGHT | {"maxSteps": 22}, checkpoints=True), env=env)

    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "checkpoint" in resumed.output and named in resumed.output, resumed.output[-3000:]
    assert "moved aside to step-00000020.corrupt" in resumed.output
    assert "resumed from" in resumed.output and "step-00000015 at step 15" in resumed.output
    assert (tmp_path / "checkpoints" / "step-00000020.corrupt").is_dir()
    summary = json.loads((tmp_path / "termination-log").read_text())
    assert summary["checkpointsSetAside"] == ["step-00000020.corrupt"]  # also served as progress, for an Event
    records = resumed.metrics()
    assert [r["step"] for r in records] == list(range(16, 23))
    assert [r["loss"] for r in records[:5]] == [r["loss"] for r in straight.metrics()[15:]]


def test_every_checkpoint_carries_a_manifest_of_its_files(straight):
    newest = straight.directory / "checkpoints" / "step-00000020"
    manifest = json.loads((newest / "manifest.json").read_text())
    assert manifest["step"] == 20
    on_disk = {p.name: p.stat().st_size for p in newest.iterdir() if p.name != "manifest.json"}
    assert {name: entry["bytes"] for name, entry in manifest["files"].items()} == on_disk
