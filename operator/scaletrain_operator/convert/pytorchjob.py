"""A PyTorchJob (kubeflow.org/v1): its Master and Worker replicas as one gang of alike pods, its run
policy and elastic policy."""

from __future__ import annotations

import copy
import json
from typing import Any

from .common import (
    _MISSING,
    ELASTIC_UNMAPPED,
    FIXED_GANG_MESSAGE,
    GANG_SCHEDULING_MESSAGE,
    RENDEZVOUS_MESSAGE,
    Where,
    _brief,
    _differences,
    _dig,
    _drop_each_setting,
    _Findings,
    _first_given,
    _lookup,
    _mapping,
    _max_restarts,
    _named,
    _others,
    _procs_per_node,
    _queue_name,
    _typed,
)
from .pod_template import PYTORCHJOB_PORT_NAME, _pod_fields, _require_command

PYTORCHJOB_API_VERSION = "kubeflow.org/v1"

# The PyTorchJob controller's names: its training container, and the port its Master listens on
# (PYTORCHJOB_PORT_NAME, which the pod template drops).
PYTORCHJOB_CONTAINER = "pytorch"
PYTORCHJOB_DEFAULT_PORT = 23456  # what the controller declares when the container names no pytorchjob-port
REPLICA_TYPES = {"master": "Master", "worker": "Worker"}  # the controller camel-cases the keys it is given

RESTART_POLICY_MESSAGE = (
    "restarts single pods; ScaleTrain restarts the whole gang from its last checkpoint, up to maxRestarts times"
)
RUN_POLICY_UNMAPPED = {
    "cleanPodPolicy": "ScaleTrain keeps a finished gang's pods (none left running) until ttlSecondsAfterFinished "
    "deletes the job",
    "managedBy": "the ScaleTrain operator manages the job",
    "schedulingPolicy": GANG_SCHEDULING_MESSAGE,
}
RDZV_BACKEND_ENV = "PET_RDZV_BACKEND"  # torchrun's --rdzv-backend, which the PyTorchJob controller set from rdzvBackend
RDZV_BACKEND_FLAGS = ("--rdzv-backend", "--rdzv_backend")
STATIC_RENDEZVOUS_MESSAGE = (
    f"the PyTorchJob controller set {RDZV_BACKEND_ENV} to it; ScaleTrain's pods do not, so torchrun meets in its "
    "static rendezvous at the rank-0 pod (PET_MASTER_ADDR, PET_MASTER_PORT), each pod's node rank its index: add "
    f"env {RDZV_BACKEND_ENV}=c10d to keep c10d (it meets at PET_RDZV_ENDPOINT, the rank-0 pod, and assigns node "
    "ranks itself)"
)


def _pytorchjob_fields(job: dict[str, Any], found: _Findings) -> dict[str, Any]:
    where = Where(("spec",))
    spec = _mapping(job, "spec", Where(), found)
    for key in _others(spec, ("runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode")):
        found.drop(where.at(key), "not a PyTorchJob spec field")
    replicas = _replica_specs(spec, where, found)
    counts = {kind: _replica_count(kind, *replicas[kind], found) for kind in replicas}
    nodes = sum(counts.values())
    if replicas and not nodes:
        found.error(where.at("pytorchReplicaSpecs"), "no replicas: give Worker (or Master) 1 replica or more")
    if not nodes:
        return {}
    # ScaleTrain's pods are all alike: the Worker's template describes all the source's pods but rank 0,
    # so it is the one kept; a job without Workers keeps the Master's.
    kept = "Worker" if counts.get("Worker") else "Master"
    kept_spec, kept_where = replicas[kept]
    if "Master" in replicas and "Worker" in replicas:
        _report_master_differences(replicas["Master"], replicas["Worker"][0], found)
    fields, container_where = _pod_fields(
        kept_spec.get("template"), kept_where.at("template"), PYTORCHJOB_CONTAINER, found
    )
    _require_command(fields, container_where, found)
    restart_policy = _typed(kept_spec, "restartPolicy", kept_where, str, found)
    if restart_policy not in (None, "Never"):
        found.drop(kept_where.at("restartPolicy"), f"{restart_policy} {RESTART_POLICY_MESSAGE}")
    elastic = _elastic_policy(spec, where, nodes, fields, found)
    fields |= _run_policy(spec, where, restart_policy, found)
    fields["nodes"] = nodes
    fields["masterPort"] = _pytorchjob_master_port(replicas["Master" if counts.get("Master") else "Worker"][0], elastic)
    fields["procsPerNode"] = _pytorchjob_procs(spec, where, elastic, fields, found)
    fields["queueName"] = _queue_name(job)
    return fields


