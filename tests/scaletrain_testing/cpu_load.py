"""CPU load beside a test: processes that keep every core of this machine busy, as a test suite or a control
plane running beside a job would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cpu_load(longest_s: float) -> Iterator[None]:
    """A busy loop per core this process may run on, for the block's duration: each is killed when the block
    ends, and ends by itself after `longest_s` seconds, so that none outlives a test that never gets there."""
    burn = f"import time\nend = time.monotonic() + {longest_s}\nwhile time.monotonic() < end:\n    pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in os.sched_getaffinity(0)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
