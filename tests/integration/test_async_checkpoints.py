"""Asynchronous checkpoints (checkpoint.async): written in the background, committed by the same rename as
synchronous ones, so a crash mid-write leaves only step-N.partial, and resuming from one is exact."""

from __future__ import annotations

import json

import pytest
import torch

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


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_three_asynchronous_saves_and_a_resume_are_exact_with_ddp_and_fsdp2(tmp_path, strategy):
    """Every save after the first reuses the host buffers of the first (where torch 2.11's own stager failed, at
    the second save on a GPU); FSDP2's shards stay sharded in the copy. Each save is complete and verified, and a
    run resumed from the last trains on exactly as an uninterrupted one."""
    # A constant LR after warmup: a run of 6 steps then resumed to 9 is a run of 9 (maxSteps shapes no decay).
    three = {"strategy": strategy, "maxSteps": 6, "scheduler": {"name": "constant", "warmupSteps": 3},
             "checkpoint": {"everySteps": 2, "keep": 3, "async": True}}  # fmt: skip
    straight = run_trainer(tmp_path / "straight", config_for(tmp_path / "straight", three | {"maxSteps": 9}), nproc=2)
    assert straight.returncode == 0, straight.output[-3000:]
    run = run_trainer(tmp_path, config_for(tmp_path, three, checkpoints=True), nproc=2)
    assert run.returncode == 0, run.output[-3000:]
    assert _committed(tmp_path / "checkpoints") == ["step-00000002", "step-00000004", "step-00000006"]
    resumed = run_trainer(tmp_path, config_for(tmp_path, three | {"maxSteps": 9}, checkpoints=True), nproc=2)
    assert resumed.returncode == 0 and "step-00000006 at step 6" in resumed.output, resumed.output[-3000:]
    expected = [(r["step"], r["loss"]) for r in straight.metrics()]
    assert [(r["step"], r["loss"]) for r in resumed.metrics()] == expected  # steps 1-6, then 7-9 after the resume


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu.py runs it on one)")
def test_on_a_gpu_three_asynchronous_saves_from_pinned_buffers_and_a_resume_are_exact(tmp_path):
    """Where torch 2.11's stager failed at the second save: pinned host buffers and non-blocking copies. The
    loss is compared within a tolerance: some CUDA backward kernels (the embedding's) sum in no fixed order."""
    three = {"maxSteps": 6, "scheduler": {"name": "constant", "warmupSteps": 3},
             "checkpoint": {"everySteps": 2, "keep": 3, "async": True}}  # fmt: skip
    straight = run_trainer(tmp_path / "straight", config_for(tmp_path / "straight", three | {"maxSteps": 9}))
    assert straight.returncode == 0, straight.output[-3000:]
    run = run_trainer(tmp_path, config_for(tmp_path, three, checkpoints=True))
    assert run.returncode == 0, run.output[-3000:]
    assert _committed(tmp_path / "checkpoints") == ["step-00000002", "step-00000004", "step-00000006"]
    assert all(record["peakMemoryBytes"] > 0 for record in run.metrics())
    resumed = run_trainer(tmp_path, config_for(tmp_path, three | {"maxSteps": 9}, checkpoints=True))
    assert resumed.returncode == 0 and "step-00000006 at step 6" in resumed.output, resumed.output[-3000:]
    expected = [(r["step"], r["loss"]) for r in straight.metrics()]
    found = [(r["step"], r["loss"]) for r in resumed.metrics()]
    assert [step for step, _ in found] == [step for step, _ in expected]
    assert [loss for _, loss in found] == pytest.approx([loss for _, loss in expected], rel=1e-4)