def _replica_specs(spec: dict[str, Any], where: Where, found: _Findings) -> dict[str, tuple[dict[str, Any], Where]]:
    """Master and Worker, each with where it is (the controller takes the type names in any case)."""
    at = where.at("pytorchReplicaSpecs")
    replica_specs = _mapping(spec, "pytorchReplicaSpecs", where, found)
    if spec.get("pytorchReplicaSpecs") in (None, {}):
        found.error(at, "required: a Worker (and optionally a Master) replica spec")
    replicas = {}
    for key, replica in replica_specs.items():
        kind = REPLICA_TYPES.get(key.lower()) if isinstance(key, str) else None
        if kind is None:
            found.error(at.at(key), "not a PyTorchJob replica type; use Master and Worker")
        elif not isinstance(replica, dict):
            found.error(at.at(key), f"must be a mapping (a replica spec), not {type(replica).__name__}")
        else:
            replicas[kind] = (replica, at.at(key))
    return replicas


def _replica_count(kind: str, replica: dict[str, Any], where: Where, found: _Findings) -> int:
    count = _typed(replica, "replicas", where, int, found)
    count = 1 if count is None else count  # the controller's default
    if count < 0 or (kind == "Master" and count > 1):
        found.error(where.at("replicas"), f"{count}: a PyTorchJob has 0 or 1 Master, and 0 or more Workers")
        return 0
    return count


def _report_master_differences(master: tuple[dict[str, Any], Where], worker: dict[str, Any], found: _Findings) -> None:
    master_spec, where = master
    for path in _differences(_comparable(master_spec), _comparable(worker)):
        here, there = _whole_or_unset(_lookup(master_spec, path)), _whole_or_unset(_lookup(worker, path))
        found.drop(where.at(*path), f"differs from Worker's ({here} here, {there} there): the Worker's is kept")


def _comparable(replica: dict[str, Any]) -> dict[str, Any]:
    """A replica spec without what is not the pods' shape: the replica count, and the pytorchjob-port
    (masterPort, which the controller declares in every replica's container)."""
    shape = copy.deepcopy({key: value for key, value in replica.items() if key != "replicas"})
    container = _named(_dig(shape, "template", "spec", "containers"), PYTORCHJOB_CONTAINER)
    if container is not None and isinstance(container.get("ports"), list):
        container["ports"] = [port for port in container["ports"] if _dig(port, "name") != PYTORCHJOB_PORT_NAME]
    return shape


def _whole_or_unset(value: Any) -> str:
    """A value as JSON, whole: two values cut short to a common prefix would hide what differs."""
    return "unset" if value is _MISSING else json.dumps(value, default=str)


def _run_policy(spec: dict[str, Any], where: Where, restart_policy: str | None, found: _Findings) -> dict[str, Any]:
    at = where.at("runPolicy")
    policy = _mapping(spec, "runPolicy", where, found)
    fields: dict[str, Any] = {
        "activeDeadlineSeconds": _typed(policy, "activeDeadlineSeconds", at, int, found),
        "ttlSecondsAfterFinished": _typed(policy, "ttlSecondsAfterFinished", at, int, found),
        "suspend": _typed(policy, "suspend", at, bool, found),
    }
    backoff_limit = _typed(policy, "backoffLimit", at, int, found)
    if backoff_limit is not None:
        fields["maxRestarts"] = _max_restarts(backoff_limit, at.at("backoffLimit"), found)
    elif restart_policy == "Never":  # the source restarts nothing: a failed pod fails the job
        fields["maxRestarts"] = 0
    for key in _others(policy, ("activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend", "backoffLimit")):
        if key == "schedulingPolicy":
            _drop_each_setting(policy[key], at.at(key), GANG_SCHEDULING_MESSAGE, found)
        else:
            found.drop(at.at(key), RUN_POLICY_UNMAPPED.get(key, "not a PyTorchJob runPolicy field"))
    return fields


