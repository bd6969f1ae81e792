"""Asynchronous checkpoints (checkpoint.async): written in the background, committed by the same rename as
synchronous ones, so a crash mid-write leaves only step-N.partial, and resuming from one is exact."""

from __future__ import annotations

import json

from scaletrain_testing.trainer_runs import SYNTHETIC_OPTIONS, config_for, run_trainer

SYNC = {"maxSteps": 8, "checkpoint": {"everySteps": 2, "keep": 2}}
ASYNC = SYNC | {"checkpoint": SYNC["checkpoint"] | {"async": True}}
READS_PER_STEP = 8  # per rank: global batch 16 over 2 ranks


def _committed(checkpoints):
    """Each complete checkpoint's name, checked against its manifest (which lists every other file)."""
    names = []
    for path in sorted(checkpoints.glob("step-*[0-9]")):
        manifest = json.loads((path / "manifest.json").read_text())
        assert set(manifest["files"]) == {p.name for p in path.iterdir()} - {"manifest.json"}, path
        names.append(path.name)
    return names


def test_a_kill_mid_write_leaves_only_a_partial_and_resuming_is_exact(tmp_path):
    """Every rank is killed while the step-4 checkpoint is being written in the background (its shards on
    disk, not yet its metadata): step-2 is the newest complete one, and the resumed run trains on from it
    exactly. Before the kill and after the resume, the losses are those of a run with synchronous saves."""
    synchronous = tmp_path / "synchronous"
    straight = run_trainer(synchronous, config_for(synchronous, SYNC, checkpoints=True), nproc=2)
    assert straight.returncode == 0, straight.output[-3000:]
    expected = {r["step"]: r["loss"] for r in straight.metrics()}
    checkpoints, record = tmp_path / "checkpoints", tmp_path / "at-kill.json"
    data = {
        "source": "scaletrain_testing.plugins.checkpoint_faults:KilledMidCheckpoint",
        "options": SYNTHETIC_OPTIONS
        | {
            "kill_at_read": READS_PER_STEP * 4 + 1,  # the first read of step 5, once step 4's save has begun
            "partial": str(checkpoints / "step-00000004.partial"),
            "record_file": str(record),
            "linger_seconds": 2.0,
        },
    }
    killed = run_trainer(tmp_path, config_for(tmp_path, ASYNC | {"data": data}, checkpoints=True), nproc=2)
    assert killed.returncode != 0 and record.exists(), killed.output[-3000:]
    held = json.loads(record.read_text())
    assert set(held) == {"step-00000002", "step-00000004.partial"}, held
    partial = held["step-00000004.partial"]
    assert any(name.endswith(".distcp") for name in partial) and not {".metadata", "manifest.json"} & set(partial)
    assert _committed(checkpoints) == ["step-00000002"]
    assert [(r["step"], r["loss"]) for r in killed.metrics()] == [(step, expected[step]) for step in range(1, 5)]

    resumed = run_trainer(tmp_path, config_for(tmp_path, ASYNC, checkpoints=True), nproc=2)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "resumed from" in resumed.output and "step-00000002 at step 2" in resumed.output
    after_resume = resumed.metrics()[4:]
    assert [(r["step"], r["loss"]) for r in after_resume] == [(step, expected[step]) for step in range(3, 9)]
    assert _committed(checkpoints) == ["step-00000006", "step-00000008"]
    assert not list(checkpoints.glob("*.partial"))
