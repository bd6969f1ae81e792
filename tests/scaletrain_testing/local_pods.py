"""Pods for the pod executor, as the API server returns them (with a uid), and a way to run one to
its end."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from scaletrain_operator.local.executor import TERMINAL_PHASES, PodExecutor, RunningPod

POLL_SECONDS = 0.05


def a_pod(
    name: str,
    command: list[str],
    volumes: Sequence[Mapping[str, Any]] = (),
    mounts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A pod of one container running `command`, with `volumes` and the container's volumeMounts `mounts`."""
    container = {"name": "main", "image": "python", "command": command, "volumeMounts": [dict(m) for m in mounts]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {"restartPolicy": "Never", "containers": [container], "volumes": [dict(v) for v in volumes]},
    }


def run_to_end(executor: PodExecutor, pod: Mapping[str, Any], timeout_seconds: float) -> RunningPod:
    """Start `pod` and drive it until it has ended; AssertionError (with its log) if it runs longer."""
    running = executor.start(pod)
    deadline = time.monotonic() + timeout_seconds
    while running.poll() not in TERMINAL_PHASES:
        if time.monotonic() > deadline:
            running.stop(grace_seconds=0)
            raise AssertionError(f"pod {running.name} still running after {timeout_seconds} s:\n{running.tail()}")
        time.sleep(POLL_SECONDS)
    return running
