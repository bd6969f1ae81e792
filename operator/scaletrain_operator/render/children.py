"""Pure rendering: a ScaleTrainJob becomes the exact children the operator creates.

No cluster, no I/O. For each ScaleTrainJob there is one headless Service (stable across gang
restarts) and, per gang generation, one Indexed batch/v1 Job whose pods take their node rank from
the completion index. torchrun in each pod reads its flags from the PET_* env rendered here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.exit_codes import EXIT_PREEMPTED

from ..api import naming
from ..api.conditions import DISRUPTION_TARGET
from ..api.job import ScaleTrainJob
from ..api.spec import ScaleTrainJobSpec
from ..validation.merge import merge_under
from .object_storage import object_storage_env
from .workload import delegated, placed_by_workload, workload_of

# The trainer's pod launcher checks the training config (exiting 78 on a config error, which the
# operator does not retry), then runs torchrun (`python -m scaletrain_trainer.torchrun`) as a child with these
# arguments; torchrun's flags come from PET_*.
DEFAULT_COMMAND = ["python", "-m", "scaletrain_trainer.launch"]
DEFAULT_TORCHRUN_ARGS = ["--module", "scaletrain_trainer"]
COMPLETION_INDEX_FIELD = f"metadata.annotations['{naming.COMPLETION_INDEX_ANNOTATION}']"


def render_children(
    job: ScaleTrainJob, generation: int = 0, namespace: str | None = None, workload_api: bool = True
) -> list[dict[str, Any]]:
    """The Workload (with gang placement), the Services and the generation's Job, in creation order: the
    Workload first, since the Job controller looks for it when it first sees the Job. `workload_api`:
    whether the cluster serves the Workload API (spec.scheduling.gang auto uses it then)."""
    uses_workload = placed_by_workload(job.spec, workload_api)
    workload = [render_workload(job, namespace)] if uses_workload else []
    services = [render_service(job, namespace), render_master_alias(job, namespace)]
    return [*workload, *services, render_job(job, generation, namespace, uses_workload=uses_workload)]


def render_workload(job: ScaleTrainJob, namespace: str | None = None) -> dict[str, Any]:
    """The job's one Workload, which every gang generation's Job delegates its PodGroup to."""
    return workload_of(job, child_metadata(job, job.name, namespace, job_labels(job)))


def render_service(job: ScaleTrainJob, namespace: str | None = None) -> dict[str, Any]:
    """Headless, and publishing not-ready pods: ranks must resolve each other before they are Ready."""
    selector = {naming.LABEL_JOB_NAME: job.name}
    return _headless_service(job, naming.service_name(job.name), namespace, selector, publishNotReadyAddresses=True)


def render_master_alias(job: ScaleTrainJob, namespace: str | None = None) -> dict[str, Any]:
    """Headless, selecting rank 0 of any generation, and only while it is ready: a terminating rank 0 of
    the gang before drops out, so after a gang restart the name is the new rank 0 alone. (The Service
    above publishes not-ready pods: ranks must resolve each other before they are ready. Here a restart
    could otherwise leave two addresses under one name.)"""
    selector = {naming.LABEL_JOB_NAME: job.name, naming.COMPLETION_INDEX_LABEL: "0"}
    return _headless_service(job, naming.master_alias(job.name), namespace, selector)


def _headless_service(
    job: ScaleTrainJob, name: str, namespace: str | None, selector: dict[str, str], **spec: Any
) -> dict[str, Any]:
    port = job.spec.master_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(job, name, namespace, job_labels(job)),
        "spec": {
            "clusterIP": "None",
            **spec,
            "selector": selector,
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port}],
        },
    }


def render_network_policy(job: ScaleTrainJob, operator_namespace: str, namespace: str | None = None) -> dict[str, Any]:
    """The job's pods accept connections only from each other (rendezvous, and the ports NCCL and gloo
    pick at run time) and, on the progress and metrics port, from the operator's pods in
    `operator_namespace`. It takes effect with a network plugin that enforces NetworkPolicy."""
    own_pods = {"matchLabels": {naming.LABEL_JOB_NAME: job.name}}
    operator_pods = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}},
        "podSelector": {"matchLabels": {naming.LABEL_NAME: naming.APP_NAME, naming.LABEL_COMPONENT: "operator"}},
    }
    metrics = {"protocol": "TCP", "port": job.spec.metrics_port}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(job, naming.service_name(job.name), namespace, job_labels(job)),
        "spec": {
            "podSelector": own_pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": own_pods}]}, {"from": [operator_pods], "ports": [metrics]}],
        },
    }


def render_job(
    job: ScaleTrainJob, generation: int = 0, namespace: str | None = None, uses_workload: bool = False
) -> dict[str, Any]:
    """The generation's Indexed Job; with `uses_workload`, its pods are placed as one gang (workload.py)."""
    spec, queue = job.spec, job.queue
    labels = generation_labels(job, generation)
    if queue:
        labels[naming.KUEUE_QUEUE_LABEL] = queue
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        # The operator owns restarts: one dead rank breaks the whole collective, so the gang restarts together.
        "backoffLimit": 0,
        "podFailurePolicy": DISRUPTION_FAILS_THE_JOB,
        # Kueue admits a queued Job by un-suspending it.
        "suspend": spec.suspend or queue is not None,
        "template": render_pod_template(job, generation),
    }
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    rendered = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": child_metadata(job, naming.child_job_name(job.name, generation), namespace, labels),
        "spec": job_spec,
    }
    return delegated(rendered, job, generation) if uses_workload else rendered


