"""How the trainer's processes import torch: with the cyclic garbage collector off, then frozen.

torch's import (with the trainer's) leaves ~430,000 objects that live as long as the process, all
tracked by the collector. With the collector on, the import keeps scanning them (~0.3 s per process on
2 shared CPU cores), and Python's final collection at exit scans them all once more (~0.6 s). Frozen
(gc.freeze), they are never scanned again: a pod starts and ends ~1 s sooner per process in its chain
(torchrun, then each worker), and a gang restart waits on one pod's end and the next one's start.
Frozen objects also stay shared with forked data-loader workers instead of being copied when the
collector would touch them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_imports() -> Iterator[None]:
    """Run the imports inside with the collector off; then freeze every object alive (what the imports
    made, and the little made before them, nearly all of it living as long as the process); then turn
    the collector back on, as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
