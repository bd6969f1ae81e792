"""The operator's API calls, in one place: read a ScaleTrainJob and its children (from the cache, or
fresh where that matters), apply a Decision.

Every call here is idempotent against repeats (create tolerates AlreadyExists, delete tolerates
NotFound), so a reconcile that runs twice, or after an operator restart, converges. What a write
answers goes into the cache (write-through, cache.py). The ScaleTrainJob's status is written with the
resourceVersion it was decided from as a precondition: a decision made from a stale copy is refused
(Conflict) instead of overwriting a newer status, e.g. its restart count.

Requests are plain JSON over the client's connection pool: the cache keeps the API server's JSON as
is, and the generated model classes would only parse every answer into objects and back. The requests
of one decision (or one fresh read) that need not wait for each other go out together (`at_once`), on
a few helper threads the Cluster shares among all reconciles: on a busy API server each request takes a
while, and a new job's six writes in a row took seconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ..api import naming
from ..api.conditions import QUOTA_RESERVED, ControllerFailureReason, EventReason
from ..api.crd import status_schema
from ..api.timestamps import timestamp
from ..policy.placement import foreign_workloads, held_back_by, same_gang
from ..policy.pods import being_deleted
from ..render.in_place import restart_rule_probe, runs_in_place
from ..render.workload import WORKLOAD_API_VERSION, WORKLOAD_PLURAL
from ..validation.status_schema import fit_status
from . import metrics
from .cache import Cache, owned_by, version_of
from .decision import ChildJobPatch, Decision, Event, Observed
from .peering import KOPF_GROUP, KOPF_VERSION
from .status import bounded

log = logging.getLogger(__name__)

JSON, MERGE_PATCH = "application/json", "application/merge-patch+json"
EVENT_MESSAGE_LIMIT = 1024  # characters of an Event's message, its start and its end (where a traceback ends)
BACKGROUND = {"propagationPolicy": "Background"}  # a Job's pods go after it, by the garbage collector


@dataclass(frozen=True)
class Resource:
    prefix: str  # "/api/v1" for the core group, else "/apis/GROUP/VERSION"
    plural: str

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        parts = [self.prefix, *(("namespaces", namespace) if namespace else ()), self.plural, name, subresource]
        return "/".join(part for part in parts if part)


SCALETRAINJOBS = Resource(f"/apis/{naming.GROUP}/{naming.VERSION}", naming.PLURAL)
SERVICES = Resource("/api/v1", "services")
JOBS = Resource("/apis/batch/v1", "jobs")
PODS = Resource("/api/v1", "pods")
EVENTS = Resource("/api/v1", "events")
NETWORK_POLICIES = Resource("/apis/networking.k8s.io/v1", "networkpolicies")
WORKLOADS = Resource(f"/apis/{WORKLOAD_API_VERSION}", WORKLOAD_PLURAL)
KUEUE_WORKLOADS = Resource("/apis/kueue.x-k8s.io/v1beta2", "workloads")  # Kueue's own, one per queued Job
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on each of Kueue's Workloads: the Job it queues
KOPF_PEERINGS = Resource(f"/apis/{KOPF_GROUP}/{KOPF_VERSION}", "kopfpeerings")
CLUSTER_KOPF_PEERINGS = Resource(f"/apis/{KOPF_GROUP}/{KOPF_VERSION}", "clusterkopfpeerings")


class Conflict(Exception):
    """A write's precondition failed: the object changed since the operator read it."""


