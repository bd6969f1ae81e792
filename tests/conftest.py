"""The test tiers: each test is marked with the folder it lives in (unit, integration, e2e or node), so that
`pytest -m unit` is the fast lane. Shared fixtures: the generated CRD, and the real control plane with
a namespace per test, and a real S3 server (SeaweedFS)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaletrain_testing.availability import require
from scaletrain_testing.control_plane import KUBERNETES_VERSION, ControlPlane, unavailable_reason
from scaletrain_testing.jobs import REPO, load_yaml
from scaletrain_testing.seaweedfs import SeaweedS3
from scaletrain_testing.seaweedfs import unavailable_reason as s3_unavailable_reason

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e", "node")

# unit_purity fails a unit test that starts a process, sleeps or opens a network socket; process_groups and
# work_queues hold fixtures that tests of both the unit and the integration tier use; kueue, the `kueue` fixture.
pytest_plugins = [
    "pytester",
    "scaletrain_testing.unit_purity",
    "scaletrain_testing.process_groups",
    "scaletrain_testing.work_queues",
    "scaletrain_testing.kueue",
]


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


_control_plane_started = pytest.StashKey[ControlPlane]()


@pytest.fixture(scope="session")
def control_plane(request, tmp_path_factory) -> Iterator[ControlPlane]:
    """One real control plane per test session, started by the first test that asks for it. Where it
    cannot run the tests skip with the reason, except in CI (CI=true), where the tier must run."""
    require(unavailable_reason())
    # Under pytest's temp root, so the component logs of the last few runs stay for a post-mortem.
    with ControlPlane(tmp_path_factory.mktemp("control-plane")) as started:
        request.config.stash[_control_plane_started] = started
        yield started


@pytest.fixture
def namespace(request, control_plane) -> Iterator[str]:
    """A fresh namespace for one test, named after it; deleted afterwards without waiting."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = control_plane.create_namespace(f"{slug}-{secrets.token_hex(3)}")
    yield name
    control_plane.delete_namespace(name)


@pytest.fixture(scope="module")
def dry_run_namespace(request, control_plane) -> Iterator[str]:
    """One namespace for a module's dry-run requests: a dry run stores nothing, so they cannot meet there,
    and one namespace is made and waited for instead of one per request."""
    name = control_plane.create_namespace(f"dry-runs-{secrets.token_hex(3)}")
    yield name
    control_plane.delete_namespace(name)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[SeaweedS3]:
    """One S3 server (SeaweedFS on loopback) per test session, started by the first test that asks for it.
    Where it cannot run the tests skip with the reason, except in CI (CI=true), where they must run."""
    require(s3_unavailable_reason())
    # Under pytest's temp root, so the server's log of the last few runs stays for a post-mortem.
    with SeaweedS3(tmp_path_factory.mktemp("seaweedfs")) as started:
        yield started


def pytest_terminal_summary(terminalreporter) -> None:
    started = terminalreporter.config.stash.get(_control_plane_started, None)
    if started is not None:
        terminalreporter.write_line(
            f"control plane {KUBERNETES_VERSION}: ready in {started.startup_seconds:.1f}s, logs in {started.work_dir}"
        )