# A disrupted pod (evicted, preempted, its node lost; or the trainer's exit 80 after a SIGTERM) fails the
# Job with the reason conditions.DISRUPTED_JOB. With a podFailurePolicy the Job controller also counts a
# pod only once it has ended (Failed), not while it is terminating: an evicted rank has its grace period
# to save a checkpoint, and the gang policy sees its exit, before the Job fails.
DISRUPTION_FAILS_THE_JOB = {
    "rules": [
        {"action": "FailJob", "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": naming.TRAINER_CONTAINER, "operator": "In", "values": [EXIT_PREEMPTED]},
        },
    ]
}


def render_pod_template(job: ScaleTrainJob, gang_generation: int) -> dict[str, Any]:
    spec = job.spec
    rendered = {
        "metadata": {
            "labels": generation_labels(job, gang_generation),
            # `kubectl logs` and `kubectl exec` pick this container even when podTemplate adds sidecars first.
            "annotations": {
                "kubectl.kubernetes.io/default-container": naming.TRAINER_CONTAINER,
                **_kueue_topology(job),
            },
        },
        "spec": {
            "subdomain": naming.service_name(job.name),
            "restartPolicy": "Never",
            # Time for the trainer to finish its step and save a checkpoint after SIGTERM (a preemption).
            "terminationGracePeriodSeconds": spec.grace_period_seconds,
            "containers": [_trainer_container(job, gang_generation), *_rank_env_only(job, gang_generation)],
            "volumes": [v.model_dump(mode="json", by_alias=True) for v in spec.volumes]
            + [{"name": naming.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}],
            "securityContext": _pod_security(spec),
            **_placement(spec),
        },
    }
    template_spec = (spec.pod_template or {}).get("spec") or {}
    if "shareProcessNamespace" not in template_spec:
        # The pause process is then PID 1, not the trainer's command. A process that is PID 1 of its
        # namespace ignores any signal it has no handler for: a plain `python train.py` would sleep
        # through the SIGTERM of every deletion, gang restart and eviction until the grace period's
        # SIGKILL (2 minutes by default). A podTemplate that sets it decides.
        rendered["spec"]["shareProcessNamespace"] = True
    if spec.pod_template is None:
        return rendered
    return merge_under(spec.pod_template, rendered)


def _kueue_topology(job: ScaleTrainJob) -> dict[str, str]:
    """placement.topology as Kueue's Topology Aware Scheduling reads it from a queued Job's pod template."""
    topology = job.spec.placement.topology
    if topology is None or job.queue is None:
        return {}
    if topology.required is not None:
        return {naming.KUEUE_REQUIRED_TOPOLOGY: topology.required}
    return {naming.KUEUE_PREFERRED_TOPOLOGY: topology.preferred} if topology.preferred is not None else {}


