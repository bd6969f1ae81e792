"""`scaletrain convert`: Kubeflow PyTorchJobs and TrainJobs (with their runtime) become ScaleTrainJobs
that validate and render; what is not carried over is listed by its source path; input that cannot be
converted gets one line per problem naming the field, and no input ends in a traceback."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.convert import Conversion, ConversionError, convert
from scaletrain_operator.render.children import render_children
from scaletrain_testing.cli import run_cli
from scaletrain_testing.kube_schema import schema_errors
from scaletrain_testing.kubeflow_jobs import (
    CONVERT_FIXTURES,
    every_path,
    fixture,
    pod_override,
    pytorchjob,
    read,
    replaced,
    trainjob,
)
from scaletrain_trainer.contract.documents import load_documents

KUBERNETES_VERSION = "1.37"  # the first with the Workload API (scheduling.k8s.io/v1beta1)
# Values of the wrong shape for any field: the conversion must name the field or carry on, never crash.
WRONG_SHAPES = ([], {}, "x", 7, None)


def _unmapped(conversion: Conversion) -> dict[str, str]:
    return {str(finding.where): finding.message for finding in conversion.unmapped}


def _errors(documents) -> dict[str, str]:
    with pytest.raises(ConversionError) as caught:
        convert(documents)
    return {str(finding.where): finding.message for finding in caught.value.findings}


def _rendered_job(children: list[dict]) -> dict:
    """The one Job among the rendered children (after the Services)."""
    (job,) = [child for child in children if child["kind"] == "Job"]
    return job


def _container(job: dict, name: str = "trainer") -> dict:
    (container,) = [c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return container


@pytest.mark.parametrize("path", CONVERT_FIXTURES, ids=lambda p: p.name)
def test_each_fixture_converts_to_a_job_that_validates_and_renders(path, crd_schema):
    conversion = convert(read(path))
    assert schema_errors(crd_schema, conversion.job) == []  # the API server's schema takes it
    job = parse_job(conversion.job)
    children = render_children(job)
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    trainer = _container(_rendered_job(children))
    assert trainer["image"] == job.spec.image and trainer["command"] == job.spec.command


def test_mnist_keeps_its_size_gpus_command_and_annotations():
    conversion = convert(fixture("pytorchjob-mnist"))
    assert conversion.job["metadata"] == {"name": "mnist-ddp", "namespace": "kubeflow"}
    assert conversion.job["spec"] == {
        "image": "example.com/ml/pytorch-mnist:1.4",
        "imagePullPolicy": "Always",
        "command": ["python3", "/opt/mnist/mnist.py", "--epochs=2"],
        "args": ["--backend", "nccl"],
        "nodes": 3,  # the Master and two Workers
        "gpusPerNode": 1,
        "masterPort": 23456,  # the PyTorchJob controller's default pytorchjob-port
        "securityContext": {"runAsNonRoot": False},
        "podTemplate": {"metadata": {"annotations": {"sidecar.istio.io/inject": "false"}}},
    }
    assert _unmapped(conversion).keys() == {"spec.pytorchReplicaSpecs.Worker.restartPolicy"}


def test_cpu_demo_takes_nproc_per_node_from_its_string():
    spec = convert(fixture("pytorchjob-cpu-demo")).job["spec"]
    assert (spec["nodes"], spec["procsPerNode"], spec["masterPort"]) == (2, 2, 23456)
    assert "gpusPerNode" not in spec and spec["command"] == ["torchrun", "demo.py"]


def test_elastic_echo_reports_what_a_fixed_gang_cannot_do():
    conversion = convert(fixture("pytorchjob-elastic-echo"))
    spec = conversion.job["spec"]
    assert (spec["nodes"], spec["imagePullPolicy"]) == (2, "IfNotPresent")
    assert spec["env"] == [{"name": "LOGLEVEL", "value": "DEBUG"}]
    unmapped = _unmapped(conversion)
    # maxReplicas equals the gang and c10d is what the rendered env serves: nothing lost there.
    assert unmapped.keys() == {"spec.elasticPolicy.minReplicas", "spec.elasticPolicy.maxRestarts"}
    assert "fixed gang" in unmapped["spec.elasticPolicy.minReplicas"]
    assert "PET_MAX_RESTARTS" in unmapped["spec.elasticPolicy.maxRestarts"]


def test_a_full_pytorchjob_maps_each_field_to_its_place():
    conversion = convert(fixture("pytorchjob-full"))
    metadata, spec = conversion.job["metadata"], conversion.job["spec"]
    assert metadata == {
        "name": "llm-finetune",
        "namespace": "research",
        "labels": {"team": "research"},  # the queue label became queueName; uid and resourceVersion are gone
        "annotations": {"example.com/owner": "alice"},
    }
    assert spec["queueName"] == "team-a-gpus"
    assert (spec["nodes"], spec["gpusPerNode"], spec["masterPort"]) == (4, 8, 29400)
    assert "procsPerNode" not in spec  # auto with GPUs: one process per GPU, ScaleTrain's default
    assert (spec["maxRestarts"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (4, 86400, 3600)
    assert spec["resources"] == {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"memory": "480Gi"}}
    assert [var["name"] for var in spec["env"]] == ["HF_TOKEN", "NCCL_DEBUG"]
    assert spec["env"][0]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert [volume["name"] for volume in spec["volumes"]] == ["data", "checkpoints"]
    assert spec["volumeMounts"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "checkpoints", "mountPath": "/checkpoints"},
    ]
    assert spec["shmSize"] == "64Gi"  # the emptyDir mounted at /dev/shm
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert (spec["priorityClassName"], spec["serviceAccountName"]) == ("high-priority", "trainer")
    assert spec["securityContext"] == {"runAsNonRoot": False, "fsGroup": 1000}
    template = spec["podTemplate"]
    assert template["metadata"] == {"labels": {"app": "llm-finetune"}}
    assert [c["name"] for c in template["spec"]["containers"]] == ["trainer", "log-shipper"]
    assert template["spec"]["containers"][0] == {
        "name": "trainer",
        "workingDir": "/workspace",
        "livenessProbe": {"exec": {"command": ["true"]}},
    }
    assert [c["name"] for c in template["spec"]["initContainers"]] == ["fetch-tokenizer"]
    assert template["spec"]["hostIPC"] is True
    assert template["spec"]["securityContext"] == {"supplementalGroups": [2000]}
    containers = "spec.pytorchReplicaSpecs.{}.template.spec.containers[0]"
    assert _unmapped(conversion).keys() == {
        containers.format("Master") + ".resources.limits.memory",
        containers.format("Worker") + ".env[1]",
        "spec.pytorchReplicaSpecs.Worker.restartPolicy",
        "spec.runPolicy.cleanPodPolicy",
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "spec.runPolicy.schedulingPolicy.queue",
    }
    assert (
        '"512Gi" here, "480Gi" there' in _unmapped(conversion)[containers.format("Master") + ".resources.limits.memory"]
    )
    assert "MASTER_ADDR is set by ScaleTrain" in _unmapped(conversion)[containers.format("Worker") + ".env[1]"]


def test_a_full_pytorchjob_renders_its_rank_layout_and_pod():
    job = parse_job(convert(fixture("pytorchjob-full")).job)
    rendered = _rendered_job(render_children(job))
    pod = rendered["spec"]["template"]["spec"]
    trainer = _container(rendered)
    env = {var["name"]: var.get("value") for var in trainer["env"]}
    assert (env["MASTER_PORT"], env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == ("29400", "32", "8")
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8" and trainer["workingDir"] == "/workspace"
    assert [c["name"] for c in pod["containers"]] == ["trainer", "log-shipper"] and pod["hostIPC"] is True
    assert rendered["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-gpus"


def test_a_trainjob_takes_its_trainer_over_the_runtime():
    conversion = convert(fixture("trainjob-torch-distributed"))
    spec = conversion.job["spec"]
    assert spec["image"] == "example.com/ml/llama-sft:0.9"
    assert (spec["command"], spec["args"]) == (["torchrun", "/workspace/sft.py"], ["--lr", "2e-5"])
    assert (spec["nodes"], spec["gpusPerNode"]) == (2, 4)  # numNodes over the runtime's 1
    assert "procsPerNode" not in spec and "masterPort" not in spec  # auto with GPUs; Trainer's port is 29500 too
    assert spec["resources"] == {"requests": {"cpu": "16", "memory": "128Gi"}, "limits": {"memory": "128Gi"}}
    assert spec["env"] == [{"name": "WANDB_MODE", "value": "offline"}]
    assert conversion.unmapped == []


def test_a_trainjob_on_cpu_counts_processes_from_its_cpu_limit_and_reports_the_runtime_steps():
    conversion = convert(fixture("trainjob-cpu-runtime"))
    spec = conversion.job["spec"]
    assert (spec["nodes"], spec["procsPerNode"]) == (3, 4)  # auto on CPU: Kubeflow Trainer's CPU-limit rule
    assert (spec["maxRestarts"], spec["suspend"], spec["queueName"]) == (2, True, "cpu-queue")
    assert spec["image"] == "example.com/ml/tabular:1.2" and spec["command"] == ["torchrun", "/workspace/train.py"]
    assert spec["volumeMounts"] == [{"name": "initializer", "mountPath": "/workspace/dataset"}]
    runtime = "TrainingRuntime torch-cpu spec"
    assert _unmapped(conversion).keys() == {
        "spec.initializer",
        f"{runtime}.template.spec.replicatedJobs[0]",
        f"{runtime}.template.spec.replicatedJobs[1].dependsOn",
        f"{runtime}.podGroupPolicy",
    }


@pytest.mark.parametrize(
    "job, expected",
    [
        (pytorchjob(nprocPerNode=4), {"procsPerNode": 4}),
        (pytorchjob({"resources": {"limits": {"amd.com/gpu": "2"}}}), {"gpusPerNode": 2, "gpuResource": "amd.com/gpu"}),
        (pytorchjob(elasticPolicy={"nProcPerNode": 3}), {"procsPerNode": 3}),
        (pytorchjob(elasticPolicy={"rdzvPort": 29400, "rdzvBackend": "c10d"}), {"masterPort": 29400}),
        (pytorchjob({"ports": [{"name": "pytorchjob-port", "containerPort": 30000}]}), {"masterPort": 30000}),
        (pytorchjob(), {"maxRestarts": 0}),  # restartPolicy Never: the source restarts nothing
        (pytorchjob(runPolicy={"backoffLimit": 2, "suspend": True}), {"maxRestarts": 2, "suspend": True}),
        (pytorchjob(pod={"serviceAccount": "old-name"}), {"serviceAccountName": "old-name"}),
        (
            pytorchjob(pod={"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}),
            {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}},
        ),
    ],
)
def test_pytorchjob_fields_map_to_their_scaletrain_field(job, expected):
    spec = convert([job]).job["spec"]
    assert {key: spec.get(key) for key in expected} == expected


def test_replica_types_are_read_in_any_case_as_the_controller_does():
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"] = {"worker": job["spec"]["pytorchReplicaSpecs"]["Worker"] | {"replicas": 3}}
    assert convert([job]).job["spec"]["nodes"] == 3


@pytest.mark.parametrize(
    "job, path, fragment",
    [
        (pytorchjob(nprocPerNode="auto"), "spec.nprocPerNode", "one process per CPU core of the node"),
        (pytorchjob(nprocPerNode="gpu"), "spec.nprocPerNode", "gpu without GPUs"),
        (
            pytorchjob({"resources": {"limits": {"nvidia.com/gpu": 2}}}, nprocPerNode="cpu"),
            "spec.nprocPerNode",
            "one per GPU",
        ),
        (pytorchjob(runPolicy={"backoffLimit": 500}), "spec.runPolicy.backoffLimit", "at most 100"),
        (pytorchjob(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}), "spec.runPolicy.managedBy", "operator"),
        (pytorchjob(elasticPolicy={"rdzvBackend": "etcd"}), "spec.elasticPolicy.rdzvBackend", "rank-0 pod"),
        (
            pytorchjob({"command": ["torchrun", "--rdzv-backend=etcd", "t.py"]}, elasticPolicy={"rdzvBackend": "etcd"}),
            "spec.elasticPolicy.rdzvBackend",
            "rank-0 pod",
        ),
        (pytorchjob(elasticPolicy={"metrics": []}), "spec.elasticPolicy.metrics", "autoscaling"),
        (pytorchjob(surprise=1), "spec.surprise", "not a PyTorchJob spec field"),
        (pytorchjob({"debugMode": True}), "{worker}.containers[0].debugMode", "not a core/v1 Container field"),
        (
            pytorchjob({"env": [{"name": "WORLD_SIZE", "value": "8"}]}),
            "{worker}.containers[0].env[0]",
            "set by ScaleTrain",
        ),
        (pytorchjob({"env": [{"name": "RANK", "value": "0"}]}), "{worker}.containers[0].env[0]", "set by ScaleTrain"),
        (
            pytorchjob({"securityContext": {"privileged": True}}),
            "{worker}.containers[0].securityContext.privileged",
            "false",
        ),
        (
            pytorchjob(pod={"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
            "{worker}.securityContext.seccompProfile.type",
            "RuntimeDefault",
        ),
        (pytorchjob(pod={"hostname": "fixed"}), "{worker}.hostname", "NAME-g<G>-<index>"),
        (pytorchjob(pod={"restartPolicy": "OnFailure"}), "{worker}.restartPolicy", "whole gang"),
        (
            pytorchjob(pod={"automountServiceAccountToken": True}),
            "{worker}.automountServiceAccountToken",
            "serviceAccountName",
        ),
        (pytorchjob(pod={"fancyScheduling": {}}), "{worker}.fancyScheduling", "not a core/v1 PodSpec field"),
        (
            pytorchjob(
                {"volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]},
                pod={"volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]},
            ),
            "{worker}.volumes[0]",
            "set shmSize",
        ),
    ],
)
def test_what_cannot_be_carried_over_is_reported_at_its_source_path(job, path, fragment):
    unmapped = _unmapped(convert([job]))
    path = path.format(worker="spec.pytorchReplicaSpecs.Worker.template.spec")
    assert path in unmapped, unmapped
    assert fragment in unmapped[path]


def test_a_c10d_rendezvous_the_controller_set_is_reported_as_the_static_one_it_becomes():
    conversion = convert([pytorchjob({"command": ["torchrun", "train.py"]}, elasticPolicy={"rdzvBackend": "c10d"})])
    message = _unmapped(conversion)["spec.elasticPolicy.rdzvBackend"]
    assert message.startswith('"c10d": the PyTorchJob controller set PET_RDZV_BACKEND to it')
    assert "static rendezvous" in message and "add env PET_RDZV_BACKEND=c10d" in message
    # The fix it names converts, and keeps c10d without a report.
    fixed = pytorchjob(
        {"command": ["torchrun", "train.py"], "env": [{"name": "PET_RDZV_BACKEND", "value": "c10d"}]},
        elasticPolicy={"rdzvBackend": "c10d"},
    )
    conversion = convert([fixed])
    assert "spec.elasticPolicy.rdzvBackend" not in _unmapped(conversion)
    assert conversion.job["spec"]["env"] == [{"name": "PET_RDZV_BACKEND", "value": "c10d"}]


@pytest.mark.parametrize(
    "launch",
    [
        {"command": ["torchrun", "--rdzv-backend=c10d", "train.py"]},
        {"command": ["python", "-m", "torch.distributed.run"], "args": ["--rdzv_backend", "c10d", "train.py"]},
        {"command": ["bash", "-c", "torchrun --rdzv-backend c10d train.py"]},
    ],
)
def test_a_c10d_rendezvous_the_command_picks_itself_is_kept_without_a_report(launch):
    conversion = convert([pytorchjob(launch, elasticPolicy={"rdzvBackend": "c10d"})])
    assert "spec.elasticPolicy.rdzvBackend" not in _unmapped(conversion)


def test_a_master_difference_shows_both_values_whole():
    worker_args = ["--epochs", "10", "--batch-size", "64", "--lr", "0.01", "--log-interval", "10", "--backend", "nccl"]
    master_args = [*worker_args, "--save-model"]
    job = pytorchjob()
    replica_specs = job["spec"]["pytorchReplicaSpecs"]
    replica_specs["Worker"]["template"]["spec"]["containers"][0]["args"] = worker_args
    replica_specs["Master"]["template"]["spec"]["containers"][0]["args"] = master_args
    message = _unmapped(convert([job]))["spec.pytorchReplicaSpecs.Master.template.spec.containers[0].args"]
    here, there = json.dumps(master_args), json.dumps(worker_args)
    assert message == f"differs from Worker's ({here} here, {there} there): the Worker's is kept"


def test_a_template_difference_between_master_and_worker_names_the_field_and_keeps_the_workers():
    job = pytorchjob()
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    master["args"] = ["--save-model"]
    conversion = convert([job])
    assert "args" not in conversion.job["spec"]
    message = _unmapped(conversion)["spec.pytorchReplicaSpecs.Master.template.spec.containers[0].args"]
    assert message == "differs from Worker's ([\"--save-model\"] here, unset there): the Worker's is kept"


@pytest.mark.parametrize(
    "trainer, ml_policy, expected",
    [
        ({"numProcPerNode": 2}, None, {"procsPerNode": 2, "nodes": 1}),
        ({"numNodes": 4}, {"numNodes": 2, "torch": {"numProcPerNode": 3}}, {"procsPerNode": 3, "nodes": 4}),
        ({}, {"numNodes": 2}, {"procsPerNode": None, "nodes": 2}),
        ({"resourcesPerNode": {"requests": {"cpu": "1500m"}}}, None, {"procsPerNode": 2}),  # rounded up
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}, None, {"procsPerNode": None, "gpusPerNode": 8}),
        (
            {"image": "mine:1", "env": [{"name": "A", "value": "1"}]},
            None,
            {"image": "mine:1", "env": [{"name": "A", "value": "1"}]},
        ),
    ],
)
def test_trainjob_fields_override_the_runtime_as_kubeflow_trainer_does(trainer, ml_policy, expected):
    spec = convert(trainjob(trainer, ml_policy)).job["spec"]
    assert {key: spec.get(key) for key in expected} == expected


def test_a_trainjob_takes_its_pod_template_overrides_where_they_map():
    conversion = convert(fixture("trainjob-pod-overrides"))
    spec = conversion.job["spec"]
    # The runtime's node container mounts the dataset volume only the override supplies.
    assert spec["volumes"] == [{"name": "dataset", "persistentVolumeClaim": {"claimName": "lora-dataset"}}]
    assert spec["volumeMounts"] == [{"name": "dataset", "mountPath": "/data", "readOnly": True}]
    assert spec["shmSize"] == "16Gi"  # the override's emptyDir, mounted at /dev/shm by its container override
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "g6.12xlarge"}
    assert spec["serviceAccountName"] == "trainer"
    assert spec["podTemplate"] == {"metadata": {"labels": {"team": "nlp"}}}
    unmapped = _unmapped(conversion)
    assert unmapped.keys() == {
        "ClusterTrainingRuntime torch-with-dataset spec.template.spec.replicatedJobs[0]",
        "spec.podTemplateOverrides[1].spec.nodeSelector",  # the dataset initializer's
    }
    assert (
        "targets dataset-initializer, not the trainer nodes"
        in unmapped["spec.podTemplateOverrides[1].spec.nodeSelector"]
    )


def test_pod_overrides_merge_over_the_runtime_as_a_strategic_merge_patch_does():
    runtime_pod = {
        "nodeSelector": {"pool": "gpu", "zone": "a"},
        "tolerations": [{"key": "old", "operator": "Exists"}],
        "volumes": [{"name": "cache", "emptyDir": {}}],
    }
    override = {
        "nodeSelector": {"zone": "b"},
        "tolerations": [{"key": "new", "operator": "Exists"}],
        "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "cache"}}],
    }
    for key, value in (("podTemplateOverrides", {"spec": override}), ("podSpecOverrides", override)):
        overrides = [{"targetJobs": [{"name": "node"}], **value}]
        spec = convert(trainjob(pod=runtime_pod, **{key: overrides})).job["spec"]
        assert spec["nodeSelector"] == {"pool": "gpu", "zone": "b"}, key  # a map merges key by key
        assert spec["tolerations"] == override["tolerations"], key  # a list without a merge key is replaced
        assert spec["volumes"] == override["volumes"], key  # a volume of the same name is replaced


OVERRIDE = "spec.podTemplateOverrides[0]"


@pytest.mark.parametrize(
    "documents, path, fragment",
    [
        (
            trainjob(podTemplateOverrides=[pod_override({"containers": [{"name": "sidecar", "env": []}]})]),
            f"{OVERRIDE}.spec.containers[0]",
            "no containers entry named sidecar",
        ),
        (
            trainjob(podTemplateOverrides=[pod_override({"containers": [{"name": "node", "image": "other:1"}]})]),
            f"{OVERRIDE}.spec.containers[0].image",
            "not a field of a container override",
        ),
        (
            trainjob(podTemplateOverrides=[pod_override({"hostNetwork": True})]),
            f"{OVERRIDE}.spec.hostNetwork",
            "not a field of a pod override's spec",
        ),
        (
            trainjob(podTemplateOverrides=[pod_override(metadata={"name": "fixed"})]),
            f"{OVERRIDE}.metadata.name",
            "not a field of a pod override's metadata",
        ),
        (
            trainjob(podTemplateOverrides=[pod_override({"nodeSelector": {"a": "b"}}, ("node", "launcher"))]),
            f"{OVERRIDE}.targetJobs[1]",
            "launcher: ScaleTrain runs the trainer nodes (node) only",
        ),
        (
            trainjob(podSpecOverrides=[{"targetJobs": [{"name": "launcher"}], "tolerations": []}]),
            "spec.podSpecOverrides[0].tolerations",
            "targets launcher, not the trainer nodes (node)",
        ),
        # What an override supplies and ScaleTrain cannot keep is reported where the override says it.
        (
            trainjob(
                podTemplateOverrides=[
                    pod_override(
                        {
                            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                            "containers": [
                                {"name": "node", "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}
                            ],
                        }
                    )
                ]
            ),
            f"{OVERRIDE}.spec.volumes[0]",
            "set shmSize",
        ),
        (
            trainjob(
                podTemplateOverrides=[
                    pod_override({"containers": [{"name": "node", "env": [{"name": "MASTER_ADDR", "value": "x"}]}]})
                ]
            ),
            f"{OVERRIDE}.spec.containers[0].env[0]",
            "MASTER_ADDR is set by ScaleTrain",
        ),
    ],
)
def test_what_a_pod_override_cannot_carry_over_is_reported_at_its_field(documents, path, fragment):
    unmapped = _unmapped(convert(documents))
    assert path in unmapped, unmapped
    assert fragment in unmapped[path]


def test_a_trainjob_without_resources_reports_auto_on_cpu():
    conversion = convert(trainjob())
    assert "procsPerNode" not in conversion.job["spec"]
    path = "ClusterTrainingRuntime torch-distributed spec.mlPolicy.torch.numProcPerNode"
    assert "one process per CPU core" in _unmapped(conversion)[path]


WORKER = "spec.pytorchReplicaSpecs.Worker"
WORKER_POD = ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec")
RUNTIME = "ClusterTrainingRuntime torch-distributed"


@pytest.mark.parametrize(
    "documents, path, fragment",
    [
        (
            [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}],
            "kind",
            "found Deployment web",
        ),
        ([pytorchjob() | {"kind": "TFJob"}], "kind", "convert takes a PyTorchJob"),
        ([["a", "list"]], "kind", "found a list"),
        (
            [pytorchjob() | {"apiVersion": "kubeflow.org/v1beta2"}],
            "apiVersion",
            "convert reads PyTorchJob kubeflow.org/v1",
        ),
        ([pytorchjob(), pytorchjob()], "kind", "convert one job per file"),
        (trainjob()[:1], "spec.runtimeRef", f"{RUNTIME} is not in the input"),
        (trainjob(ml_policy={"mpi": {"numProcPerNode": 1}}), f"{RUNTIME} spec.mlPolicy.mpi", "not a torch runtime"),
        (
            replaced(trainjob(), (1, "spec", "template", "spec", "replicatedJobs", 0, "name"), "launcher"),
            f"{RUNTIME} spec.template.spec.replicatedJobs",
            "no replicated Job named node",
        ),
        (
            [pytorchjob({"command": None, "args": ["--epochs=1"]})],
            f"{WORKER}.template.spec.containers[0].command",
            "ENTRYPOINT",
        ),
        (
            [replaced(pytorchjob(), ("spec", "pytorchReplicaSpecs"), [])],
            "spec.pytorchReplicaSpecs",
            "must be a mapping",
        ),
        ([replaced(pytorchjob(), ("spec",), ["a"])], "spec", "must be a mapping, not list"),
        ([pytorchjob() | {"metadata": {}}], "metadata.name", "required"),
        (
            [replaced(pytorchjob(), ("spec", "pytorchReplicaSpecs", "Launcher"), {})],
            "spec.pytorchReplicaSpecs.Launcher",
            "use Master and Worker",
        ),
        (
            [replaced(pytorchjob(), ("spec", "pytorchReplicaSpecs", "Master", "replicas"), 2)],
            "spec.pytorchReplicaSpecs.Master.replicas",
            "0 or 1 Master",
        ),
        (
            [replaced(pytorchjob(), (*WORKER_POD, "containers", 0, "name"), "main")],
            f"{WORKER}.template.spec.containers",
            "no container named pytorch",
        ),
        (
            [replaced(pytorchjob(), (*WORKER_POD, "containers"), {})],
            f"{WORKER}.template.spec.containers",
            "must be a list",
        ),
        (
            [pytorchjob(pod={"containers": [{"name": "pytorch", "command": ["x"]}, {"name": "trainer"}]})],
            f"{WORKER}.template.spec.containers[1].name",
            "rename",
        ),
        ([replaced(pytorchjob(), WORKER_POD[:-1], "x")], f"{WORKER}.template", "must be a mapping"),
        ([pytorchjob(nprocPerNode="many")], "spec.nprocPerNode", "a whole number, or one of auto"),
        (trainjob(podTemplateOverrides={"spec": {}}), "spec.podTemplateOverrides", "must be a list"),
        (trainjob(podTemplateOverrides=["x"]), "spec.podTemplateOverrides[0]", "must be a mapping (a pod override)"),
        (
            trainjob(podTemplateOverrides=[pod_override({"volumes": "data"})]),
            f"{OVERRIDE}.spec.volumes",
            "must be a list",
        ),
        (
            trainjob(podTemplateOverrides=[pod_override({"tolerations": {"key": "a"}})]),
            f"{OVERRIDE}.spec.tolerations",
            "must be a list",
        ),
        (
            [pytorchjob({"resources": {"limits": {"nvidia.com/gpu": 1, "amd.com/gpu": 1}}})],
            f"{WORKER}.template.spec.containers[0].resources",
            "GPUs of 2 kinds",
        ),
        (
            [pytorchjob({"resources": {"limits": {"nvidia.com/gpu": 1}}}, nprocPerNode="4")],
            "the converted ScaleTrainJob's spec.procsPerNode",
            "exceeds gpusPerNode",
        ),
    ],
)
def test_input_that_cannot_be_converted_names_the_field_and_the_fix(documents, path, fragment):
    errors = _errors(documents)
    assert path in errors, errors
    assert fragment in errors[path]


@pytest.mark.parametrize("path", CONVERT_FIXTURES, ids=lambda p: p.name)
def test_no_value_of_the_wrong_shape_anywhere_ends_in_an_exception_other_than_a_conversion_error(path):
    documents = read(path)
    for place in every_path(documents):
        for wrong in WRONG_SHAPES:
            try:
                convert(replaced(documents, place, wrong))
            except ConversionError:
                pass


def test_the_cli_prints_the_job_and_lists_what_it_did_not_carry_over():
    path = next(p for p in CONVERT_FIXTURES if p.stem == "pytorchjob-full")
    result = run_cli("convert", str(path))
    assert result.returncode == 0, result.stderr
    (job,) = load_documents(result.stdout, "stdout")  # as Kubernetes reads it
    assert job == convert(read(path)).job
    lines = result.stderr.splitlines()
    assert lines[0] == f"{path}: not carried over to the ScaleTrainJob (6):"
    assert "  spec.runPolicy.cleanPodPolicy: ScaleTrain keeps a finished gang's pods" in "\n".join(lines)
    assert all(line.startswith("  spec.") for line in lines[1:])


def test_the_cli_quotes_strings_kubernetes_would_read_as_numbers():
    path = next(p for p in CONVERT_FIXTURES if p.stem == "trainjob-torch-distributed")
    result = run_cli("convert", "-", stdin=path.read_text())
    assert result.returncode == 0 and result.stderr == ""
    (job,) = load_documents(result.stdout, "stdout")
    assert job["spec"]["args"] == ["--lr", "2e-5"]  # not the float 2e-05
    parse_job(job)


def test_the_cli_refuses_what_it_cannot_convert_with_one_line_per_problem(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(trainjob()[:1] + [{"apiVersion": "v1", "kind": "ConfigMap"}]))
    result = run_cli("convert", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{path}: cannot convert to a ScaleTrainJob (1):",
        "  spec.runtimeRef: ClusterTrainingRuntime torch-distributed is not in the input: add it as another YAML "
        "document (kubectl get clustertrainingruntime torch-distributed -o yaml)",
    ]


@pytest.mark.parametrize(
    "text, code, fragment",
    [
        ("spec: [unclosed", 2, "not valid YAML"),
        ("", 2, "no YAML document found"),
        ("- just\n- a list\n", 1, "found a list"),
        ("kind: PyTorchJob\napiVersion: kubeflow.org/v1\nspec: 3\n", 1, "spec: must be a mapping, not int"),
    ],
)
def test_the_cli_never_shows_a_traceback(tmp_path, text, code, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = run_cli("convert", str(path))
    assert result.returncode == code and fragment in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
