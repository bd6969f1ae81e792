"""The operator's API calls, in one place: read a ScaleTrainJob and its children, apply a Decision.

Every call here is idempotent against repeats (create tolerates AlreadyExists, delete tolerates
NotFound), so a reconcile that runs twice, or after an operator restart, converges.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ..api import naming
from .decision import Decision, Event
from .peering import KOPF_GROUP, KOPF_VERSION
from .reconcile import Observed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectRef:
    """The ScaleTrainJob a decision is about: where its status and Events go."""

    namespace: str
    name: str
    uid: str | None = None

    @classmethod
    def of(cls, stj: dict[str, Any]) -> ObjectRef:
        metadata = stj["metadata"]
        return cls(metadata["namespace"], metadata["name"], metadata.get("uid"))


def connect() -> client.ApiClient:
    """A client for the API server, with the credentials kopf would use: in-cluster, else kubeconfig."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    return client.ApiClient(configuration)


class Cluster:
    def __init__(self, api: client.ApiClient, timeout_seconds: float = 30.0):
        self.api = api
        self.timeout = timeout_seconds  # every call has one: a stuck API server must not hang the operator
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _plain(self, obj: Any) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(obj)

    def get_stj(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(
                naming.GROUP, naming.VERSION, namespace, naming.PLURAL, name, _request_timeout=self.timeout
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list_stjs(self, namespaces: list[str]) -> list[dict[str, Any]]:
        """All ScaleTrainJobs in `namespaces` (every namespace when empty)."""
        if not namespaces:
            return self.custom.list_cluster_custom_object(
                naming.GROUP, naming.VERSION, naming.PLURAL, _request_timeout=self.timeout
            )["items"]
        return [
            item
            for namespace in namespaces
            for item in self.custom.list_namespaced_custom_object(
                naming.GROUP, naming.VERSION, namespace, naming.PLURAL, _request_timeout=self.timeout
            )["items"]
        ]

    def observe(self, namespace: str, name: str, generation_hint: int | None = None) -> Observed:
        """The Service, the Jobs (by generation) and the current generation's pods of one ScaleTrainJob."""
        selector = f"{naming.LABEL_JOB_NAME}={name}"
        try:
            service = self._plain(
                self.core.read_namespaced_service(naming.service_name(name), namespace, _request_timeout=self.timeout)
            )
        except ApiException as error:
            if error.status != 404:
                raise
            service = None
        jobs = {}
        for item in self.batch.list_namespaced_job(
            namespace, label_selector=selector, _request_timeout=self.timeout
        ).items:
            job = self._plain(item)
            generation = (job["metadata"].get("labels") or {}).get(naming.LABEL_GENERATION)
            if generation is not None and job["metadata"].get("deletionTimestamp") is None:
                jobs[int(generation)] = job
        current = max(jobs, default=generation_hint or 0)
        pods = [
            self._plain(p)
            for p in self.core.list_namespaced_pod(
                namespace,
                label_selector=f"{selector},{naming.LABEL_GENERATION}={current}",
                _request_timeout=self.timeout,
            ).items
        ]
        return Observed(service=service, jobs=jobs, pods=pods)

    def rank_0_pod_ip(self, namespace: str, child_job: str) -> str:
        """The IP of the pod of completion index 0 of `child_job` ("" while it has none)."""
        selector = f"batch.kubernetes.io/job-name={child_job},batch.kubernetes.io/job-completion-index=0"
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=self.timeout).items
        return next((pod.status.pod_ip for pod in pods if pod.status and pod.status.pod_ip), "")

    def apply(self, stj: ObjectRef, decision: Decision) -> None:
        for obj in decision.create:
            self.create_child(stj.namespace, obj)
        for name in decision.delete_child_jobs:
            self.delete_child_job(stj.namespace, name)
        if decision.patch_child_job is not None:
            patch = decision.patch_child_job
            self.batch.patch_namespaced_job(
                patch.job, stj.namespace, {"spec": patch.spec}, _request_timeout=self.timeout
            )
        for event in decision.events:
            self.post_event(stj, event)
        if decision.status is not None:
            self.patch_stj_status(stj.namespace, stj.name, decision.status)
        if decision.delete_stj:
            log.info("deleting %s/%s: ttlSecondsAfterFinished passed", stj.namespace, stj.name)
            self.delete_stj(stj.namespace, stj.name)

    def create_child(self, namespace: str, obj: dict[str, Any]) -> None:
        create = {"Service": self.core.create_namespaced_service, "Job": self.batch.create_namespaced_job}[obj["kind"]]
        try:
            create(namespace, obj, _request_timeout=self.timeout)
            log.info("created %s %s/%s", obj["kind"], namespace, obj["metadata"]["name"])
        except ApiException as error:
            if error.status != 409:  # AlreadyExists: an earlier reconcile made it
                raise

    def delete_child_job(self, namespace: str, name: str) -> None:
        """The gang's pods go with the Job (background propagation)."""
        try:
            self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _request_timeout=self.timeout
            )
            log.info("deleted Job %s/%s", namespace, name)
        except ApiException as error:
            if error.status != 404:
                raise

    def patch_stj_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            naming.GROUP,
            naming.VERSION,
            namespace,
            naming.PLURAL,
            name,
            {"status": status},
            _request_timeout=self.timeout,
        )

    def delete_stj(self, namespace: str, name: str) -> None:
        """Delete a ScaleTrainJob; its children follow through their ownerReferences."""
        try:
            self.custom.delete_namespaced_custom_object(
                naming.GROUP,
                naming.VERSION,
                namespace,
                naming.PLURAL,
                name,
                propagation_policy="Background",
                _request_timeout=self.timeout,
            )
        except ApiException as error:
            if error.status != 404:
                raise

    def peering_status(self, name: str, namespaces: list[str]) -> dict[str, Any] | None:
        """The peers recorded in kopf's peering object `name`: the ClusterKopfPeering of a cluster-wide
        operator, else the KopfPeering of its first namespace (every namespace has the same peers)."""
        if namespaces:
            items = self.custom.list_namespaced_custom_object(
                KOPF_GROUP, KOPF_VERSION, namespaces[0], "kopfpeerings", _request_timeout=self.timeout
            )["items"]
        else:
            items = self.custom.list_cluster_custom_object(
                KOPF_GROUP, KOPF_VERSION, "clusterkopfpeerings", _request_timeout=self.timeout
            )["items"]
        return next((item.get("status") or {} for item in items if item["metadata"]["name"] == name), None)

    def post_event(self, stj: ObjectRef, event: Event) -> None:
        now = datetime.now(timezone.utc).isoformat()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{stj.name}.", "namespace": stj.namespace},
            "involvedObject": {
                "apiVersion": naming.API_VERSION,
                "kind": naming.KIND,
                "name": stj.name,
                "namespace": stj.namespace,
                "uid": stj.uid,
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:1024],
            "source": {"component": naming.MANAGER},
            "reportingComponent": naming.MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(stj.namespace, body, _request_timeout=self.timeout)
        except ApiException as error:  # Events are best effort
            log.warning("cannot post Event %s for %s/%s: %s", event.reason, stj.namespace, stj.name, error.reason)
