"""The emulated cluster of tests/support/emulator.py against its three kinds of clients: the official `kubernetes`
client, kopf (as an asyncio task, in a thread, and through KopfRunner) and the real kubectl."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from support.emulator import EmulatedCluster
from support.jobs import base_job

GROUP, VERSION, PLURAL = "scaletrain.io", "v1alpha1", "scaletrainjobs"
NS = "team-a"


@pytest.fixture
def cluster() -> Any:
    with EmulatedCluster(namespaces=["default", NS]) as cluster:
        yield cluster


@pytest.fixture
def api(cluster: EmulatedCluster) -> Any:
    with cluster.api_client() as api_client:
        yield api_client


def stj(name: str = "demo", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    doc = base_job(**spec)
    doc["metadata"] = {"name": name, "namespace": NS, "labels": labels or {}}
    return doc


def batch_job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "trainer", "image": "busybox"}], "restartPolicy": "Never"}}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"template": template}}


def names(items: list[Any]) -> list[str]:
    return sorted(item["metadata"]["name"] if isinstance(item, dict) else item.metadata.name for item in items)


def test_custom_resource_with_the_client(api: Any) -> None:
    custom = client.CustomObjectsApi(api)
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, stj("a", {"team": "x"}))
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1 and meta["namespace"] == NS
    assert created["spec"]["training"]["optimizer"]["name"] == "adamw"  # the CRD's defaults are applied
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, stj("b", {"team": "y", "tier": "gold"}))

    def listed(selector: str) -> list[str]:
        return names(custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, label_selector=selector)["items"])

    assert listed("team=x") == ["a"]
    assert listed("team!=x") == ["b"]
    assert listed("team,tier=gold") == ["b"]
    assert listed("team in (x,y)") == ["a", "b"]
    assert listed("!tier") == ["a"]
    listing = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert listing["kind"] == "ScaleTrainJobList" and listing["apiVersion"] == f"{GROUP}/{VERSION}"
    with pytest.raises(ApiException) as conflict:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, stj("a"))
    assert conflict.value.status == 409

    rv = int(meta["resourceVersion"])
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"spec": {"nodes": 4}})
    assert patched["metadata"]["generation"] == 2 and int(patched["metadata"]["resourceVersion"]) > rv
    # The main resource ignores the status; a no-op write keeps the resourceVersion.
    ignored = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"status": {"phase": "Failed"}})
    assert "status" not in ignored and ignored["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    # The status subresource changes the status only, and not the generation.
    status_patch = {"status": {"phase": "Running"}, "spec": {"nodes": 8}, "metadata": {"labels": {"new": "1"}}}
    status = custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "a", status_patch)
    assert status["status"] == {"phase": "Running"}  # status fields get no defaults: the operator owns them
    assert status["spec"]["nodes"] == 4 and "new" not in status["metadata"]["labels"]
    assert status["metadata"]["generation"] == 2 and int(status["metadata"]["resourceVersion"]) > rv
    fetched = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")
    assert fetched == status
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "nope")
    assert missing.value.status == 404


def test_jobs_and_pods_with_the_client(cluster: EmulatedCluster, api: Any) -> None:
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    job = batch.create_namespaced_job(NS, batch_job("train", {"app": "t"}))
    assert job is not None and job.metadata.uid and job.metadata.generation == 1 and job.metadata.namespace == NS
    assert names(batch.list_namespaced_job(NS, label_selector="app=t").items) == ["train"]

    # The test plays the Job controller and the kubelet.
    cluster.set_status("jobs", NS, "train", {"active": 1, "failed": 1})
    owner = cluster.get("jobs", NS, "train")
    cluster.create_pod(NS, "train-0", labels={"job-name": "train"}, owner=owner)
    cluster.create_pod(NS, "train-1", labels={"job-name": "train"}, owner=owner, phase="Failed", exit_code=3)
    assert batch.read_namespaced_job_status("train", NS).status.active == 1
    before = batch.read_namespaced_job("train", NS).metadata
    after = batch.patch_namespaced_job_status("train", NS, {"status": {"succeeded": 1}})
    assert (after.status.active, after.status.succeeded) == (1, 1) and after.metadata.generation == 1
    assert int(after.metadata.resource_version) > int(before.resource_version)
    pods = core.list_namespaced_pod(NS, label_selector="job-name=train").items
    assert names(pods) == ["train-0", "train-1"]
    failed = core.list_namespaced_pod(NS, field_selector="status.phase=Failed").items
    assert [pod.status.container_statuses[0].state.terminated.exit_code for pod in failed] == [3]
    cluster.set_pod_phase(NS, "train-0", "Succeeded")
    assert core.read_namespaced_pod("train-0", NS).status.container_statuses[0].state.terminated.exit_code == 0

    suspended = batch.patch_namespaced_job("train", NS, {"spec": {"suspend": True}})  # a strategic merge patch
    assert suspended.spec.suspend is True and suspended.metadata.generation == 2
    stale = [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"}, {"op": "remove", "path": "/spec"}]
    with pytest.raises(ApiException) as invalid:
        batch.patch_namespaced_job("train", NS, stale)
    assert invalid.value.status == 422

    # batch/v1 Jobs orphan their pods by default; with a propagation policy, the pods go too.
    batch.create_namespaced_job(NS, batch_job("orphaning"))
    cluster.create_pod(NS, "orphan", owner=cluster.get("jobs", NS, "orphaning"))
    batch.delete_namespaced_job("orphaning", NS)
    assert cluster.get("pods", NS, "orphan")["metadata"].get("ownerReferences") is None
    batch.delete_namespaced_job("train", NS, propagation_policy="Background")
    assert cluster.get("jobs", NS, "train") is None
    assert names(core.list_namespaced_pod(NS).items) == ["orphan"]


def test_finalizers_and_watches(cluster: EmulatedCluster, api: Any) -> None:
    custom = client.CustomObjectsApi(api)
    doc = stj("held", {"app": "x"})
    doc["metadata"]["finalizers"] = ["example.com/cleanup"]
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, doc)
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "held")
    marked = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "held")
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["finalizers"] == ["example.com/cleanup"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "held", {"metadata": {"finalizers": None}})
    assert cluster.get("stj", NS, "held") is None
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, stj("relabelled", {"app": "x"}))
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "relabelled", {"metadata": {"labels": {"app": "y"}}}
    )

    # A watch from a resourceVersion replays what happened since; leaving the selection reads as DELETED.
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        NS,
        PLURAL,
        label_selector="app=x",
        resource_version=created["metadata"]["resourceVersion"],
        timeout_seconds=1,
    )
    events = [(event["type"], event["object"]["metadata"]["name"]) for event in stream]
    assert events == [("MODIFIED", "held"), ("DELETED", "held"), ("ADDED", "relabelled"), ("DELETED", "relabelled")]


def test_kopf_as_an_asyncio_task() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(body: Any, name: str, namespace: str, patch: Any, memo: Any, **_: Any) -> None:
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{name}-svc"}, "spec": {"ports": []}}
        kopf.adopt(service, owner=body)
        client.CoreV1Api(memo.api).create_namespaced_service(namespace, service)
        patch.status["phase"] = "Pending"

    async def scenario() -> None:
        async with EmulatedCluster(namespaces=[NS]) as cluster:
            with cluster.api_client() as api:

                @kopf.on.startup(registry=registry)
                def remember(memo: Any, **_: Any) -> None:
                    memo.api = api

                async with cluster.async_operator(registry, namespaces=[NS]):
                    cluster.create("stj", stj("demo"))
                    job = await cluster.await_until(lambda: phase_is(cluster, "demo", "Pending"), timeout=5)
                    service = cluster.get("services", NS, "demo-svc")
                    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
                    assert f"{GROUP}/last-handled-configuration" in job["metadata"]["annotations"]
                    cluster.delete("stj", NS, "demo")  # the garbage collector deletes the adopted service
                    assert cluster.get("services", NS, "demo-svc") is None
            counts = cluster.request_counts()
            assert counts["create", "services"] == 1
            assert counts["patch", f"{PLURAL}.{GROUP}/status"] == 1
            assert counts["watch", f"{PLURAL}.{GROUP}"] >= 1

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_kopf_in_a_thread_with_finalizers(cluster: EmulatedCluster, api: Any) -> None:
    registry = kopf.OperatorRegistry()
    deleted = threading.Event()

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(patch: Any, **_: Any) -> None:
        patch.status["phase"] = "Running"

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    def removed(**_: Any) -> None:
        deleted.set()

    custom = client.CustomObjectsApi(api)
    with cluster.operator(registry, namespaces=[NS]):
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, stj("guarded"))
        job = cluster.wait_until(lambda: phase_is(cluster, "guarded", "Running"))
        assert job["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "guarded")
        cluster.wait_until(lambda: cluster.get("stj", NS, "guarded") is None)
    assert deleted.is_set()


def test_kopf_runner(cluster: EmulatedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = f"""
        import kopf

        @kopf.on.startup()
        def configure(settings, **_):
            settings.scanning.disabled = True
            settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="{GROUP}")
            settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="{GROUP}")

        @kopf.on.create("{GROUP}", "{VERSION}", "{PLURAL}")
        def created(patch, **_):
            patch.status["phase"] = "Pending"
    """
    (tmp_path / "operator.py").write_text(textwrap.dedent(code))
    cluster.make_default(monkeypatch)  # kopf logs in through the kubernetes client's default kubeconfig
    args = ["run", "--standalone", f"--namespace={NS}", str(tmp_path / "operator.py")]
    # The CLI registers the file's handlers in kopf's default registry: lend it a private one, so that
    # they do not leak into the operator under test in later test modules.
    monkeypatch.setattr(
        kopf._core.intents.registries, "_default_registry", kopf._core.intents.registries.SmartOperatorRegistry()
    )
    with KopfRunner(args, timeout=20, registry=kopf.get_default_registry()) as runner:
        cluster.create("stj", stj("cli"))
        cluster.wait_until(lambda: phase_is(cluster, "cli", "Pending"), timeout=10)
    assert runner.exit_code == 0, runner.output


def test_kubectl(cluster: EmulatedCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(stj("demo", {"app": "demo"})))
    assert "scaletrainjob.scaletrain.io/demo created" in cluster.kubectl("apply", "-f", str(manifest)).stdout
    assert "unchanged" in cluster.kubectl("apply", "-f", str(manifest)).stdout
    manifest.write_text(yaml.safe_dump(stj("demo", {"app": "demo"}, nodes=4)))
    assert "configured" in cluster.kubectl("apply", "-f", str(manifest)).stdout
    assert cluster.get("stj", NS, "demo")["metadata"]["generation"] == 2

    cluster.set_status("stj", NS, "demo", {"phase": "Running", "progress": {"step": 7, "loss": 2.5}, "restarts": 1})
    lines = cluster.kubectl("get", "stj", "-n", NS).stdout.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "NODES", "STEP", "LOSS", "RESTARTS", "AGE"]
    assert lines[1].split()[:6] == ["demo", "Running", "4", "7", "2.5", "1"]

    owner = cluster.get("stj", NS, "demo")
    cluster.create("jobs", {**batch_job("demo-g1"), "metadata": {"name": "demo-g1", "namespace": NS}})
    cluster.create_pod(NS, "demo-g1-0", owner=cluster.get("jobs", NS, "demo-g1"))
    cluster.create("services", {"metadata": {"name": "demo", "namespace": NS, "ownerReferences": []}, "spec": {}})
    output = cluster.kubectl("get", "pods,jobs,svc", "-n", NS).stdout
    assert "pod/demo-g1-0" in output and "job.batch/demo-g1" in output and "service/demo" in output
    as_json = json.loads(cluster.kubectl("get", "scaletrainjob", "demo", "-n", NS, "-o", "json").stdout)
    assert as_json["metadata"]["uid"] == owner["metadata"]["uid"]
    assert "demo" in cluster.kubectl("get", "stj", "-A", "-l", "app=demo").stdout
    assert "No resources found" in cluster.kubectl("get", "stj", "-n", NS, "-l", "app=other").stderr
    assert NS in cluster.kubectl("get", "namespaces").stdout
    cluster.kubectl("delete", "-f", str(manifest))
    assert cluster.get("stj", NS, "demo") is None


def test_discovery_namespaces_and_request_counts(cluster: EmulatedCluster, api: Any) -> None:
    core = client.CoreV1Api(api)
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    assert core.get_api_resources().group_version == "v1"  # kmock says "/v1"
    core.create_namespace({"metadata": {"name": "scratch"}})
    assert "scratch" in names(core.list_namespace().items)
    cluster.create_pod("scratch", "p")
    cluster.reset_request_counts()
    core.read_namespace("scratch")
    core.delete_namespace("scratch")  # and everything in it
    assert cluster.get("pods", "scratch", "p") is None
    assert cluster.request_counts() == {("get", "namespaces"): 1, ("delete", "namespaces"): 1}


def phase_is(cluster: EmulatedCluster, name: str, phase: str) -> dict[str, Any] | None:
    obj = cluster.get("stj", NS, name)
    return obj if obj and obj.get("status", {}).get("phase") == phase else None
