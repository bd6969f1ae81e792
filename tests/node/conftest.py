"""The node tier's cluster. Here: `make cluster`'s when one is up (it is left running), else one started
for the session and taken down at its end, with a check that nothing of it is left on the host
(test_teardown.py, which runs last). With SCALETRAIN_NODE_CLUSTER=kind (the kind workflow): a kind
cluster with the same images and chart."""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from scaletrain_testing import host_residue
from scaletrain_testing.availability import require
from scaletrain_testing.kind_cluster import KindCluster
from scaletrain_testing.kube import Kube
from scaletrain_testing.local_cluster import LocalCluster, RealCluster, built_images, state_dir, unavailable_reason

LAST = "test_teardown.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The teardown check takes the cluster down: after every other test that uses it."""
    items.sort(key=lambda item: item.path.name == LAST)


@dataclass
class NodeCluster:
    cluster: RealCluster
    kube: Kube
    images: dict[str, str]
    owned: bool  # started by this session, on this machine (and so taken down by it)
    before: host_residue.Residue | None  # the host before it started, when owned


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[NodeCluster]:
    if os.environ.get("SCALETRAIN_NODE_CLUSTER") == "kind":
        kind = KindCluster()
        try:
            kind.up()
            yield NodeCluster(kind, Kube(kind.control_plane.api_client()), built_images(), False, None)
        finally:
            kind.down()
        return
    require(unavailable_reason())
    cluster = LocalCluster(detached=False)
    running = state_dir() / "cluster.json"
    if running.exists() and cluster.attach():
        images = json.loads(running.read_text())["images"]
        yield NodeCluster(cluster, Kube(cluster.control_plane.api_client()), images, False, None)
        return
    before = host_residue.snapshot()
    try:
        cluster.up()
        yield NodeCluster(cluster, Kube(cluster.control_plane.api_client()), built_images(), True, before)
    finally:
        cluster.down()


@pytest.fixture
def restricted_namespace(request, node_cluster) -> Iterator[str]:
    """A namespace for one test that enforces Pod Security "restricted", deleted afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    name = node_cluster.cluster.control_plane.create_namespace(f"{slug}-{secrets.token_hex(3)}", labels)
    yield name
    node_cluster.cluster.control_plane.delete_namespace(name)