class ChildRejected(Exception):
    """The API server refused a child for good (`refused`), or its name is held by an object the
    ScaleTrainJob does not own: the job cannot run as specified."""

    def __init__(self, reason: ControllerFailureReason, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


class StatusRefused(Exception):
    """The API server refused a status write as invalid (422): what it holds, not when it was sent."""


@functools.cache
def _status_schema() -> dict[str, Any]:
    """The CRD's status schema, which every status write is held to (made once: it is read only)."""
    return status_schema()


def server_message(error: ApiException) -> str:
    """What the API server said (its Status message), else the HTTP reason."""
    try:
        return json.loads(error.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{error.status} {error.reason}"


def describe(error: Exception) -> str:
    """An error in a line: an API answer's code and message (its str() holds every response header)."""
    return f"{error.status} {server_message(error)}" if isinstance(error, ApiException) else str(error)


class Leftover(Exception):
    """A child's name is still held by an object on its way out: the child of a deleted ScaleTrainJob of the
    same name (deleted and created again), which the garbage collector is about to remove, or another
    object being deleted (its finalizers may hold it a while). The job waits for the name: the reconcile
    is looked at again shortly, and the job's status says what it waits for."""


def leftover_reason(obj: dict[str, Any], child: dict[str, Any]) -> str | None:
    """Why `obj`, which holds the name of `child`, is expected to go: an earlier ScaleTrainJob's of the name
    that `child` belongs to, or being deleted. None: it stays (a name conflict)."""
    ours = next(ref for ref in child["metadata"].get("ownerReferences") or () if ref.get("controller"))
    kind, name = obj.get("kind") or child["kind"], obj["metadata"]["name"]
    if any(
        ref.get("kind") == naming.KIND and ref.get("name") == ours["name"] and ref.get("uid") != ours["uid"]
        for ref in obj["metadata"].get("ownerReferences") or ()
    ):
        return f"{kind} {name} is an earlier ScaleTrainJob's of this name, not yet garbage-collected"
    if being_deleted(obj):
        finalizers = ", ".join(obj["metadata"].get("finalizers") or ()) or "none"
        return f"{kind} {name}, not this ScaleTrainJob's, is being deleted (finalizers: {finalizers})"
    return None


class ForeignWorkload(Exception):
    """Another Workload than the job's own names the job in its spec.controllerRef: the gang's Job is not made,
    since the Job controller could place the gang through that one (policy/placement.foreign_workloads). The job
    waits until it is gone, and `event` says so, once for each such set of Workloads."""

    def __init__(self, event: Event):
        super().__init__(event.message)
        self.event = event


def owner_uid(child: dict[str, Any]) -> str | None:
    """The uid of the object that controls `child` (a rendered child: its ScaleTrainJob)."""
    references = child["metadata"].get("ownerReferences") or ()
    return next((ref.get("uid") for ref in references if ref.get("controller")), None)


def refused(error: ApiException) -> bool:
    """A 4xx that repeating the same request cannot fix: the object itself is wrong. Not a conflict, not
    throttling, and not Forbidden, which RBAC or a ResourceQuota may lift (retried, with an Event)."""
    return 400 <= error.status < 500 and error.status not in (403, 409, 429)


@dataclass(frozen=True)
class ObjectRef:
    """The ScaleTrainJob a decision is about: where its status and Events go, and the version it was
    decided from."""

    namespace: str
    name: str
    uid: str | None = None
    resource_version: str | None = None

    @classmethod
    def of(cls, stj: dict[str, Any]) -> ObjectRef:
        metadata = stj["metadata"]
        return cls(metadata["namespace"], metadata["name"], metadata.get("uid"), metadata.get("resourceVersion"))


def settle(call: Callable[[], Any]) -> tuple[Any, Exception | None]:
    """What `call()` answered, or how it failed."""
    try:
        return call(), None
    except Exception as error:
        return None, error


def connect(connections: int) -> client.ApiClient:
    """A client for the API server, with the credentials kopf would use: in-cluster, else kubeconfig. Its
    pool keeps `connections` open, one for each thread that calls the API at once: urllib3 closes a
    connection it has no room for after one request, so each request beyond the pool (by default 5 per
    CPU) would pay a new TLS handshake, on both sides."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


class Cluster:
    def __init__(
        self, api: client.ApiClient, timeout_seconds: float = 30.0, cache: Cache | None = None, helpers: int = 4
    ):
        self.api = api
        self.timeout = timeout_seconds  # every call has one: a stuck API server must not hang the operator
        self.cache = cache or Cache()
        self._helpers = ThreadPoolExecutor(helpers, thread_name_prefix="api")  # threads start when first needed

    def at_once(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Make requests that need not wait for each other together: the first in this thread, the others on
        the helper threads. Once all are done, their answers in order; or the first failure in their order
        (the others are logged)."""
        others = [self._helpers.submit(call) for call in calls[1:]]
        settled = [settle(call) for call in [*calls[:1], *(other.result for other in others)]]
        failures = [error for _, error in settled if error is not None]
        for error in failures[1:]:
            log.warning("a request made together with one that failed also failed: %s", describe(error))
        if failures:
            raise failures[0]
        return [answer for answer, _ in settled]

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = JSON,
    ) -> Any:
        headers = {"Accept": JSON, "Content-Type": content_type}
        prepared = self.api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        try:
            response = self.api.call_api(*prepared, _request_timeout=self.timeout)
            response.read()
        except Exception:
            metrics.count_response(method, "error")
            raise
        metrics.count_response(method, response.status)
        if response.status >= 400:  # call_api returns errors; the generated API classes raise them
            raise ApiException(http_resp=response)
        return json.loads(response.data) if response.data else None

    # ---- fresh reads: where the cache may have missed something (handlers.needs_fresh_look says when) ----

    def read_scaletrainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ScaleTrainJob as the API server has it now (None when it is gone), into the cache too."""
        store = self.cache.scaletrainjobs
        try:
            stj = self._request("GET", SCALETRAINJOBS.path(namespace, name))
        except ApiException as error:
            if error.status != 404:
                raise
            if (held := store.get(namespace, name)) is not None:
                store.delete(held)
            return None
        store.put(stj)
        return store.get(namespace, name)

    def read_children(
        self, namespace: str, name: str, generation_hint: int | None = None, *, not_older_than: str
    ) -> Observed:
        """A ScaleTrainJob's Service, Jobs and pods as listed now, at least as new as the resourceVersion
        `not_older_than` (the job's, as just read): each child the job's status can know of is there. The
        three lists are made at once; the cache's copy of the children is replaced by them (keeping only
        what was written after them), then read.

        Such a list is served from the API server's watch cache. A list without a resourceVersion must be
        up to the moment, and when the server's cache lags (a busy server) it is read from etcd instead,
        which returns every pod of the namespace to be filtered by label: at 1000 jobs, restarting the gangs
        at once made such lists take 30 s and fail. When the cache lags more than a few seconds behind the
        job's version, the server refuses (504) and the reconcile is tried again after a backoff."""
        query = [
            ("labelSelector", f"{naming.LABEL_JOB_NAME}={name}"),
            ("resourceVersion", not_older_than),
            ("resourceVersionMatch", "NotOlderThan"),
        ]
        cache = self.cache
        stores = ((SERVICES, cache.services), (JOBS, cache.jobs), (PODS, cache.pods))
        lists = self.at_once(
            [functools.partial(self._request, "GET", kind.path(namespace), query=query) for kind, _ in stores]
        )
        for (_, store), listed in zip(stores, lists, strict=True):
            store.replace_owned((namespace, name), listed["items"], version_of(listed))
        return cache.observed(namespace, name, generation_hint)

    # ---- writes ----

    def apply(self, stj: ObjectRef, decision: Decision) -> None:
        """Carry out `decision` in rounds, each round's requests at once (`at_once`), a failure ending the
        rounds after its own: what a gang's Job needs to exist first (its Services, its Workload, a
        NetworkPolicy); the Jobs; the deletions of ended gangs' Jobs and the change to the running one; the
        status, which names the Jobs made, and the Events."""
        namespace, create = stj.namespace, functools.partial(self.create_child, stj.namespace)
        needed_first = [obj for obj in decision.create if obj["kind"] != "Job"]
        made = self.at_once(
            [functools.partial(create, obj) for obj in needed_first]
            + ([functools.partial(self.ensure_workload, namespace, decision.workload)] if decision.workload else [])
        )
        made_now = [
            obj for obj, new in zip([*needed_first, *filter(None, [decision.workload])], made, strict=True) if new
        ]
        news = [event for obj in made_now if (event := decision.said_if_made(obj)) is not None]
        jobs = [obj for obj in decision.create if obj["kind"] == "Job"]
        self.at_once(
            [functools.partial(create, obj) for obj in jobs]
            + ([functools.partial(self.create_probe, stj, decision.create_probe)] if decision.create_probe else [])
        )
        changes = [functools.partial(self.delete_child_job, namespace, name) for name in decision.delete_child_jobs]
        if decision.patch_child_job is not None:
            changes.append(functools.partial(self.patch_child_job, namespace, decision.patch_child_job))
        self.at_once(changes)
        said = [functools.partial(self.post_event, stj, event) for event in (*decision.events, *news)]
        if decision.status is not None:
            said.append(functools.partial(self.patch_status, stj, decision.status))
        self.at_once(said)
        if decision.delete_stj:
            log.info("deleting %s/%s: ttlSecondsAfterFinished passed", stj.namespace, stj.name)
            self.delete_stj(stj)

    def serves_workloads(self) -> bool:
        """Whether the API server serves the Workload API (discovery, which every user may read)."""
        try:
            served = self._request("GET", WORKLOADS.prefix)
        except ApiException as error:
            if error.status != 404:
                raise
            return False
        return any(resource.get("name") == WORKLOADS.plural for resource in served.get("resources") or ())

    def restarts_all_containers(self, namespace: str) -> bool:
        """Whether the API server takes a container's restart rule RestartAllContainers, which in-place gang restarts
        rest on: a server-side dry run of a Job that has one (render/in_place.py), in `namespace`. Before 1.36, or
        with its feature gates off, the server refuses the rule or drops it; nothing is made either way."""
        try:
            answer = self._request("POST", JOBS.path(namespace), restart_rule_probe(), query=[("dryRun", "All")])
        except ApiException as error:
            log.warning("a dry run of a Job with a restart rule was refused: %s", server_message(error))
            return False
        return runs_in_place(answer)

    def create_child(self, namespace: str, obj: dict[str, Any]) -> bool:
        """Create a rendered child; True if it was made, False if it was there. AlreadyExists is success when
        the object there is this ScaleTrainJob's (an earlier reconcile made it), and NameConflict when it is
        not: it is never adopted."""
        return self._create(namespace, obj) is None

    def ensure_workload(self, namespace: str, workload: dict[str, Any]) -> bool:
        """Decision.workload: made where it is missing (True); where the job's own is there but asks for
        another gang, made anew, since a Workload's spec cannot change (False, as for one found as it is). Not
        while another Workload names the job (ForeignWorkload), nor then the gang's Job."""
        self._refuse_other_claims(namespace, workload)
        there = self._create(namespace, workload)
        if there and not same_gang(there, workload):
            self._replace_workload(namespace, there, workload)
        return there is None

    def _create(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """create_child's create: None if it made `obj`, else the object of its name there, which this
        ScaleTrainJob owns ({} if it went before it could be read)."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        resource, store = {
            "Service": (SERVICES, self.cache.services),
            "Job": (JOBS, self.cache.jobs),
            "NetworkPolicy": (NETWORK_POLICIES, None),  # made, never read back: not cached
            "Workload": (WORKLOADS, self.cache.workloads),  # which Workloads name the job (ensure_workload)
        }[kind]
        try:
            created = self._request("POST", resource.path(namespace), obj)
            if store is not None:
                store.put(created)
            log.info("created %s %s/%s", kind, namespace, name)
            return None
        except ApiException as error:
            if refused(error):
                message = f"the API server refused {kind} {name}: {server_message(error)}"
                raise ChildRejected(ControllerFailureReason.CHILD_REJECTED, message) from None
            if error.status != 409:
                raise
            query = [("fieldSelector", f"metadata.name={name}")]
            there = self._request("GET", resource.path(namespace), query=query)["items"]
            if not there:
                return {}
            if owned_by(there[0], owner_uid(obj)):
                return there[0]
            if (going := leftover_reason(there[0], obj)) is not None:
                raise Leftover(f"{going}; waiting for its name to be free") from None
            message = f"{kind} {name} already exists and does not belong to this ScaleTrainJob; it is left alone"
            raise ChildRejected(ControllerFailureReason.NAME_CONFLICT, message) from None

    def create_probe(self, stj: ObjectRef, probe: dict[str, Any]) -> None:
        """An elastic gang's capacity probe (render/capacity_probe.py). One the API server refuses (a policy, a
        quota, a name taken) fails nothing: the gang trains on at its size, the next probe is due a check
        interval later (the status says when this one started), and a Warning Event says why."""
        try:
            self.create_child(stj.namespace, probe)
        except (ApiException, ChildRejected, Leftover) as error:
            message = f"no capacity probe this time, the gang trains on at its size: {describe(error)}"
            log.warning("%s/%s: %s", stj.namespace, stj.name, message)
            self.post_event(stj, Event("Warning", EventReason.CAPACITY_PROBE_FAILED, message))

    def _replace_workload(self, namespace: str, there: dict[str, Any], obj: dict[str, Any]) -> None:
        """A Workload's spec cannot change (but for its gang's minCount): the one of an earlier spec goes,
        and the new one is made. (Its delete precondition is its uid: a Workload made meanwhile stays.)"""
        name = obj["metadata"]["name"]
        preconditions = {"preconditions": {"uid": there["metadata"]["uid"]}, **BACKGROUND}
        try:
            self._request("DELETE", WORKLOADS.path(namespace, name), preconditions)
        except ApiException as error:
            if error.status not in (404, 409):
                raise
        try:
            self._request("POST", WORKLOADS.path(namespace), obj)
        except ApiException as error:
            if error.status != 409:
                raise
            raise Leftover(f"Workload {name} of the job's earlier gang is being deleted") from None
        log.info("replaced Workload %s/%s: the job's gang changed", namespace, name)

    def delete_child_job(self, namespace: str, name: str) -> None:
        """The gang's pods go with the Job (background propagation)."""
        try:
            answer = self._request("DELETE", JOBS.path(namespace, name), BACKGROUND)
            log.info("deleted Job %s/%s", namespace, name)
        except ApiException as error:
            if error.status != 404:
                raise
            answer = None
        held = self.cache.jobs.get(namespace, name)
        gone = answer if answer and answer.get("kind") == "Job" else held
        if gone is not None:
            self.cache.jobs.delete(gone)

    def patch_child_job(self, namespace: str, patch: ChildJobPatch) -> None:
        path = JOBS.path(namespace, patch.job)
        try:
            self.cache.jobs.put(self._request("PATCH", path, patch.body(), content_type=MERGE_PATCH))
        except ApiException as error:
            if refused(error) and error.status != 404:  # gone: the next reconcile sees that
                message = f"the API server refused a change to Job {patch.job}: {server_message(error)}"
                raise ChildRejected(ControllerFailureReason.CHILD_REJECTED, message) from None
            raise

    def patch_status(self, stj: ObjectRef, status: dict[str, Any]) -> None:
        """A merge patch of the status, refused (Conflict) if the ScaleTrainJob is no longer at the version
        the patch was decided from. What the CRD's status schema would refuse is left out (and logged), so
        that one value from a tenant's pod cannot have every status write of the job refused."""
        status, left_out = fit_status(status, _status_schema())
        if left_out:
            metrics.STATUS_FIELDS_LEFT_OUT.inc(len(left_out))
            log.warning("status of %s/%s: left out %s", stj.namespace, stj.name, "; ".join(left_out))
        body: dict[str, Any] = {"status": status}
        if stj.resource_version is not None:
            body["metadata"] = {"resourceVersion": stj.resource_version}
        path = SCALETRAINJOBS.path(stj.namespace, stj.name, "status")
        try:
            self.cache.scaletrainjobs.put(self._request("PATCH", path, body, content_type=MERGE_PATCH))
        except ApiException as error:
            if error.status == 409:
                raise Conflict(f"{stj.namespace}/{stj.name} changed since version {stj.resource_version}") from None
            if error.status == 422:
                raise self._status_refused(stj, server_message(error)) from None
            raise

    def _status_refused(self, stj: ObjectRef, why: str) -> StatusRefused:
        """A status write the API server refused as invalid: never silent. It is logged and counted, and said in
        a Warning Event, once for each reason (the API server's message), however often it recurs."""
        metrics.STATUS_WRITES_REFUSED.inc()
        log.error("the API server refused the status of %s/%s: %s", stj.namespace, stj.name, why)
        message = f"the API server refused a write of the job's status: {why}"
        occasion = hashlib.sha256(why.encode()).hexdigest()[:16]
        self.post_event(stj, Event("Warning", EventReason.STATUS_WRITE_REFUSED, message, occasion))
        return StatusRefused(why)

    def delete_stj(self, stj: ObjectRef) -> None:
        """Delete a ScaleTrainJob, if it is still at the version decided from; its children follow through
        their ownerReferences."""
        body = BACKGROUND | (
            {"preconditions": {"resourceVersion": stj.resource_version}} if stj.resource_version else {}
        )
        try:
            self._request("DELETE", SCALETRAINJOBS.path(stj.namespace, stj.name), body)
        except ApiException as error:
            if error.status == 409:
                raise Conflict(f"{stj.namespace}/{stj.name} changed since version {stj.resource_version}") from None
            if error.status != 404:
                raise
        if (held := self.cache.scaletrainjobs.get(stj.namespace, stj.name)) is not None:
            self.cache.scaletrainjobs.delete(held)

    def pod_creation_failures(self, namespace: str) -> dict[str, str]:
        """Why the Job controller cannot create pods of Jobs in `namespace` (an admission refusal, a quota):
        the message of the newest FailedCreate Event it posted on each such Job, by the Job's name. One
        list for the namespace, however many of its Jobs lack pods."""
        # From the API server's watch cache, however recent (resourceVersion 0): a consistent list may read
        # every Event of the namespace from etcd, and a reason a moment old is as good.
        query = [("fieldSelector", "involvedObject.kind=Job,reason=FailedCreate"), ("resourceVersion", "0")]
        events = self._request("GET", EVENTS.path(namespace), query=query)["items"]
        oldest_first = sorted(events, key=lambda event: event.get("lastTimestamp") or event.get("eventTime") or "")
        return {event["involvedObject"]["name"]: event["message"] for event in oldest_first if event.get("message")}

    def queue_waits(self, namespace: str) -> dict[str, str]:
        """Why Kueue has not admitted Jobs in `namespace` yet: the message of the QuotaReserved=False condition
        of Kueue's Workload of each (e.g. "couldn't assign flavors to pod set main: insufficient quota ..."),
        naming that Workload,
        by the Job's uid. One list for the namespace; none where Kueue is not installed or may not be read."""
        try:
            workloads = self._request("GET", KUEUE_WORKLOADS.path(namespace))["items"]
        except ApiException as error:
            if error.status in (403, 404):
                return {}
            raise
        waits = {}
        for workload in workloads:
            job_uid = (workload["metadata"].get("labels") or {}).get(KUEUE_JOB_UID_LABEL)
            conditions = (workload.get("status") or {}).get("conditions") or ()
            reserved = next((c for c in conditions if c.get("type") == QUOTA_RESERVED), None)
            if job_uid and reserved and reserved.get("status") == "False" and reserved.get("message"):
                waits[job_uid] = f"{reserved['message']} (Kueue's Workload {workload['metadata']['name']})"
        return waits

    def peering_status(self, name: str, namespaces: list[str]) -> dict[str, Any] | None:
        """The peers recorded in kopf's peering object `name`: the ClusterKopfPeering of a cluster-wide
        operator, else the KopfPeering of its first namespace (every namespace has the same peers)."""
        if namespaces:
            items = self._request("GET", KOPF_PEERINGS.path(namespaces[0]))["items"]
        else:
            items = self._request("GET", CLUSTER_KOPF_PEERINGS.path(None))["items"]
        return next((item.get("status") or {} for item in items if item["metadata"]["name"] == name), None)

    def label_pod(self, namespace: str, name: str, label: str, on: bool) -> None:
        """Set `label` to "true" on the pod, or remove it."""
        patch = {"metadata": {"labels": {label: "true" if on else None}}}
        self._request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch, content_type=MERGE_PATCH)

    def review_token(self, token: str, audience: str) -> dict[str, Any]:
        """The API server's verdict on a bearer token meant for `audience` (a TokenReview's status)."""
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]},
        }
        return self._request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review).get("status") or {}

    def post_event(self, stj: ObjectRef, event: Event) -> None:
        """Post `event` on the ScaleTrainJob. One with an occasion is posted once: its name is made from what
        it is about, so a repeat is refused as AlreadyExists, which means it was posted."""
        now = timestamp(datetime.now(timezone.utc), "microseconds")
        if event.occasion is None:
            naming_it = {"generateName": f"{stj.name}."}
        else:
            about = f"{stj.uid}/{event.reason}/{event.occasion}".encode()
            naming_it = {"name": f"{stj.name}.{hashlib.sha256(about).hexdigest()[:16]}"}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": naming_it | {"namespace": stj.namespace},
            "involvedObject": {
                "apiVersion": naming.API_VERSION,
                "kind": naming.KIND,
                "name": stj.name,
                "namespace": stj.namespace,
                "uid": stj.uid,
            },
            "type": event.type,
            "reason": event.reason,
            "message": bounded(event.message, EVENT_MESSAGE_LIMIT),
            "source": {"component": naming.MANAGER},
            "reportingComponent": naming.MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._request("POST", EVENTS.path(stj.namespace), body)
        except ApiException as error:  # Events are best effort
            if error.status == 409 and event.occasion is not None:
                log.info("Event %s for %s/%s was posted before", event.reason, stj.namespace, stj.name)
                return
            log.warning("cannot post Event %s for %s/%s: %s", event.reason, stj.namespace, stj.name, error.reason)
            return
        metrics.count_event(stj.namespace, stj.name, event.type, event.reason)

    def _refuse_other_claims(self, namespace: str, workload: dict[str, Any]) -> None:
        """Raise ForeignWorkload where another Workload than `workload` (the job's own, rendered) names the job:
        the watch's word for it (the cache), each such Workload read again by name first, since a deletion the
        watch missed (it starts over after a gap, and lists what exists) must not hold the job back for good."""
        store, job = self.cache.workloads, workload["spec"]["controllerRef"]["name"]
        others: list[dict[str, Any]] = []
        for held in foreign_workloads(store.owned_by(namespace, job), workload):
            query = [("fieldSelector", f"metadata.name={held['metadata']['name']}")]
            listed = self._request("GET", WORKLOADS.path(namespace), query=query)["items"]
            for there in listed:
                store.put(there)
            if not listed:
                store.delete(held)
            others += foreign_workloads(listed, workload)
        if others:
            occasion = ",".join(sorted(other["metadata"]["uid"] for other in others))
            message = held_back_by(others, workload["metadata"]["name"])
            raise ForeignWorkload(Event("Warning", EventReason.FOREIGN_WORKLOAD, message, occasion))
