"""What bounds how many jobs the operator keeps up with (docs/benchmarks.md, "The operator at 1000 jobs"):
kopf's work per watch event (the handlers are coroutines, kopf keeps no copy of an object to diff, and
logs no line per event), the client's connections (one per thread that calls the API at once), the API
server's work per fresh read (served from its watch cache), and the round trips per decision (requests
that need not wait for each other go out together)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from types import SimpleNamespace

import kopf
import pytest

from scaletrain_operator.api import naming
from scaletrain_operator.api.job import parse_job
from scaletrain_operator.controller import cluster as cluster_module
from scaletrain_operator.controller import main
from scaletrain_operator.controller.cache import Cache
from scaletrain_operator.controller.cluster import Cluster, ObjectRef
from scaletrain_operator.controller.decision import Decision, Event
from scaletrain_operator.controller.handlers import CHILD_FOLD_SECONDS, NoDiffBase, on_pod, on_scaletrainjob
from scaletrain_operator.render.children import render_job, render_master_alias, render_service
from scaletrain_testing.jobs import base_job
from scaletrain_testing.timeouts import WORK_QUEUE_REACTION_S

NAMESPACE = "team-a"


def test_every_watch_handler_is_a_coroutine_and_none_needs_a_diff():
    """A synchronous handler costs a hand-off to kopf's thread pool per watch event; and a handler of
    changes (on.create, on.update) or a daemon would need the last handled state NoDiffBase does not keep."""
    registry = kopf.get_default_registry()
    handlers = registry._watching.get_all_handlers()
    assert {handler.id for handler in handlers} >= {"on_scaletrainjob", "on_service", "on_child_job", "on_pod"}
    assert all(inspect.iscoroutinefunction(handler.fn) for handler in handlers)
    assert registry._changing.get_all_handlers() == [] and registry._spawning.get_all_handlers() == []


def test_kopf_copies_nothing_to_diff():
    body = kopf.Body(base_job() | {"status": {"phase": "Running"}})
    storage = NoDiffBase()
    assert storage.build(body=body) == {} and storage.fetch(body=body) is None


class Queue:
    def __init__(self):
        self.added: list[tuple] = []

    def add(self, key, news=True, delay=0.0):
        self.added.append((key, news, delay))


def _memo() -> kopf.Memo:
    return kopf.Memo(cluster=SimpleNamespace(cache=Cache()), queue=Queue())


def test_an_event_goes_into_the_cache_and_queues_its_job_on_the_event_loop():
    memo = _memo()
    stj = base_job() | {"metadata": {"name": "demo", "namespace": NAMESPACE, "resourceVersion": "1"}}
    labels = {naming.LABEL_JOB_NAME: "demo"}
    pod = {"metadata": {"name": "demo-g0-0", "namespace": NAMESPACE, "resourceVersion": "2", "labels": labels}}
    asyncio.run(on_scaletrainjob(event={"type": "ADDED", "object": stj}, memo=memo))
    asyncio.run(on_pod(event={"type": "ADDED", "object": pod}, memo=memo))
    asyncio.run(on_pod(event={"type": "MODIFIED", "object": pod}, memo=memo))  # the same version again: no news
    assert memo.cluster.cache.pods.get(NAMESPACE, "demo-g0-0") is not None
    job = (NAMESPACE, "demo")
    assert memo.queue.added == [(job, True, 0.0), (job, True, CHILD_FOLD_SECONDS), (job, False, CHILD_FOLD_SECONDS)]


@pytest.fixture
def kopf_objects_level():
    logger = logging.getLogger("kopf.objects")
    before = logger.level
    yield logger
    logger.setLevel(before)


def test_kopf_logs_no_line_per_event_unless_verbose(kopf_objects_level):
    main.quiet_kopf_objects(verbose=False)
    assert not kopf_objects_level.isEnabledFor(logging.INFO)
    assert kopf_objects_level.isEnabledFor(logging.WARNING)  # kopf's warnings and errors about objects show
    main.quiet_kopf_objects(verbose=True)
    assert kopf_objects_level.level == logging.NOTSET


def test_the_client_keeps_a_connection_for_each_thread_that_calls_the_api(monkeypatch):
    def outside_a_cluster(**_):
        raise cluster_module.config.ConfigException("not in a pod")

    def kubeconfig(client_configuration):
        client_configuration.host = "https://127.0.0.1:6443"

    monkeypatch.setattr(cluster_module.config, "load_incluster_config", outside_a_cluster)
    monkeypatch.setattr(cluster_module.config, "load_kube_config", kubeconfig)
    api = cluster_module.connect(connections=25)
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 25


def test_a_fresh_read_of_the_children_is_served_from_the_api_servers_watch_cache():
    """Not older than the job's version: never a list that must be read from etcd when the server's cache
    lags, which returns every pod of the namespace."""
    queries = []

    def listed(method, path, query):
        queries.append((path, query))
        return {"metadata": {"resourceVersion": "15"}, "items": []}

    cluster = Cluster(api=None)
    cluster._request = listed
    cluster.read_children(NAMESPACE, "demo", not_older_than="12")
    assert sorted(path for path, _ in queries) == [f"/api/v1/namespaces/{NAMESPACE}/pods",
                                                    f"/api/v1/namespaces/{NAMESPACE}/services",
                                                    f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"]  # fmt: skip
    expected = [
        ("labelSelector", f"{naming.LABEL_JOB_NAME}=demo"),
        ("resourceVersion", "12"),
        ("resourceVersionMatch", "NotOlderThan"),
    ]
    assert all(query == expected for _, query in queries)


class Rounds:
    """An API server for Cluster._request that holds each request until every request of its round is in
    flight (a barrier per round; a request's round is known by what it asks for): a round made one request
    after another would never get past its first. Logs the round of each request as it starts and ends."""

    def __init__(self, *rounds: list[str]):
        self.round_of = {what: index for index, whats in enumerate(rounds) for what in whats}
        self.barriers = [threading.Barrier(len(whats), timeout=WORK_QUEUE_REACTION_S) for whats in rounds]
        self.log: list[int] = []

    def request(self, method, path, body=None, query=None, content_type=None):
        index = self.round_of[f"{method} {path.rsplit('/', 1)[-1]}"]
        self.log.append(index)
        self.barriers[index].wait()
        self.log.append(index)
        metadata = (body or {}).get("metadata", {}) | {"namespace": NAMESPACE, "resourceVersion": "7"}
        return (body or {}) | {"metadata": metadata | {"name": metadata.get("name", "demo")}}


def test_a_new_jobs_writes_go_out_in_three_rounds_and_the_job_after_what_it_needs():
    """Its two Services at once; then its Job; then its status and its Event (the status names the Job)."""
    job = parse_job(base_job() | {"metadata": {"name": "demo", "namespace": NAMESPACE, "uid": "stj-uid"}})
    decision = Decision(
        create=(render_service(job), render_master_alias(job), render_job(job, 0)),
        events=(Event("Normal", "Created", "created Job demo-g0"),),
        status={"phase": "Pending"},
    )
    server = Rounds(["POST services", "POST services"], ["POST jobs"], ["POST events", "PATCH status"])
    cluster = Cluster(api=None)
    cluster._request = server.request
    cluster.apply(ObjectRef(NAMESPACE, "demo", "stj-uid", "5"), decision)
    assert server.log == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]  # each round began once the one before it had ended


def test_requests_made_together_all_finish_and_the_first_failure_in_their_order_is_raised():
    cluster = Cluster(api=None)
    made = []

    def answers(answer):
        made.append(answer)
        return answer

    def fails(why):
        raise RuntimeError(why)

    assert cluster.at_once([lambda: answers(1), lambda: answers(2)]) == [1, 2]
    with pytest.raises(RuntimeError, match="first"):
        cluster.at_once([lambda: answers(3), lambda: fails("first"), lambda: fails("second"), lambda: answers(4)])
    assert sorted(made) == [1, 2, 3, 4]  # the others still went out
