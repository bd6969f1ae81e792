"""kopf handlers: thin, level-based. Every watch event of a ScaleTrainJob, its Service, its Jobs or its
pods, or of a Workload that names it, goes into the operator's cache (cache.py); one that brings news
queues a reconcile of that ScaleTrainJob (workqueue.py: its own worker threads, one reconcile at a time
per job), which decides from the cache (reconcile.py, pure) and applies the decision (cluster.py).

The cache serves the common reconcile, so creating and running a job costs its writes and no reads.
A reconcile reads the job and its children fresh from the API server instead (`needs_fresh_look`)
when its decision cannot be undone or contradicts what the operator itself recorded, and after kopf
relisted and found news the cache may have missed (startup, a standby taking over, a restarted watch).

Configuration comes through kopf's memo: `kopf.run(memo=kopf.Memo(config=OperatorConfig(...)))`
(main.py), optionally with a `cluster` (tests pass one); the startup handler adds the rest. Nothing
is read at import time.

No finalizers: children are garbage-collected through their ownerReferences, so deleting a
ScaleTrainJob never waits for the operator. kopf's own bookkeeping goes to annotations, because
the CRD's structural schema would prune a `status.kopf` field.

Every watch event passes through kopf's event loop, one thread for all of them, so what kopf does per
event bounds how many jobs the operator keeps up with (docs/benchmarks.md, at 1000 jobs): the handlers
are coroutines that return at once (a synchronous one costs a hand-off to kopf's thread pool per
event), and kopf keeps no copy of the objects to diff (`NoDiffBase`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple

import kopf

from scaletrain_trainer.contract.validation import ProblemsError

from ..api import naming
from ..api.conditions import ControllerFailureReason, EventReason, JobPhase
from ..api.job import parse_job
from ..in_place import InPlaceGangs, WorkloadEnd
from ..policy.pods import being_deleted
from ..render.workload import WORKLOAD_GROUP, WORKLOAD_PLURAL, WORKLOAD_VERSION
from ..report_server import REVIEWERS, Report, Reports, StatusServer
from . import metrics
from .cache import Cache, Key, Store, job_claimed
from .cluster import ChildRejected, Cluster, Conflict, ForeignWorkload, Leftover, ObjectRef, connect, describe
from .decision import Decision, Event, InPlaceWord, Observed, current_gang
from .finished import decide_failed, decide_invalid, stop_what_runs
from .housekeeping import HOUSEKEEPING_CONNECTIONS, Housekeeping
from .reconcile import decide
from .reporters import Senders
from .settings import DEFAULTS, OperatorConfig
from .status import FINISHED, phase_of
from .workqueue import Outcome, WorkQueue

log = logging.getLogger(__name__)

MANAGED = {naming.LABEL_MANAGED_BY: naming.MANAGER}
MANAGED_SELECTOR = f"{naming.LABEL_MANAGED_BY}={naming.MANAGER}"
CHILDREN = (("", "v1", "services"), ("batch", "v1", "jobs"), ("", "v1", "pods"))
# Reconciles run in parallel (of different jobs). Each is a few rounds of API requests, mostly spent waiting
# for the API server: with 4, a burst of 1000 new jobs queued for minutes (docs/benchmarks.md).
RECONCILE_WORKERS = 64
API_HELPERS = RECONCILE_WORKERS  # threads making a reconcile's requests that go out together (Cluster.at_once)
CHILD_FOLD_SECONDS = 1.0  # a burst of a job's child events within this becomes one reconcile (workqueue.py)
RETRY_EVENT_AFTER = 3  # failed reconciles in a row before a Warning Event says so
LEFTOVER_RECHECK_SECONDS = 2.0  # how soon a job waiting for a child's name looks again (no event will come)
# How soon a job held back by another's Workload looks again: its deletion's watch event comes first, unless the
# watch missed it.
FOREIGN_WORKLOAD_RECHECK_SECONDS = 30.0


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config: OperatorConfig = memo.config
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.enabled = False  # the operator posts its own, meaningful Events
    # The namespaces are exact names and the chart installs the CRD before the operator starts, so
    # kopf need not list namespaces or watch CRDs: a namespaced install needs no ClusterRole (rbac.py).
    settings.scanning.disabled = True
    settings.watching.server_timeout = config.watch_timeout_seconds
    settings.networking.request_timeout = config.request_timeout_seconds
    for resource in CHILDREN:  # filtered by the API server: only the operator's own children arrive (and are cached)
        settings.watching.label_selectors[resource] = MANAGED_SELECTOR
    if "cluster" not in memo:  # a connection for each thread that calls the API: workers, helpers, housekeeping
        api = connect(RECONCILE_WORKERS + API_HELPERS + HOUSEKEEPING_CONNECTIONS + REVIEWERS)
        memo.cluster = Cluster(api, timeout_seconds=config.request_timeout_seconds, helpers=API_HELPERS)
    memo.config = config = dataclasses.replace(
        config,
        workload_api=memo.cluster.serves_workloads(),
        restarts_in_place=memo.cluster.restarts_all_containers(config.probe_namespace),
    )
    log.info("gang placement through the Workload API: %s", "served" if config.workload_api else "not served")
    in_place = config.restarts_in_place and config.status_endpoint is not None
    log.info("gang restarts in place: %s", "yes" if in_place else "no, gangs are recreated")
    memo.reports = reports = Reports()  # a reconcile reads them too: made before the first one can run
    queue = WorkQueue(
        functools.partial(reconcile, memo),
        RECONCILE_WORKERS,
        recheck_delay=CHILD_FOLD_SECONDS,
        on_error=functools.partial(report_failures, memo.cluster),
    )
    memo.queue = queue
    # A pod's word that its workload ended (in-place restarts) is decided on at once.
    memo.in_place = gangs = InPlaceGangs(on_outcome=queue.add)  # made before the first reconcile can run
    metrics.WORK_QUEUE_DEPTH.set_function(queue.depth)
    queue.start()
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    memo.housekeeping = Housekeeping(config, memo.cluster, reconcile_soon=queue.add, reports=reports)
    memo.housekeeping.start()
    memo.status_server = None
    if config.status_reports_port:
        senders = Senders(memo.cluster, memo.cluster.cache)
        active = lambda: memo.housekeeping.active  # noqa: E731
        memo.status_server = StatusServer(
            config.status_reports_port,
            config.status_reports_tls_dir,
            senders,
            reports,
            gangs,
            active,
            answered=metrics.count_status_report,
        )
        memo.status_server.start()


@kopf.on.cleanup()
def stop(memo: kopf.Memo, **_: Any) -> None:
    memo.housekeeping.stop()
    if memo.status_server is not None:
        memo.status_server.stop()
    memo.queue.stop()


class NoDiffBase(kopf.DiffBaseStorage):
    """Where kopf keeps an object's last handled state, to tell on.create/on.update handlers what changed:
    nowhere. The operator's handlers are all event handlers (level-based), which need no diff, yet kopf
    builds the state to diff (a deep copy of the whole object) on every watch event: at 1000 jobs, a
    quarter of its event loop's time. kopf diffs nothing against nothing instead."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.event(naming.GROUP, naming.VERSION, naming.PLURAL)
