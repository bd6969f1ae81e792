"""The one rule for a tier that needs something this machine may lack (Go's binaries, the images, a node): where
it cannot run, its tests skip with the reason, except in CI (CI=true), where they must run."""

from __future__ import annotations

import os

import pytest


def require(reason: str | None) -> None:
    """Nothing when `reason` is None (it can run); else skip with it, or fail with it under CI=true."""
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, but {reason}", pytrace=False)
    pytest.skip(reason)
