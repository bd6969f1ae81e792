"""Reading rank 0's /progress (progress.py) from a pod that answers badly, on purpose or not: each
read ends within its deadline, holds at most its size cap, raises nothing, and lets through only
fields the status schema takes (never a NaN, which the API server refuses in a status patch)."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from scaletrain_operator.progress import read_progress
from scaletrain_testing.hostile_http import SHAPES, HostileServer

DEADLINE = 1.0
WORTHLESS = sorted(set(SHAPES) - {"nan", "wrong-types", "long-set-aside"})


def _read(server: HostileServer) -> tuple[dict | None, float, int]:
    tracemalloc.start()
    started = time.monotonic()
    try:
        progress = read_progress(f"http://127.0.0.1:{server.port}/progress", DEADLINE)
        return progress, time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", WORTHLESS)
def test_an_answer_that_is_not_progress_gives_none_within_the_deadline_and_the_size_cap(shape):
    with HostileServer(shape) as server:
        progress, seconds, peak_bytes = _read(server)
    assert progress is None
    assert seconds < DEADLINE + 0.5
    assert peak_bytes < 4 * 2**20  # the 400 MB body included: 64 KiB are read, then the read stops


def test_a_nan_loss_is_left_out_and_reported_as_not_finite():
    with HostileServer("nan") as server:
        progress, _, _ = _read(server)
    assert progress == {"step": 9, "maxSteps": 30, "lossFinite": False, "updatedAt": "2026-12-01T00:00:00+00:00"}


def test_fields_of_the_wrong_type_or_range_are_left_out():
    with HostileServer("wrong-types") as server:
        progress, _, _ = _read(server)
    # A negative step, strings for numbers, an infinite ETA, an MFU over 1, a date that is not one, a path.
    assert progress == {}


def test_a_list_of_set_aside_checkpoints_longer_than_the_status_keeps_is_left_out():
    with HostileServer("long-set-aside") as server:
        progress, _, _ = _read(server)
    assert progress == {"step": 3}


def test_nothing_listening_gives_none():
    with HostileServer("list") as server:
        port = server.port
    assert read_progress(f"http://127.0.0.1:{port}/progress", DEADLINE) is None
