"""The operator's copy of what it watches: ScaleTrainJobs, and their Services, Jobs and pods, and the Workloads
that name a job (gang placement: controller/cluster.py lets no gang start while one that is not the job's does).

Reconciles read here instead of asking the API server, as a controller-runtime controller reads its
informer caches. Two things feed it:
- kopf's event handlers (handlers.py): every watch event of the kinds it watches, deletions included; and
- the answers to the operator's own writes (cluster.py, "write-through"), so that a reconcile sees
  what the one before it did although the watch has not echoed it yet.

An object replaces the copy held only when its resourceVersion is newer: neither a watch event
overtaken by a write's answer nor the late answer to an older write rolls the cache back. A deletion
leaves a tombstone for a while, so that a late answer cannot bring the object back either. (The API
calls resourceVersions opaque; an etcd-backed API server issues them from one increasing counter,
which the server's own watch cache relies on. A version that is not a number always wins.)

What the cache cannot know is what happened while kopf was not watching: before the operator started,
while a standby replica was paused by peering, or before a watch that had to start over (410 Gone).
kopf then lists again and delivers each object as an event of type None; the handlers mark the
ScaleTrainJob of such an event that brings news as not trusted, and its next reconcile reads fresh.

The cache hands out the objects it holds, not copies: callers only read them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..api import naming
from ..policy.placement import claimed_job
from ..policy.pods import being_deleted, without_replaced
from ..render.capacity_probe import is_probe
from ..render.child_annotations import gang_generation, replaced_pods
from .decision import Observed

Key = tuple[str, str]  # namespace, name
TOMBSTONE_SECONDS = 300.0  # far longer than a write's answer or a watch event can be late


def key_of(obj: dict[str, Any]) -> Key:
    metadata = obj["metadata"]
    return metadata.get("namespace") or "", metadata["name"]


def version_of(obj: dict[str, Any]) -> int | None:
    return naming.whole_number(obj["metadata"].get("resourceVersion"))


def is_newer(candidate: int | None, held: int | None) -> bool:
    return candidate is None or held is None or candidate > held


def job_of_child(obj: dict[str, Any]) -> Key | None:
    """The ScaleTrainJob a child belongs to, by its scaletrain.io/job-name label."""
    job = (obj["metadata"].get("labels") or {}).get(naming.LABEL_JOB_NAME)
    return (key_of(obj)[0], job) if job else None


def owned_by(obj: dict[str, Any], uid: str | None) -> bool:
    """Whether `obj`'s ownerReferences name the object of `uid`."""
    return uid is not None and any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """What the operator reads of an object: all of it but managedFields, the bulk of its metadata."""
    metadata = {key: value for key, value in obj["metadata"].items() if key != "managedFields"}
    return obj | {"metadata": metadata}


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """What the operator reads of a pod: its metadata and status (phases and exits), and of its spec only
    the node it was bound to (the node a failure may be blamed on) and the PodGroup that placed it (whether
    the job's own Workload did: policy/placement.foreign_pod_group)."""
    spec = pod.get("spec") or {}
    return {
        "metadata": without_managed_fields(pod)["metadata"],
        "spec": {key: spec[key] for key in ("nodeName", "schedulingGroup") if spec.get(key)},
        "status": pod.get("status") or {},
    }


def job_claimed(workload: dict[str, Any]) -> Key | None:
    """The ScaleTrainJob a Workload names as its controller (spec.controllerRef), whoever made it."""
    job = claimed_job(workload)
    return (key_of(workload)[0], job) if job else None


def workload_summary(workload: dict[str, Any]) -> dict[str, Any]:
    """What the operator reads of a Workload that names a job: its metadata and that name."""
    return {
        "metadata": without_managed_fields(workload)["metadata"],
        "spec": {"controllerRef": workload["spec"]["controllerRef"]},
    }


