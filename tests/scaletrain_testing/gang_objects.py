"""Builders for what the operator reads of a job and its gangs: the job as its decide layer takes it, each
gang's Job as the API server holds it (or as the cache keeps it for housekeeping), its pods as the scheduler,
the kubelet and the trainer left them, a capacity probe with its pods, and the Observed that holds them; what
housekeeping lists of a namespace (ListedMessages) and where it reads rank 0's progress; and a Workload of
someone else's that names the job, with an API server that holds such Workloads."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from scaletrain_operator.api.job import ScaleTrainJob, parse_job
from scaletrain_operator.api.naming import COMPLETION_INDEX_ANNOTATION, GROUP, KIND, LABEL_GENERATION, LABEL_JOB_NAME
from scaletrain_operator.controller.decision import ChildJobPatch, Decision, Observed
from scaletrain_operator.controller.housekeeping_decisions import Rank0
from scaletrain_operator.controller.settings import OperatorConfig
from scaletrain_operator.in_place import WorkloadEnd
from scaletrain_operator.render.capacity_probe import render_probe
from scaletrain_operator.render.child_annotations import SUSPENDED_BY_OPERATOR_ANNOTATION, with_spec_hash
from scaletrain_operator.render.children import render_job, render_master_alias, render_service
from scaletrain_operator.render.in_place import restarting_in_place
from scaletrain_operator.render.status_reports import Endpoint
from scaletrain_operator.render.workload import GANG_TEMPLATES, WORKLOAD_API_VERSION

from .jobs import NAMESPACE, base_job, patched

ELASTIC = {"minNodes": 2, "scaleDownAfterSeconds": 120, "scaleUp": {"checkEverySeconds": 300}}
PROBE_CLASS = "scaletrain-capacity-probe"  # the chart's PriorityClass for probes (value 0, preemptionPolicy Never)
CANNOT_PLACE = "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."  # gang_pod's default


AGENT_IMAGE = "registry.example/scaletrain/operator:1.0"  # the operator's image, which brings own scripts the agent
STATUS_ENDPOINT = Endpoint("https://scaletrain-status-reports.scaletrain-system.svc", "-----BEGIN CERTIFICATE-----")


def in_place_settings(directory: Path, **config: Any) -> OperatorConfig:
    """The settings of an operator that serves STATUS_ENDPOINT (its CA in `directory`) on a cluster that takes the
    RestartAllContainers rule: gangs restart in place. Keyword arguments override."""
    (directory / "ca.crt").write_text(STATUS_ENDPOINT.ca_pem)
    served = {"status_reports_port": 8443, "status_reports_url": STATUS_ENDPOINT.base_url, "agent_image": AGENT_IMAGE}
    return OperatorConfig(**(served | {"status_reports_tls_dir": str(directory), "restarts_in_place": True} | config))


def operator_suspends(child_job: str, spec_generation: int = 1, **annotations: str) -> ChildJobPatch:
    """The patch by which the operator suspends a gang's Job, saying on it that it did so, and at which spec
    generation (and, for a resize, the `annotations` that go with it)."""
    noted = {SUSPENDED_BY_OPERATOR_ANNOTATION: str(spec_generation), **annotations}
    return ChildJobPatch(child_job, {"suspend": True}, noted)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def scaletrain_job(
    status: dict[str, Any] | None = None, *, metadata: dict[str, Any] | None = None, **spec: Any
) -> ScaleTrainJob:
    """base_job at metadata.generation 1, parsed as the operator reads it: keyword arguments patch its spec,
    `metadata` merges into its metadata, and `status` (when given) is its status."""
    patch = {"metadata": {"generation": 1, **(metadata or {})}} | ({"status": status} if status else {})
    return parse_job(patched(base_job(**spec), patch))


def elastic_job(status: dict[str, Any] | None = None, **spec: Any) -> ScaleTrainJob:
    """A 3-node job that may run at 2 (24 samples a step: 4 micro-batches of 2 a rank at 3 nodes, 6 at 2)."""
    elastic_spec = {"nodes": 3, "elastic": ELASTIC, "training": {"globalBatchSize": 24, "microBatchSize": 2}}
    return scaletrain_job(status, **(elastic_spec | spec))


def gang_job(
    job: ScaleTrainJob,
    generation: int = 0,
    nodes: int | None = None,
    *,
    uses_workload: bool = False,
    created: datetime | None = None,
    suspend: bool | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    conditions: Iterable[str] = (),
    in_place: bool = False,
) -> dict[str, Any]:
    """The Job of gang `generation` of `job` at `nodes` nodes (spec.nodes if None), as the API server holds it:
    as the operator rendered it (for the Workload API to place with `uses_workload`; to restart in place, asking
    STATUS_ENDPOINT, with `in_place`), with the labels the API server
    adds to its pod template; made at `created`, its suspend flag, `annotations` and `labels` as someone set
    them, and True the `conditions` (types: Complete, Failed) the Job controller gave it."""
    child = with_spec_hash(
        render_job(job if nodes is None else job.at_size(nodes), generation, uses_workload=uses_workload)
    )
    if in_place:
        child = restarting_in_place(child, job, STATUS_ENDPOINT, AGENT_IMAGE)
    if created is not None:
        child["metadata"]["creationTimestamp"] = rfc3339(created)
    # The Job controller's own labels, which the API server adds to the template of every Job.
    name = child["metadata"]["name"]
    child["spec"]["template"]["metadata"]["labels"] |= {
        "batch.kubernetes.io/controller-uid": f"uid-{name}",
        "batch.kubernetes.io/job-name": name,
        "controller-uid": f"uid-{name}",
        "job-name": name,
    }
    child["metadata"]["annotations"] |= annotations or {}
    child["metadata"]["labels"] |= labels or {}
    if suspend is not None:
        child["spec"]["suspend"] = suspend
    said = [{"type": kind, "status": "True", "reason": kind} for kind in conditions]
    child["status"] = {"conditions": said} if said else {}
    return child


def cached_gang_job(
    job: str = "demo", generation: int = 0, *, created: datetime | None = None, suspend: bool | None = None
) -> dict[str, Any]:
    """The Job of gang `generation` of the job named `job`, cut to what housekeeping reads of it from the
    operator's cache: its name, labels, uid (f"{job}-g{generation}-uid") and owner (the job, by stored_job's
    uid f"{job}-uid"); its creationTimestamp `created` and its suspend flag, when given."""
    name = f"{job}-g{generation}"
    metadata = _child_metadata(name, job, generation, owner_uid=f"{job}-uid", resource_version=1)
    metadata["uid"] = f"{name}-uid"
    if created is not None:
        metadata["creationTimestamp"] = rfc3339(created)
    return {"metadata": metadata, "spec": {} if suspend is None else {"suspend": suspend}}


def gang_pod(
    index: int,
    phase: str,
    generation: int = 0,
    *,
    scheduled: bool | None = True,
    since: datetime | None = None,
    scheduler_reason: str = "Unschedulable",
    scheduler_message: str = CANNOT_PLACE,
    node: str | None = None,
    ip: str | None = None,
    exit_code: int | None = None,
    termination_message: str = "",
    finished_at: datetime | None = None,
    deleted_at: datetime | None = None,
    disruption: str | None = None,
    job: str = "demo",
    name: str | None = None,
    owner_uid: str | None = None,
    resource_version: int | None = None,
    uid: str | None = None,
    created: datetime | None = None,
) -> dict[str, Any]:
    """Pod `index` of gang `generation` of the job named `job`, in `phase`, named as the Job controller names
    it (or `name`), with `uid`, made at `created`. The scheduler placed it (`scheduled` True), refused it a node
    since `since` (False: for `scheduler_reason`, in the words `scheduler_message`), or has not looked at it yet
    (None); bound to `node`, at `ip`. With `exit_code`, its trainer container ended (Error, or Completed for 0) with
    `termination_message`, at `finished_at`. `deleted_at` is its deletionTimestamp, and `disruption` the
    reason of its DisruptionTarget condition (an eviction's). As the cache holds it: owned by the Job of
    `owner_uid`, at `resource_version`."""
    pod_name = name or f"{job}-g{generation}-{index}-abcde"
    metadata = _child_metadata(pod_name, job, generation, owner_uid, resource_version)
    metadata["annotations"] = {COMPLETION_INDEX_ANNOTATION: str(index)}
    if uid is not None:
        metadata["uid"] = uid
    if created is not None:
        metadata["creationTimestamp"] = rfc3339(created)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": _placement(scheduled, since, scheduler_reason, scheduler_message),
    }
    pod = {"metadata": metadata, "status": status}
    if node is not None:
        pod["spec"] = {"nodeName": node}
    if ip is not None:
        status["podIP"] = ip
    if exit_code is not None:
        terminated = {
            "exitCode": exit_code,
            "reason": "Error" if exit_code else "Completed",
            "message": termination_message,
        }
        if finished_at is not None:
            terminated["finishedAt"] = rfc3339(finished_at)
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": terminated}}]
    if deleted_at is not None:
        metadata["deletionTimestamp"] = rfc3339(deleted_at)
    if disruption is not None:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    return pod


def probe_pod(number: int, *, scheduled: bool | None, since: datetime | None = None) -> dict[str, Any]:
    metadata = {"name": f"demo-probe-{number}", "labels": {"scaletrain.io/capacity-probe": "true"}}
    return {"metadata": metadata, "status": {"phase": "Pending", "conditions": _placement(scheduled, since)}}


class ListedMessages:
    """What housekeeping lists of a namespace when a decision asks (FailedCreate messages by Job name, Kueue's
    reasons to wait by Job uid): `messages`, whatever the namespace; `asked` holds the namespaces asked for."""

    def __init__(self, messages: dict[str, str]):
        self.messages = messages
        self.asked: list[str] = []

    def __call__(self, namespace: str) -> dict[str, str]:
        self.asked.append(namespace)
        return self.messages


def rank_0(url: str, gang_generation: int = 0, **spec: Any) -> Rank0:
    """Rank 0 of gang `gang_generation` of scaletrain_job(**spec), serving its progress at `url`."""
    return Rank0(scaletrain_job(**spec), gang_generation, url)


def _child_metadata(
    name: str, job: str, generation: int, owner_uid: str | None, resource_version: int | None
) -> dict[str, Any]:
    """The metadata of a gang's Job or pod: labelled with its job and generation, owned by `owner_uid`."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {LABEL_JOB_NAME: job, LABEL_GENERATION: str(generation)},
    }
    if owner_uid is not None:
        metadata["ownerReferences"] = [{"uid": owner_uid, "controller": True}]
    if resource_version is not None:
        metadata["resourceVersion"] = str(resource_version)
    return metadata


