"""A small, plain-dict client for the tests' real API server: create, get, list, patch, delete and status
writes by a short kind name. The tests read and write objects as YAML-shaped dicts, as `kubectl` shows
them, so that an assertion reads like the manifest it checks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.rest import ApiException

from .timeouts import API_REQUEST_S

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1" for the core group
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        root = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        parts = [root]
        if self.namespaced and namespace is not None:
            parts += ["namespaces", quote(namespace)]
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name))
        if subresource is not None:
            parts.append(subresource)
        return "/".join(parts)


RESOURCES = {
    "stj": Resource("scaletrain.io/v1alpha1", "scaletrainjobs"),
    "jobs": Resource("batch/v1", "jobs"),
    "pods": Resource("v1", "pods"),
    "services": Resource("v1", "services"),
    "endpointslices": Resource("discovery.k8s.io/v1", "endpointslices"),
    "events": Resource("v1", "events"),
    "serviceaccounts": Resource("v1", "serviceaccounts"),
    "namespaces": Resource("v1", "namespaces", namespaced=False),
    "nodes": Resource("v1", "nodes", namespaced=False),
    "leases": Resource("coordination.k8s.io/v1", "leases"),
    "configmaps": Resource("v1", "configmaps"),
    "secrets": Resource("v1", "secrets"),
    "resourcequotas": Resource("v1", "resourcequotas"),
    "networkpolicies": Resource("networking.k8s.io/v1", "networkpolicies"),
    "persistentvolumeclaims": Resource("v1", "persistentvolumeclaims"),
    "persistentvolumes": Resource("v1", "persistentvolumes", namespaced=False),
    "priorityclasses": Resource("scheduling.k8s.io/v1", "priorityclasses", namespaced=False),
    "workloads": Resource("scheduling.k8s.io/v1beta1", "workloads"),
    "podgroups": Resource("scheduling.k8s.io/v1beta1", "podgroups"),
    "kopfpeerings": Resource("kopf.dev/v1", "kopfpeerings"),
    "clusterkopfpeerings": Resource("kopf.dev/v1", "clusterkopfpeerings", namespaced=False),
}


class Kube:
    """Plain-dict access to the API server behind `api` (a kubernetes ApiClient)."""

    def __init__(self, api: client.ApiClient):
        self.api = api

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        prepared = self.api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self.api.call_api(*prepared, _request_timeout=API_REQUEST_S)
        response.read()
        if response.status >= 400:  # call_api returns errors; the generated API classes raise them
            raise ApiException(http_resp=response)
        return json.loads(response.data) if response.data else None

    def create(self, kind: str, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        namespace = namespace or body.get("metadata", {}).get("namespace")
        return self.request("POST", RESOURCES[kind].path(namespace), body)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", RESOURCES[kind].path(namespace, name))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        return self.request("GET", RESOURCES[kind].path(namespace), query=query)["items"]

    def patch(self, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", RESOURCES[kind].path(namespace, name), patch, content_type=MERGE_PATCH)

    def set_status(self, kind: str, namespace: str | None, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge `status` into the object's status subresource (what a controller or kubelet writes)."""
        path = RESOURCES[kind].path(namespace, name, "status")
        return self.request("PATCH", path, {"status": status}, content_type=MERGE_PATCH)

    def delete(self, kind: str, namespace: str | None, name: str, grace_period_seconds: int | None = None) -> None:
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            self.request("DELETE", RESOURCES[kind].path(namespace, name), body)
        except ApiException as error:
            if error.status != 404:
                raise