class Store:
    """One kind's objects by namespace and name, indexed by the ScaleTrainJob each belongs to."""

    def __init__(
        self,
        owner_of: Callable[[dict[str, Any]], Key | None] = job_of_child,
        keep: Callable[[dict[str, Any]], dict[str, Any]] = without_managed_fields,
    ):
        self.owner_of, self._keep = owner_of, keep
        self._objects: dict[Key, dict[str, Any]] = {}
        self._owned: defaultdict[Key, set[Key]] = defaultdict(set)
        self._tombstones: OrderedDict[Key, tuple[int | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def owned_by(self, namespace: str, job: str) -> list[dict[str, Any]]:
        with self._lock:
            return [self._objects[key] for key in self._owned.get((namespace, job), ())]

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())

    def put(self, obj: dict[str, Any]) -> bool:
        """Keep `obj` if it is newer than what is held (or was deleted); whether it was news."""
        key, version = key_of(obj), version_of(obj)
        with self._lock:
            if not is_newer(version, self._known_version(key)):
                return False
            self._tombstones.pop(key, None)
            self._unindex(key)
            self._objects[key] = self._keep(obj)
            if (owner := self.owner_of(obj)) is not None:
                self._owned[owner].add(key)
            return True

    def delete(self, obj: dict[str, Any]) -> bool:
        """Forget `obj` (a DELETED event, or the answer to the operator's own delete); whether that was news.
        A held object newer than `obj` is a new one of the same name and stays."""
        key, version = key_of(obj), version_of(obj)
        with self._lock:
            held = self._objects.get(key)
            held_version = version_of(held) if held is not None else None
            if version is not None and held_version is not None and held_version > version:
                return False
            self._forget(key, version)
            return held is not None

    def replace_owned(self, owner: Key, listed: Iterable[dict[str, Any]], list_version: int | None) -> None:
        """A fresh list of everything `owner` has: keep each object, and forget what is held but was not
        listed, unless it is newer than the list (written after the list was taken)."""
        listed = list(listed)
        for obj in listed:
            self.put(obj)
        names = {key_of(obj) for obj in listed}
        with self._lock:
            for key in list(self._owned.get(owner, ())):
                if key not in names and not is_newer(version_of(self._objects[key]), list_version):
                    self._forget(key, list_version)

    def _known_version(self, key: Key) -> int | None:
        held = self._objects.get(key)
        if held is not None:
            return version_of(held)
        tombstone = self._tombstones.get(key)
        return tombstone[0] if tombstone else None

    def _unindex(self, key: Key) -> dict[str, Any] | None:
        """Take the object held at `key` (if any) out of its owner's index; returns it."""
        held = self._objects.get(key)
        if held is not None and (owner := self.owner_of(held)) is not None:
            owned = self._owned[owner]
            owned.discard(key)
            if not owned:
                del self._owned[owner]
        return held

    def _forget(self, key: Key, version: int | None) -> None:
        """Drop the object at `key` and leave a tombstone at the newest version known of it."""
        held = self._unindex(key)
        self._objects.pop(key, None)
        known = [v for v in (version, held and version_of(held), self._known_version(key)) if v is not None]
        now = time.monotonic()
        self._tombstones[key] = (max(known, default=None), now)
        self._tombstones.move_to_end(key)
        while self._tombstones and next(iter(self._tombstones.values()))[1] < now - TOMBSTONE_SECONDS:
            self._tombstones.popitem(last=False)


class Cache:
    """The stores, the children's view of one ScaleTrainJob, and which jobs may have missed events."""

    def __init__(self) -> None:
        self.scaletrainjobs = Store(owner_of=key_of)
        self.services = Store()
        self.jobs = Store()
        self.pods = Store(keep=pod_summary)
        # Every Workload that names a job in its spec.controllerRef, the job's own and anyone else's, by that job.
        self.workloads = Store(owner_of=job_claimed, keep=workload_summary)
        self._untrusted: set[Key] = set()
        self._lock = threading.Lock()

    def observed(self, namespace: str, name: str, generation_hint: int | None = None) -> Observed:
        stj = self.scaletrainjobs.get(namespace, name)
        return children_view(
            name,
            stj["metadata"].get("uid") if stj else None,
            self.services.owned_by(namespace, name),
            self.jobs.owned_by(namespace, name),
            self.pods.owned_by(namespace, name),
            generation_hint,
        )

    def distrust(self, job: Key) -> None:
        """kopf (re)listed and found news about `job`: events may have been missed."""
        with self._lock:
            self._untrusted.add(job)

    def trust(self, job: Key) -> None:
        """`job` and its children were just read fresh."""
        with self._lock:
            self._untrusted.discard(job)

    def forget(self, job: Key) -> None:
        """`job` was deleted."""
        self.trust(job)

    def trusted(self, job: Key) -> bool:
        with self._lock:
            return job not in self._untrusted


def children_view(
    name: str,
    uid: str | None,
    services: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    generation_hint: int | None,
) -> Observed:
    """A ScaleTrainJob's children as the decide layer sees them: its Services, its Jobs by gang generation
    (those not being deleted), the pods of the newest generation, and an elastic gang's capacity probe with
    its pods. Found by label, kept only when owned: a Service or Job whose ownerReferences name the
    ScaleTrainJob (`uid`), a pod owned by one of those Jobs. Anyone can put the labels on an object; only
    the API server sets a uid, so a foreign pod carrying a job's labels cannot fail its gang."""
    if uid is not None:
        services = [s for s in services if owned_by(s, uid)]
        jobs = [j for j in jobs if owned_by(j, uid)]
        job_uids = {j["metadata"].get("uid") for j in jobs}
        pods = [p for p in pods if any(owned_by(p, job_uid) for job_uid in job_uids)]
    named = {naming.service_name(name), naming.master_alias(name)}
    by_name = {s["metadata"]["name"]: s for s in services if s["metadata"]["name"] in named}
    by_generation = {}
    for job in jobs:
        if (generation := gang_generation(job)) is not None and not being_deleted(job):
            by_generation[generation] = job
    current = max(by_generation, default=generation_hint or 0)
    # The pods of the newest gang's Job; with no such Job (deleted, or not made yet), those its generation's label
    # names, as the pods of a deleted Job are while they terminate.
    job_uid = by_generation[current]["metadata"].get("uid") if current in by_generation else None
    if job_uid is not None:  # less the pods a disruption took that its Job replaces (restarts.can_restart_in_place)
        gang = without_replaced([p for p in pods if owned_by(p, job_uid)], replaced_pods(by_generation[current]))
    else:
        gang = [p for p in pods if (p["metadata"].get("labels") or {}).get(naming.LABEL_GENERATION) == str(current)]
    probes = [job for job in jobs if is_probe(job) and not being_deleted(job)]
    probe = probes[0] if probes else None
    probe_uid = probe["metadata"].get("uid") if probe is not None else None
    probe_pods = [p for p in pods if is_probe(p) and (uid is None or owned_by(p, probe_uid))]
    return Observed(services=by_name, jobs=by_generation, pods=gang, probe=probe, probe_pods=probe_pods)