def _placement(
    scheduled: bool | None, since: datetime | None, reason: str = "Unschedulable", message: str = CANNOT_PLACE
) -> list[dict[str, Any]]:
    if scheduled is None:
        return []
    if scheduled:
        return [{"type": "PodScheduled", "status": "True"}]
    moment = rfc3339(since) if since is not None else None
    return [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message,
             "lastTransitionTime": moment}]  # fmt: skip


def observed(
    job: ScaleTrainJob,
    jobs: dict[int, dict[str, Any]],
    pods: Iterable[dict[str, Any]] = (),
    probe: dict[str, Any] | None = None,
    probe_pods: Iterable[dict[str, Any]] = (),
    said: dict[int, WorkloadEnd] | None = None,
) -> Observed:
    """What the operator reads of `job`'s children: its two Services (as rendered), its gangs' Jobs by
    generation, the current gang's pods, and its capacity probe with the probe's pods; and what the agents of a
    gang restarted in place `said` of workloads that ended, by rank."""
    services = {s["metadata"]["name"]: s for s in (render_service(job), render_master_alias(job))}
    return Observed(
        services=services, jobs=jobs, pods=list(pods), probe=probe, probe_pods=list(probe_pods), said=said or {}
    )


def probe_of(job: ScaleTrainJob, gang: dict[str, Any], pods: int, created: datetime) -> dict[str, Any]:
    """The capacity probe the operator made for `job`'s running gang `gang`, as the API server holds it."""
    probe = render_probe(job, pods, gang, PROBE_CLASS)
    probe["metadata"]["creationTimestamp"] = rfc3339(created)
    return probe