def _trainer_container(job: ScaleTrainJob, gang_generation: int) -> dict[str, Any]:
    spec = job.spec
    container: dict[str, Any] = {
        "name": naming.TRAINER_CONTAINER,
        "image": spec.image,
        "command": spec.command if spec.command is not None else DEFAULT_COMMAND,
        "args": spec.args if spec.args is not None else ([] if spec.command is not None else DEFAULT_TORCHRUN_ARGS),
        "env": render_env(job, gang_generation),
        "ports": [
            {"name": "rendezvous", "containerPort": spec.master_port},
            {"name": "metrics", "containerPort": spec.metrics_port},
        ],
        "resources": _resources(spec),
        "volumeMounts": [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in spec.volume_mounts]
        + [{"name": naming.SHM_VOLUME, "mountPath": "/dev/shm"}],
        "securityContext": TRAINER_SECURITY,
        # Why it failed, for the operator and `kubectl describe`: the trainer's summary or the error of
        # TORCHELASTIC_ERROR_FILE there, else (a crash that wrote neither) the end of the container's log.
        "terminationMessagePath": wire.TERMINATION_MESSAGE_PATH,  # said explicitly: the error file's too
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.image_pull_policy is not None:
        container["imagePullPolicy"] = spec.image_pull_policy
    return container


def _rank_env_only(job: ScaleTrainJob, gang_generation: int) -> list[dict[str, Any]]:
    """The rank env for podTemplate's containers named in rankEnvContainers, merged into each by name."""
    names = [name for name in job.spec.rank_env_containers if name != naming.TRAINER_CONTAINER]
    return [{"name": name, "env": render_env(job, gang_generation)} for name in names]


# Pod Security "restricted" for the trainer: no privilege, no capabilities, the runtime's seccomp profile.
TRAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

# Env whose value differs between gang generations: the generation itself and the master's address.
GENERATION_ENV = frozenset({"PET_MASTER_ADDR", "MASTER_ADDR", wire.GENERATION_ENV})


def generation_free(rendered_job: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a rendered Job without what each gang generation has of its own (its name, the
    generation labels and GENERATION_ENV): the same for every generation of one spec."""
    shape = copy.deepcopy(dict(rendered_job))
    shape["metadata"].pop("name")
    for metadata in (shape["metadata"], shape["spec"]["template"]["metadata"]):
        metadata["labels"].pop(naming.LABEL_GENERATION)
    for container in shape["spec"]["template"]["spec"]["containers"]:  # the trainer, and rankEnvContainers
        if "env" in container:
            container["env"] = [var for var in container["env"] if var["name"] not in GENERATION_ENV]
    return shape


def render_env(job: ScaleTrainJob, gang_generation: int) -> list[dict[str, Any]]:
    """Rank layout for torchrun (PET_*) and for plain launchers, backend settings, the config (naming.RENDERED_ENV
    says where each comes from), and spec.objectStorage's variables (object_storage.py).

    With one process per node, RANK (the node rank) and LOCAL_RANK too, as PyTorchJob sets them for a
    plain `python train.py` in each pod; torchrun sets its workers' own, so with more it is left to it.
    PET_RDZV_ENDPOINT refers to MASTER_ADDR and MASTER_PORT (Kubernetes expands `$(VAR)` from the
    variables before it), so that `torchrun --rdzv-backend=c10d` without an endpoint meets on rank 0.

    User env comes last; a user variable with the name of a backend default or of an object-storage variable
    replaces it in place.
    """
    spec = job.spec
    master = f"{naming.child_job_name(job.name, gang_generation)}-0.{naming.service_name(job.name)}"
    rendered: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": str(spec.nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(spec.resolved_procs_per_node)},
        {"name": "PET_NODE_RANK", "valueFrom": _completion_index()},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_PORT", "value": str(spec.master_port)},
        {"name": "MASTER_ADDR", "value": master},
        {"name": "MASTER_PORT", "value": str(spec.master_port)},
        {"name": "PET_RDZV_ENDPOINT", "value": "$(MASTER_ADDR):$(MASTER_PORT)"},
        {"name": "NNODES", "value": str(spec.nodes)},
        {"name": "NODE_RANK", "valueFrom": _completion_index()},
        {"name": "NPROC_PER_NODE", "value": str(spec.resolved_procs_per_node)},
        {"name": "WORLD_SIZE", "value": str(spec.world_size)},
        {"name": wire.BACKEND_ENV, "value": spec.resolved_backend},
        {"name": wire.JOB_NAME_ENV, "value": job.name},
        {"name": wire.GENERATION_ENV, "value": str(gang_generation)},
        {"name": wire.METRICS_PORT_ENV, "value": str(spec.metrics_port)},
    ]
    if spec.training is not None:
        rendered.append({"name": wire.CONFIG_ENV, "value": spec.training.to_json()})
    if spec.resolved_procs_per_node == 1:
        rendered += [{"name": "RANK", "valueFrom": _completion_index()}, {"name": "LOCAL_RANK", "value": "0"}]
    rendered += [{"name": name, "value": value} for name, value in backend_env_defaults(spec).items()]
    rendered += object_storage_env(spec.object_storage)
    index = {var["name"]: position for position, var in enumerate(rendered)}
    for var in spec.env:
        entry = var.model_dump(mode="json", by_alias=True, exclude_none=True)
        if var.name in index:
            rendered[index[var.name]] = entry
        else:
            rendered.append(entry)
    return rendered


def _completion_index() -> dict[str, Any]:
    """The node rank, from the annotation the Job controller puts on each indexed pod."""
    return {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}


def backend_env_defaults(spec: ScaleTrainJobSpec) -> dict[str, str]:
    """Defaults that users may override through spec.env. TORCHELASTIC_ERROR_FILE: where torchelastic's
    @record, and torchrun for its first failed worker, write an uncaught exception with its traceback: a file
    of the pod's own (wire.ERROR_FILE_PATH says why not the termination message), so that a script's own
    `torchrun` ends its log, and with it the message, with the worker's traceback (the built-in launcher
    gives torchrun a file of its own and writes the end of it into the termination message: launch.py)."""
    defaults = {"PYTHONUNBUFFERED": "1", wire.ERROR_FILE_ENV: wire.ERROR_FILE_PATH}
    if spec.resolved_backend == "nccl":
        # A dead peer must fail the job (and so trigger a gang restart), never hang it.
        defaults |= {"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    return defaults


def _resources(spec: ScaleTrainJobSpec) -> dict[str, Any]:
    resources = {
        "requests": dict(spec.resources.requests),
        "limits": dict(spec.resources.limits),
    }
    if spec.gpus_per_node:
        resources["limits"][spec.gpu_resource] = str(spec.gpus_per_node)
    return {section: values for section, values in resources.items() if values}


def _placement(spec: ScaleTrainJobSpec) -> dict[str, Any]:
    tolerations = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in spec.tolerations]
    if spec.gpus_per_node and not any(t.get("key") == spec.gpu_resource for t in tolerations):
        # GPU nodes are commonly tainted with the device resource name (e.g. nvidia.com/gpu:NoSchedule).
        tolerations.append({"key": spec.gpu_resource, "operator": "Exists", "effect": "NoSchedule"})
    placement: dict[str, Any] = {
        "nodeSelector": dict(spec.node_selector),
        "tolerations": tolerations,
        "affinity": copy.deepcopy(spec.affinity),
        "priorityClassName": spec.priority_class_name,
        "schedulerName": spec.scheduler_name,
        "serviceAccountName": spec.service_account_name,
    }
    placement = {key: value for key, value in placement.items() if value}
    if spec.service_account_name is None:  # the trainer needs no API access: no token in the pods
        placement["automountServiceAccountToken"] = False
    return placement


def _pod_security(spec: ScaleTrainJobSpec) -> dict[str, Any]:
    """The pod's securityContext. A new volume (a checkpoint PVC) is commonly owned by root with mode 0755
    while the trainer runs as a non-root user: without fsGroup its first checkpoint is refused. So pods
    get the job's runAsGroup, else the trainer image's group, as fsGroup, which makes the kubelet hand
    the volumes that support it to that group (group-writable, setgid). OnRootMismatch: only when the
    volume's root is not theirs yet; a recursive chown of a large checkpoint tree at every gang start
    would take minutes."""
    security = spec.security_context.model_dump(mode="json", by_alias=True, exclude_none=True)
    security["seccompProfile"] = {"type": "RuntimeDefault"}
    security.setdefault("fsGroup", security.get("runAsGroup", wire.TRAINER_GID))
    security["fsGroupChangePolicy"] = "OnRootMismatch"
    return security


def job_labels(job: ScaleTrainJob) -> dict[str, str]:
    return {
        naming.LABEL_NAME: naming.APP_NAME,
        naming.LABEL_INSTANCE: job.name,
        naming.LABEL_COMPONENT: "trainer",
        naming.LABEL_MANAGED_BY: naming.MANAGER,
        naming.LABEL_JOB_NAME: job.name,
    }


def generation_labels(job: ScaleTrainJob, gang_generation: int) -> dict[str, str]:
    return job_labels(job) | {naming.LABEL_GENERATION: str(gang_generation)}


def owner_reference(job: ScaleTrainJob) -> dict[str, Any] | None:
    """Children are garbage-collected with their ScaleTrainJob. Needs the uid the API server assigned."""
    if job.metadata.uid is None:
        return None
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "name": job.name,
        "uid": job.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(job: ScaleTrainJob, name: str, namespace: str | None, labels: dict[str, str]) -> dict[str, Any]:
    """A child's metadata: its name, namespace (the job's by default) and labels, owned by the job."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace or job.metadata.namespace or "default",
        "labels": labels,
    }
    owner = owner_reference(job)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return metadata
