"""A pytest plugin (registered in tests/conftest.py) with the `process_group` fixture: a torch.distributed
process group of one, for the tests whose code runs collectives (DDP, train_step, checkpoint saves) in the
test process. A module asks for it with `pytestmark = pytest.mark.usefixtures("process_group")`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def process_group() -> Iterator[None]:
    """A process group of one, as the standalone trainer uses."""
    import torch.distributed as dist  # here: the test sessions that need no torch do not import it

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()