def created(decision: Decision) -> list[tuple[str, str]]:
    """(kind, name) of what `decision` creates, as the cluster layer makes them: the job's Workload first, with the
    other children that come before a gang's Job, then the Jobs, then a capacity probe."""
    workload = [decision.workload] if decision.workload is not None else []
    first = [child for child in decision.create if child["kind"] != "Job"]
    jobs = [child for child in decision.create if child["kind"] == "Job"]
    probe = [decision.create_probe] if decision.create_probe is not None else []
    return [(child["kind"], child["metadata"]["name"]) for child in (*workload, *first, *jobs, *probe)]


def decoy_workload(
    job: str = "demo", name: str = "decoy", namespace: str = NAMESPACE, *, stored: bool = True
) -> dict[str, Any]:
    """A Workload someone else made in `namespace` that names ScaleTrainJob `job` in its spec.controllerRef, as the
    job's own does, with templates of the names the job's gangs ask for but a gang of 1: the Job controller may take
    it for the job's, and place each pod alone. Owned by nothing; `stored`: as the API server holds it (a uid,
    f"{name}-uid", and a resourceVersion), else as it is created."""
    gang = {"schedulingPolicy": {"gang": {"minCount": 1}}}
    held = {"uid": f"{name}-uid", "resourceVersion": "3"} if stored else {}
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, **held},
        "spec": {
            "controllerRef": {"apiGroup": GROUP, "kind": KIND, "name": job},
            "podGroupTemplates": [{"name": template, **gang} for template in GANG_TEMPLATES],
        },
    }


class WorkloadServer:
    """An API server for Cluster._request: it holds `workloads` (found by name, as the operator reads one) and
    answers every other request with what was sent, made (a name and a resourceVersion); `requests` records each
    request's method and path, and `events` the reason and occasion name of each Event posted."""

    def __init__(self, workloads: Iterable[dict[str, Any]] = ()):
        self.workloads = {workload["metadata"]["name"]: workload for workload in workloads}
        self.requests: list[tuple[str, str]] = []
        self.events: list[tuple[str, str | None]] = []

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str | None = None,
    ) -> Any:
        self.requests.append((method, path))
        if method == "GET":
            name = dict(query or [])["fieldSelector"].removeprefix("metadata.name=")
            return {"items": [self.workloads[name]] if name in self.workloads else []}
        if path.endswith("/events"):
            self.events.append((body["reason"], body["metadata"].get("name")))
        metadata = body.get("metadata") or {}
        return body | {"metadata": {"name": "demo", **metadata, "namespace": NAMESPACE, "resourceVersion": "7"}}