def _elastic_policy(
    spec: dict[str, Any], where: Where, nodes: int, fields: dict[str, Any], found: _Findings
) -> tuple[dict[str, Any], Where]:
    """The elastic policy, its fields ScaleTrain cannot keep reported: nProcPerNode and rdzvPort are read
    by the callers, and replica bounds equal to the gang's size lose nothing. rdzvBackend was the
    controller's PET_RDZV_BACKEND, which ScaleTrain does not set: lost unless the training container
    (`fields`) picks the backend itself, and then kept only for c10d, which the rendered env serves."""
    at = where.at("elasticPolicy")
    policy = _mapping(spec, "elasticPolicy", where, found)
    for key in _others(policy, ("nProcPerNode", "rdzvPort")):
        value = policy[key]
        if key in ("minReplicas", "maxReplicas") and value != nodes:
            found.drop(at.at(key), f"{_brief(value)}: {FIXED_GANG_MESSAGE} ({nodes})")
        elif key == "rdzvBackend" and not _picks_rendezvous_backend(fields):
            found.drop(at.at(key), f"{_brief(value)}: {STATIC_RENDEZVOUS_MESSAGE}")
        elif key == "rdzvBackend" and value != "c10d":
            found.drop(at.at(key), f"{_brief(value)}: {RENDEZVOUS_MESSAGE}")
        elif key not in ("minReplicas", "maxReplicas", "rdzvBackend"):
            found.drop(at.at(key), ELASTIC_UNMAPPED.get(key, "not a PyTorchJob elasticPolicy field"))
    return policy, at


def _picks_rendezvous_backend(fields: dict[str, Any]) -> bool:
    """Whether the training container chooses torchrun's rendezvous backend itself: a flag in its command
    or args (a word of a `bash -c` script too), or env PET_RDZV_BACKEND."""
    words = [word for word in [*(fields.get("command") or []), *(fields.get("args") or [])] if isinstance(word, str)]
    return any(flag in word for word in words for flag in RDZV_BACKEND_FLAGS) or any(
        var["name"] == RDZV_BACKEND_ENV for var in fields.get("env") or []
    )


def _pytorchjob_master_port(host: dict[str, Any], elastic: tuple[dict[str, Any], Where]) -> Any:
    """The rendezvous port: the elastic rdzvPort, else the pytorchjob-port of the replica that hosts
    rank 0 (`host`: the Master, else the Workers), else the controller's default."""
    policy, _ = elastic
    if policy.get("rdzvPort") is not None:
        return policy["rdzvPort"]
    container = _named(_dig(host, "template", "spec", "containers"), PYTORCHJOB_CONTAINER)
    port = _named(_dig(container, "ports"), PYTORCHJOB_PORT_NAME)
    return PYTORCHJOB_DEFAULT_PORT if port is None else port.get("containerPort")


def _pytorchjob_procs(
    spec: dict[str, Any], where: Where, elastic: tuple[dict[str, Any], Where], fields: dict[str, Any], found: _Findings
) -> int | None:
    """spec.nprocPerNode, else the deprecated elasticPolicy.nProcPerNode. Unset is the controller's auto,
    with which it counts one process per pod in WORLD_SIZE, as ScaleTrain's default does on CPU."""
    policy, policy_where = elastic
    given = _first_given(spec, where, "nprocPerNode", policy, policy_where, "nProcPerNode")
    return _procs_per_node(*given, fields.get("gpusPerNode", 0), None, found) if given else None
