"""The loopback pod network (local/pod_network.py): without network namespaces, every pod is this
machine, and each gang's rendezvous port is moved to a free one of its own (found by binding a socket)."""

from __future__ import annotations

from scaletrain_operator.local.pod_network import LoopbackNetwork, PodIdentity
from scaletrain_operator.local.pod_spec import PodFields, resolve_env


def test_the_loopback_network_moves_the_rendezvous_to_this_machine_with_a_port_per_master():
    network = LoopbackNetwork("a test")
    env = [
        {"name": "MASTER_ADDR", "value": "job-g0-0.job"},
        {"name": "MASTER_PORT", "value": "29500"},
        {"name": "PET_MASTER_PORT", "value": "29500"},
        {"name": "URL", "value": "tcp://$(MASTER_ADDR):$(MASTER_PORT)"},
    ]
    rank_0 = network.attach(PodIdentity("ns", "job-g0-0", "job"))
    rank_1 = network.attach(PodIdentity("ns", "job-g0-1", "job"))
    env_0, env_1 = network.rewrite_env(rank_0, env), network.rewrite_env(rank_1, env)
    assert env_0 == env_1 and env_0[0]["value"] == "127.0.0.1"
    port = int(env_0[1]["value"])
    assert port != 29500 and env_0[2]["value"] == str(port)
    assert network.address(rank_0, 29500) == ("127.0.0.1", port)  # where the host finds rank 0's port
    assert network.address(rank_0, 9400) == ("127.0.0.1", 9400)  # other ports are where they are
    other_job = network.rewrite_env(rank_0, [{"name": "MASTER_ADDR", "value": "other-g0-0.other"}, env[1]])
    assert other_job[1]["value"] != str(port)
    pod = {"metadata": {"name": "job-g0-0", "namespace": "ns"}, "spec": {"containers": [{"name": "main"}]}}
    fields = PodFields(pod_ip="127.0.0.1", host_ip="127.0.0.1", node_name="node-a")
    assert resolve_env(pod, env_0, fields, ("spec", "containers", 0))["URL"] == f"tcp://127.0.0.1:{port}"
