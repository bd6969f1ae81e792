"""A process that starts one pod on the pod executor and never stops it, for tests that kill the
process: `python -m scaletrain_testing.executor_host ROOT COMMAND...`. The pod
network is the shared loopback, which a killed process leaves nothing of."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from scaletrain_operator.local.executor import PodExecutor
from scaletrain_operator.local.pod_network import LoopbackNetwork

from .local_pods import a_pod

LIFETIME_S = 600  # far longer than a test waits, and still not forever


def main(root: str, command: list[str]) -> None:
    executor = PodExecutor(Path(root), LoopbackNetwork("a test"))
    executor.start(a_pod("orphan", command))
    time.sleep(LIFETIME_S)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
