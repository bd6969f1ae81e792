"""`make cluster-down` (LocalCluster.down) leaves nothing of the cluster on the host: no process, mount,
network namespace, link (the bridge, veths) or iptables rule that was not there before `up`. Runs last:
it takes the session's cluster down (conftest.py)."""

from __future__ import annotations

import pytest

from scaletrain_testing import host_residue


def test_cluster_down_leaves_nothing_behind(node_cluster):
    if not node_cluster.owned:
        pytest.skip("not a cluster this session started here (`make cluster`'s, or kind's): not taken down")
    node_cluster.cluster.down()
    after = host_residue.snapshot()
    assert after.new_since(node_cluster.before) == {}
    # Whatever a cluster before this one left is ours too: there is no other Kubernetes on this host.
    assert not [rule for rule in after.iptables_rules if "KUBE-" in rule]
    assert not node_cluster.cluster.state.exists()
