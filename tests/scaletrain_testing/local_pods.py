"""Pods for the pod executor, as the API server returns them (with a uid), and a way to run one to
its end."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from scaletrain_operator.local.executor import TERMINAL_PHASES, PodExecutor, RunningPod

from .waiting import WaitTimeout, wait_until

POLL_INTERVAL_S = 0.05


def a_pod(
    name: str,
    command: list[str],
    volumes: Sequence[Mapping[str, Any]] = (),
    mounts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A pod of one container running `command`, with `volumes` and the container's volumeMounts `mounts`."""
    container = a_container("main", command, mounts)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {"restartPolicy": "Never", "containers": [container], "volumes": [dict(v) for v in volumes]},
    }


def a_container(
    name: str, command: list[str], mounts: Sequence[Mapping[str, Any]] = (), **fields: Any
) -> dict[str, Any]:
    """A container of the python image running `command`, with volumeMounts `mounts` and any other `fields`."""
    return {"name": name, "image": "python", "command": command, "volumeMounts": [dict(m) for m in mounts], **fields}


def run_to_end(executor: PodExecutor, pod: Mapping[str, Any], timeout_s: float) -> RunningPod:
    """Start `pod` and drive it until it has ended; WaitTimeout (with its log) if it runs longer, and the pod
    stopped."""
    running = executor.start(pod)
    try:
        wait_until(
            lambda: running.poll() in TERMINAL_PHASES,
            timeout_s,
            f"pod {running.name} to end",
            interval_s=POLL_INTERVAL_S,
            details=running.tail,
        )
    except WaitTimeout:
        running.stop(grace_seconds=0)
        raise
    return running