async def on_scaletrainjob(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    take_in(memo, memo.cluster.cache.scaletrainjobs, event)


@kopf.on.event("", "v1", "services", labels=MANAGED)
async def on_service(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    take_in(memo, memo.cluster.cache.services, event)


@kopf.on.event("batch", "v1", "jobs", labels=MANAGED)
async def on_child_job(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    take_in(memo, memo.cluster.cache.jobs, event)


@kopf.on.event("", "v1", "pods", labels=MANAGED)
async def on_pod(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    take_in(memo, memo.cluster.cache.pods, event)


@kopf.on.event(WORKLOAD_GROUP, WORKLOAD_VERSION, WORKLOAD_PLURAL)
async def on_workload(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """Every Workload, not only the operator's: anyone's may name a job in its spec.controllerRef, which holds the
    job's next gang back (cluster.py), and its deletion lets it start. Those that name no job are not kept (the
    name is immutable); where the API is not served, kopf says so once and watches nothing."""
    if job_claimed(event["object"]) is not None:
        take_in(memo, memo.cluster.cache.workloads, event)


def take_in(memo: kopf.Memo, store: Store, event: dict[str, Any]) -> None:
    """Keep the cache current, and queue a reconcile of the ScaleTrainJob the object belongs to (a child's
    after a fold window). An event that brings no news (the echo of the operator's own write, a relisted
    object it holds) reconciles only a job that has not settled (workqueue.py). Called on kopf's event
    loop: it takes only locks that are held for a moment (the cache's, the queue's), and never calls the
    API."""
    obj, kind, cache = event["object"], event["type"], memo.cluster.cache
    news = store.delete(obj) if kind == "DELETED" else store.put(obj)
    key = store.owner_of(obj)
    if key is None:
        return
    if kind == "DELETED" and store is cache.scaletrainjobs:
        cache.forget(key)
        memo.queue.forget(key)
        memo.in_place.forget(key)
        return
    if kind is None and news:  # kopf listed (again) and found a change: it may have missed events
        cache.distrust(key)
    memo.queue.add(key, news, delay=0.0 if store is cache.scaletrainjobs else CHILD_FOLD_SECONDS)


class Reconciled(NamedTuple):
    outcome: Outcome
    recheck_after: float | None = None  # seconds until a timeout the decision waits on passes


def reconcile(memo: kopf.Memo, key: Key) -> Outcome:
    """Bring one ScaleTrainJob's children and status in line with its spec (the work queue runs one at a
    time per job). A decision that waits on a timeout (scheduleTimeoutSeconds) has the job queued again
    for when it passes, as controller-runtime's RequeueAfter: no watch event may come by then. Each
    reconcile asks again, so an operator restart or a lost timer costs nothing."""
    started = time.perf_counter()
    try:
        reconciled = _reconcile(memo.cluster, *key, settings=memo.config, reports=memo.reports, in_place=memo.in_place)
    except Conflict as stale:  # decided from an old copy; the newer one's event reconciles it again
        log.info("not applied: %s", stale)
        return Outcome.WAITING
    finally:
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
    if reconciled.recheck_after is not None:
        memo.queue.add(key, delay=reconciled.recheck_after)
    return reconciled.outcome


def report_failures(cluster: Cluster, key: Key, failures: int, error: Exception) -> None:
    """After RETRY_EVENT_AFTER failed reconciles in a row (each retried after a backoff), a Warning Event
    says why, once; it may not get through either, when the API server is what fails."""
    if failures == RETRY_EVENT_AFTER:
        message = f"reconciling failed {failures} times in a row and is retried with backoff: {describe(error)}"
        uid = (cluster.cache.scaletrainjobs.get(*key) or {}).get("metadata", {}).get("uid")
        cluster.post_event(ObjectRef(*key, uid), Event("Warning", EventReason.API_RETRYING, message))


def _reconcile(
    cluster: Cluster,
    namespace: str,
    name: str,
    settings: OperatorConfig = DEFAULTS,
    reports: Reports | None = None,
    in_place: InPlaceGangs | None = None,
) -> Reconciled:
    cache, key, now = cluster.cache, (namespace, name), datetime.now(timezone.utc)
    report = reports.newest(key) if reports is not None else None
    said = functools.partial(in_place.outcomes, key) if in_place is not None else None
    stj = cache.scaletrainjobs.get(namespace, name)
    if (absent := left_alone(cache, key, stj)) is not None:
        return Reconciled(absent)
    # A finished job's decision depends on its children only to delete the Job of a gang that could not be
    # scheduled, which is made again from fresh reads (needs_fresh_look), so an untrusted cache serves it too.
    if cache.trusted(key) or phase_of(stj) in FINISHED:
        decision = decide_from(stj, functools.partial(cache.observed, namespace, name), now, settings, report, said)
        if not needs_fresh_look(stj, decision):
            return carry_out(cluster, stj, decision, in_place)
    # A fresh read: GET the job, and LIST its Service, Jobs and pods (only what the decision reads) as of no
    # earlier than the job's version.
    stj = cluster.read_scaletrainjob(namespace, name)
    if (absent := left_alone(cache, key, stj)) is not None:
        return Reconciled(absent)
    version = stj["metadata"]["resourceVersion"]
    observe = functools.partial(cluster.read_children, namespace, name, not_older_than=version)
    decision = decide_from(stj, observe, now, settings, report, said)
    cache.trust(key)
    return carry_out(cluster, stj, decision, in_place)


def left_alone(cache: Cache, key: Key, stj: dict[str, Any] | None) -> Outcome | None:
    """How a reconcile ends for a job that is not there to reconcile (None: it is there). Gone: deleted,
    or a child's event came before the job's own, which reconciles it then. Being deleted: its children
    go with it."""
    if stj is None:
        cache.forget(key)
        return Outcome.GONE
    return Outcome.SETTLED if being_deleted(stj) else None


def decide_from(
    stj: dict[str, Any],
    observe: Callable[[int | None], Observed],
    now: datetime,
    settings: OperatorConfig = DEFAULTS,
    report: Report | None = None,
    said: Callable[[int], Mapping[int, WorkloadEnd]] | None = None,
) -> Decision:
    """The decision for the stored ScaleTrainJob `stj`, its children read by `observe(generation_hint)`
    (not at all for an invalid spec), the newest report its script pushed, if any, and what the agents of a gang
    restarted in place said of workloads that ended (`said(gang_generation)`, by rank)."""
    stored_status, spec_generation = stj.get("status") or {}, stj["metadata"].get("generation")
    hint = naming.named_gang(stj["metadata"]["name"], stored_status)
    try:
        job = parse_job(stj)
    except ProblemsError as error:
        failing = decide_invalid(error.problems, stored_status, spec_generation, now)
        if failing.changes_nothing and hint is not None:  # failed already: stop what still runs of its gang
            queue = naming.queue_of((stj.get("spec") or {}).get("queueName"), stj["metadata"].get("labels"))
            return stop_what_runs(observe(hint), queue, spec_generation)
        return failing
    observed = dataclasses.replace(observe(hint), report=report)
    if said is not None and (gang_generation := current_gang(hint, observed)) is not None:
        observed = dataclasses.replace(observed, said=said(gang_generation))
    try:
        return decide(job, observed, now, settings)
    except Exception as error:  # pure code on a valid spec: what it cannot take fails this job alone, once
        log.exception("deciding %s/%s failed", job.metadata.namespace, job.name)
        message = (
            f"the operator cannot reconcile this spec ({type(error).__name__}: {error}); its log has the details. "
            "Change the spec, or report this as a bug"
        )
        return decide_failed(ControllerFailureReason.RECONCILE_ERROR, message, stored_status, spec_generation, now)


def needs_fresh_look(stj: dict[str, Any], decision: Decision) -> bool:
    """Whether `decision`, made from the cache, must be made again from fresh reads before it is carried
    out. So it is when it cannot be undone: it deletes a Job (a gang restart, counted against
    maxRestarts) or finishes the job (a finished job is never touched again). And when it contradicts
    what the operator itself recorded: it creates a child of a job that was started (the child should
    exist; creating a Job deleted a moment ago would start a stray gang), or it changes the phase the
    operator reported (e.g. back to Pending from Running, for pods the cache lacks). The first decision
    about a new job, and every one that only updates counts or patches a Job in place, are carried out
    from the cache; a status written from a stale copy is refused by its precondition (cluster.py)."""
    before = phase_of(stj)
    after = (decision.status or {}).get("phase", before)
    irreversible = bool(decision.delete_child_jobs) or (after in FINISHED and after != before)
    contradicting = before is not None and (decision.creates or after != before)
    return irreversible or contradicting


def tell(in_place: InPlaceGangs | None, stj: dict[str, Any], word: InPlaceWord | None) -> None:
    """The in-place channel's word for the gang of `stj`, where it restarts in place."""
    if in_place is None or word is None:
        return
    key = (stj["metadata"]["namespace"], stj["metadata"]["name"])
    if word.ending:
        in_place.end(key, word.generation)
    else:
        in_place.want(key, word.generation, word.ranks, word.not_before)


def say_waiting(cluster: Cluster, stj: dict[str, Any], message: str) -> None:
    """The job waits for a child's name: its status says so (Pending, if it had no phase yet)."""
    status = stj.get("status") or {}
    if status.get("message") != message:
        cluster.patch_status(ObjectRef.of(stj), {"phase": status.get("phase") or JobPhase.PENDING, "message": message})


def carry_out(
    cluster: Cluster, stj: dict[str, Any], decision: Decision, in_place: InPlaceGangs | None = None
) -> Reconciled:
    """Apply `decision`; a child the API server refuses for good fails the job, with the server's reason. Then
    tell a gang that restarts in place what it is to run (its Job says so now)."""
    if decision.changes_nothing:
        tell(in_place, stj, decision.in_place)
        return Reconciled(Outcome.SETTLED, decision.recheck_after)
    try:
        cluster.apply(ObjectRef.of(stj), decision)
    except Leftover as leftover:  # no failure: the name frees up by itself
        say_waiting(cluster, stj, str(leftover))
        return Reconciled(Outcome.WAITING, LEFTOVER_RECHECK_SECONDS)
    except ForeignWorkload as claimed:  # no failure either: the job goes on once that Workload is deleted
        cluster.post_event(ObjectRef.of(stj), claimed.event)
        say_waiting(cluster, stj, claimed.event.message)
        return Reconciled(Outcome.WAITING, FOREIGN_WORKLOAD_RECHECK_SECONDS)
    except ChildRejected as rejected:
        status, spec_generation = stj.get("status") or {}, stj["metadata"].get("generation")
        decision = decide_failed(rejected.reason, rejected.message, status, spec_generation, datetime.now(timezone.utc))
        cluster.apply(ObjectRef.of(stj), decision)
    tell(in_place, stj, decision.in_place)
    metrics.count(decision)
    return Reconciled(Outcome.ACTED, decision.recheck_after)
