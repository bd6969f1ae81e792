"""A process that starts one pod on the pod executor and never stops it, for tests that kill the
process: `python -m scaletrain_testing.executor_host ROOT COMMAND...`. The pod
network is the shared loopback, which a killed process leaves nothing of."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

from scaletrain_operator.local.executor import PodExecutor
from scaletrain_operator.local.pod_network import LoopbackNetwork

LIFETIME_SECONDS = 600  # far longer than a test waits, and still not forever


def a_pod(name: str, command: list[str]) -> dict[str, Any]:
    """A pod as the API server returns it (with a uid), of one container running `command`."""
    container = {"name": "main", "image": "python", "command": command}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


def main(root: str, command: list[str]) -> None:
    executor = PodExecutor(Path(root), LoopbackNetwork("a test"))
    executor.start(a_pod("orphan", command))
    time.sleep(LIFETIME_SECONDS)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
