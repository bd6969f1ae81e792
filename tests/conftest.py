"""The test tiers: each test is marked with the folder it lives in (unit, integration or e2e), so that
`pytest -m unit` is the fast lane. Shared fixtures: the generated CRD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.jobs import REPO, load_yaml

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(TESTS).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live in tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def crd() -> dict[str, Any]:
    return load_yaml(REPO / "crds" / "scaletrainjob.yaml")


@pytest.fixture(scope="session")
def crd_schema(crd) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
