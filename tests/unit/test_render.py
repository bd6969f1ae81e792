"""Rendering: every child validates against the official Kubernetes schemas, and carries the
rank layout, GPU settings, labels, ownership and security defaults the issue asks for."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.render.children import generation_free, render_children, render_job
from scaletrain_operator.validation.merge import merge_under
from scaletrain_testing.jobs import DELETE, EXAMPLES, REPO, base_job, load_yaml, secret_key_ref
from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.validation import ProblemsError

KUBERNETES_VERSION = "1.37"  # the first with the Workload API (scheduling.k8s.io/v1beta1)

POD_TEMPLATE = {
    "metadata": {"labels": {"team": "vision"}, "annotations": {"prometheus.io/scrape": "true"}},
    "spec": {
        "initContainers": [{"name": "fetch-data", "image": "busybox:1.36", "command": ["sh", "-c", "true"]}],
        "containers": [
            {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"},
            {
                "name": "trainer",
                "image": "ignored:latest",
                "workingDir": "/workspace",
                "env": [{"name": "FROM_TEMPLATE", "value": "1"}, {"name": "PYTHONUNBUFFERED", "value": "0"}],
            },
        ],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 120,
        "restartPolicy": "Always",
    },
}

# spec.objectStorage of a SeaweedFS in the cluster, with an access key in a Secret.
OBJECT_STORAGE = {
    "endpoint": "http://seaweedfs.storage:8333",
    "region": "us-east-1",
    "credentialsSecret": {"name": "s3-credentials"},
}
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

SPECS = {
    "cpu-1-node": base_job(nodes=1, training={"globalBatchSize": 8}),
    "cpu-2-nodes": base_job(),
    "gpu-4x8": base_job(nodes=4, gpusPerNode=8, training={"globalBatchSize": 256, "microBatchSize": 8}),
    "gpu-64-nodes": base_job(
        nodes=64,
        gpusPerNode=8,
        backend="nccl",
        training={"globalBatchSize": 2048, "microBatchSize": 4},
        nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"scaletrain.io/job-name": "demo"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        priorityClassName="high",
        schedulerName="volcano",
        serviceAccountName="trainer",
        resources={"requests": {"cpu": "32", "memory": "512Gi"}, "limits": {"memory": "600Gi"}},
    ),
    "pod-template-merge": base_job(
        podTemplate=POD_TEMPLATE,
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
    ),
    "object-storage": base_job(
        objectStorage=OBJECT_STORAGE | {"credentialsSecret": {"name": "s3-credentials", "sessionTokenKey": "token"}},
        training={"checkpoint": {"dir": "s3://team-a/ckpt"}, "data": {"source": "text", "path": "s3://team-a/x.txt"}},
    ),
    "kueue-queued": base_job(queueName="team-a-queue", activeDeadlineSeconds=86400),
    "custom-command": base_job(
        command=["python", "-m", "my_trainer"],
        imagePullPolicy="Always",
        env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
    ),
}


def _children(document, generation=0):
    return render_children(parse_job(document), generation)


def _pod(children):
    return children[-1]["spec"]["template"]


def _container(children, name="trainer"):
    return next(c for c in _pod(children)["spec"]["containers"] if c["name"] == name)


def _env(children):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(children)["env"]}


@pytest.mark.parametrize("name", SPECS)
def test_every_child_validates_against_kubernetes_schemas(name):
    children = _children(SPECS[name])
    assert [c["kind"] for c in children] == ["Workload", "Service", "Service", "Job"]
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_render_to_valid_children(path):
    for child in _children(load_yaml(path)):
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)


def test_the_master_alias_is_rank_0_of_any_generation_while_it_is_ready():
    alias = _children(base_job(), generation=4)[2]  # after the Workload and the Service
    assert alias["metadata"]["name"] == "demo-master" and alias["spec"]["clusterIP"] == "None"
    assert alias["spec"]["selector"] == {
        "scaletrain.io/job-name": "demo",
        "batch.kubernetes.io/job-completion-index": "0",
    }
    assert "publishNotReadyAddresses" not in alias["spec"]  # a terminating rank 0 of an earlier gang drops out
    assert alias["metadata"]["ownerReferences"][0]["kind"] == "ScaleTrainJob"


def test_headless_service_publishes_not_ready_pods():
    service = _children(base_job())[1]  # after the Workload
    assert service["metadata"]["name"] == "demo"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"scaletrain.io/job-name": "demo"}


def test_indexed_job_gang_settings():
    children = _children(base_job(nodes=3, training={"globalBatchSize": 12}), generation=2)
    job = children[-1]
    assert job["metadata"]["name"] == "demo-g2"
    assert job["spec"] | {"template": None, "podFailurePolicy": None} == {
        "completionMode": "Indexed",
        "completions": 3,
        "parallelism": 3,
        "backoffLimit": 0,
        "suspend": False,
        "template": None,
        "podFailurePolicy": None,
    }
    # A disrupted pod, or the trainer's exit after a SIGTERM, fails the Job as a disruption (gang_policy).
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert [(rule["action"], rule.get("onPodConditions"), rule.get("onExitCodes")) for rule in rules] == [
        ("FailJob", [{"type": "DisruptionTarget", "status": "True"}], None),
        ("FailJob", None, {"containerName": "trainer", "operator": "In", "values": [80]}),
    ]
    pod = _pod(children)["spec"]
    assert pod["subdomain"] == "demo" and pod["restartPolicy"] == "Never"


def test_rank_env_for_torchrun_and_plain_launchers():
    env = _env(_children(SPECS["gpu-4x8"], generation=1))
    rank = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["PET_NNODES"] == env["NNODES"] == "4"
    assert env["PET_NPROC_PER_NODE"] == env["NPROC_PER_NODE"] == "8"
    assert env["PET_NODE_RANK"] == env["NODE_RANK"] == rank
    assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"] == "demo-g1-0.demo"
    assert env["PET_MASTER_PORT"] == env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "32"
    assert env["PET_RDZV_ENDPOINT"] == "$(MASTER_ADDR):$(MASTER_PORT)"  # c10d rendezvous without an endpoint
    assert "RANK" not in env and "LOCAL_RANK" not in env  # 8 processes per pod: torchrun sets each worker's
    assert env["SCALETRAIN_BACKEND"] == "nccl"
    assert env["NCCL_DEBUG"] == "WARN" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_one_process_per_node_gets_rank_and_local_rank_as_pytorchjob_sets_them():
    env = _env(_children(base_job(masterPort=23456)))
    assert env["RANK"] == env["NODE_RANK"] and env["LOCAL_RANK"] == "0"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
    job = _children(base_job(masterPort=23456))
    for service in (child for child in job if child["kind"] == "Service"):
        assert service["spec"]["ports"][0]["port"] == 23456


def test_rank_and_local_rank_are_the_users_with_several_processes_per_node():
    document = base_job(procsPerNode=2, env=[{"name": "LOCAL_RANK", "value": "0"}], training={"globalBatchSize": 16})
    assert _env(_children(document))["LOCAL_RANK"] == "0"


def test_cpu_job_uses_gloo_without_nccl_env():
    env = _env(_children(base_job()))
    assert env["SCALETRAIN_BACKEND"] == "gloo" and env["WORLD_SIZE"] == "2"
    assert not any(name.startswith("NCCL_") for name in env)


def test_training_config_travels_as_json_env():
    from scaletrain_trainer.contract.config import load_training_config

    document = base_job(training={"model": {"layers": 3}, "precision": "bf16"})
    env = _env(_children(document))
    config = load_training_config(environ={"SCALETRAIN_CONFIG": env["SCALETRAIN_CONFIG"]})
    assert config == parse_job(document).spec.training
    assert config.model.layers == 3 and config.precision == "bf16"


def test_user_env_overrides_nccl_defaults_in_place():
    document = base_job(
        gpusPerNode=8,
        nodes=1,
        training={"globalBatchSize": 32},
        env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "EXTRA", "value": "x"}],
    )
    names = [e["name"] for e in _container(_children(document))["env"]]
    env = _env(_children(document))
    assert env["NCCL_DEBUG"] == "INFO" and env["EXTRA"] == "x"
    assert names.count("NCCL_DEBUG") == 1 and names[-1] == "EXTRA"


def test_gpu_resources_toleration_and_shm():
    children = _children(
        base_job(
            nodes=1,
            gpusPerNode=8,
            shmSize="16Gi",
            training={"globalBatchSize": 32},
            resources={"requests": {"cpu": "8"}},
        )
    )
    container = _container(children)
    pod = _pod(children)["spec"]
    assert container["resources"] == {"requests": {"cpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    shm = next(v for v in pod["volumes"] if v["name"] == "scaletrain-shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert {"name": "scaletrain-shm", "mountPath": "/dev/shm"} in container["volumeMounts"]


def test_custom_gpu_resource_name():
    document = base_job(nodes=1, gpusPerNode=4, gpuResource="amd.com/gpu", training={"globalBatchSize": 16})
    children = _children(document)
    assert _container(children)["resources"]["limits"] == {"amd.com/gpu": "4"}
    assert _pod(children)["spec"]["tolerations"] == [
        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_cpu_job_has_no_gpu_toleration_but_has_default_shm():
    pod = _pod(_children(base_job()))["spec"]
    assert "tolerations" not in pod
    assert {"name": "scaletrain-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]


def test_labels_and_owner_references():
    children = _children(base_job(), generation=3)
    for child in children:
        metadata = child["metadata"]
        assert metadata["namespace"] == "team-a"
        assert metadata["labels"]["app.kubernetes.io/name"] == "scaletrain"
        assert metadata["labels"]["app.kubernetes.io/managed-by"] == "scaletrain-operator"
        assert metadata["labels"]["scaletrain.io/job-name"] == "demo"
        assert metadata["ownerReferences"] == [
            {
                "apiVersion": "scaletrain.io/v1alpha1",
                "kind": "ScaleTrainJob",
                "name": "demo",
                "uid": "6f1c2a7e-1111-4c3b-9a61-0123456789ab",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    assert children[-1]["metadata"]["labels"]["scaletrain.io/generation"] == "3"
    assert _pod(children)["metadata"]["labels"]["scaletrain.io/generation"] == "3"
    outliving = children[:-1]  # the Workload and the Services outlive gangs
    assert all("scaletrain.io/generation" not in child["metadata"]["labels"] for child in outliving)


def test_owner_reference_needs_a_uid():
    document = base_job()
    del document["metadata"]["uid"]
    assert all("ownerReferences" not in child["metadata"] for child in _children(document))


def test_security_defaults_and_opt_out():
    children = _children(base_job())
    assert _container(children)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert _pod(children)["spec"]["securityContext"]["runAsNonRoot"] is True
    assert _pod(children)["spec"]["automountServiceAccountToken"] is False  # the trainer calls no API
    own_account = _pod(_children(base_job(serviceAccountName="trainer-sa")))["spec"]
    assert own_account["serviceAccountName"] == "trainer-sa" and "automountServiceAccountToken" not in own_account
    root_image = _children(base_job(securityContext={"runAsNonRoot": False, "runAsUser": 0}))
    assert _pod(root_image)["spec"]["securityContext"] == {
        "runAsNonRoot": False,
        "runAsUser": 0,
        "seccompProfile": {"type": "RuntimeDefault"},
        "fsGroup": wire.TRAINER_GID,
        "fsGroupChangePolicy": "OnRootMismatch",
    }


def test_volumes_are_handed_to_the_trainers_group():
    """A root-owned volume (mode 0755) must be writable by the trainer image's user 10001: fsGroup is its
    group unless the job names a group; a chown only where the volume's root is not the group's yet."""
    default = _pod(_children(base_job()))["spec"]["securityContext"]
    assert default["fsGroup"] == wire.TRAINER_GID and default["fsGroupChangePolicy"] == "OnRootMismatch"
    own_group = _pod(_children(base_job(securityContext={"runAsUser": 1000, "runAsGroup": 2000})))["spec"]
    assert own_group["securityContext"]["fsGroup"] == 2000
    chosen = _pod(_children(base_job(securityContext={"runAsGroup": 2000, "fsGroup": 3000})))["spec"]
    assert chosen["securityContext"]["fsGroup"] == 3000


def test_the_trainer_group_is_the_images():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"ARG TRAINER_UID={wire.TRAINER_GID}\n" in dockerfile


def test_kueue_queue_creates_a_suspended_labelled_job():
    job = _children(SPECS["kueue-queued"])[-1]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert job["spec"]["suspend"] is True and job["spec"]["activeDeadlineSeconds"] == 86400
    assert _children(base_job(suspend=True))[-1]["spec"]["suspend"] is True


def test_command_and_args_defaults_and_overrides():
    default = _container(_children(base_job()))
    assert default["command"] == ["python", "-m", "scaletrain_trainer.launch"]
    assert default["args"] == ["--module", "scaletrain_trainer"]
    custom = _container(_children(SPECS["custom-command"]))
    assert custom["command"] == ["python", "-m", "my_trainer"] and custom["args"] == []
    assert custom["imagePullPolicy"] == "Always"
    args_only = _container(_children(base_job(args=["--module", "my_pkg.train"])))
    assert args_only["command"] == default["command"] and args_only["args"] == ["--module", "my_pkg.train"]


def test_pod_template_is_merged_under_the_rendered_pod():
    children = _children(SPECS["pod-template-merge"])
    pod = _pod(children)
    spec = pod["spec"]
    assert [c["name"] for c in spec["containers"]] == ["log-shipper", "trainer"]
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "trainer"
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-data"]
    trainer = _container(children)
    assert trainer["image"] == "ghcr.io/scaletrain/trainer:0.1.0"  # rendered wins
    assert trainer["workingDir"] == "/workspace"  # template fills what rendering leaves open
    env = _env(children)
    assert env["FROM_TEMPLATE"] == "1" and env["PYTHONUNBUFFERED"] == "1"  # the rendered one wins
    assert spec["restartPolicy"] == "Never" and spec["terminationGracePeriodSeconds"] == 120
    assert [v["name"] for v in spec["volumes"]] == ["scratch", "scaletrain-shm"]
    assert {"key": "spot", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert pod["metadata"]["labels"]["team"] == "vision"
    assert pod["metadata"]["labels"]["scaletrain.io/job-name"] == "demo"


def test_merge_replaces_same_named_env_and_volume_items_whole():
    """Merging field by field could leave an env var with value and valueFrom, or a volume with two sources."""
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "env": [{"name": "NCCL_DEBUG", "valueFrom": {"configMapKeyRef": {"name": "nccl", "key": "debug"}}}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data/a", "subPath": "a"}],
                }
            ]
        }
    }
    document = base_job(
        gpusPerNode=1,
        nodes=1,
        training={"globalBatchSize": 4},
        podTemplate=template,
        volumes=[{"name": "data", "emptyDir": {}}],
        volumeMounts=[{"name": "data", "mountPath": "/data/b", "subPath": "b"}],
    )
    children = _children(document)
    env = [e for e in _container(children)["env"] if e["name"] == "NCCL_DEBUG"]
    assert env == [{"name": "NCCL_DEBUG", "value": "WARN"}]
    mounts = [m for m in _container(children)["volumeMounts"] if m["name"] == "data"]
    assert mounts == [
        {"name": "data", "mountPath": "/data/a", "subPath": "a"},
        {"name": "data", "mountPath": "/data/b", "subPath": "b"},
    ]
    kubernetes_validate.validate(children[-1], KUBERNETES_VERSION, strict=True)


def test_merge_under_list_rules_and_purity():
    base = {"args": ["a", "b"], "tolerations": [{"key": "x"}], "env": [{"name": "A", "value": "1", "x": "y"}]}
    overlay = {
        "args": ["c"],
        "tolerations": [{"key": "x"}, {"key": "y"}],
        "env": [{"name": "A", "value": "2"}, {"name": "B"}],
    }
    before = copy.deepcopy((base, overlay))
    merged = merge_under(base, overlay)
    assert merged == {
        "args": ["c"],
        "tolerations": [{"key": "x"}, {"key": "y"}],
        "env": [{"name": "A", "value": "2"}, {"name": "B"}],
    }
    assert (base, overlay) == before
    merged["env"][0]["value"] = "changed"
    assert base["env"][0]["value"] == "1"


def test_rendering_is_pure_and_deterministic():
    document = SPECS["gpu-64-nodes"]
    job = parse_job(document)
    first = render_children(job, 1)
    first[-1]["spec"]["template"]["spec"]["affinity"]["mutated"] = True
    first[-1]["spec"]["template"]["spec"]["containers"][0]["env"].clear()
    assert render_children(job, 1) == _children(document, 1)
    assert "mutated" not in job.spec.affinity


def test_longest_allowed_name_fits_every_hostname():
    from scaletrain_operator.api.naming import MAX_NAME_LENGTH, MAX_NODES, MAX_RESTARTS

    document = base_job(nodes=MAX_NODES, training={"globalBatchSize": 4 * MAX_NODES})
    document["metadata"]["name"] = "a" * MAX_NAME_LENGTH
    job = render_children(parse_job(document), MAX_RESTARTS)[-1]
    last_hostname = f"{job['metadata']['name']}-{MAX_NODES - 1}"
    assert len(last_hostname) == 63
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_a_job_of_its_own_script_needs_no_training_block_and_gets_no_trainer_config():
    for own in ({"command": ["python", "train.py"]}, {"args": ["--module", "my_train"]}):
        document = base_job(training=DELETE, **own)
        children = _children(document)
        env = _env(children)
        assert "SCALETRAIN_CONFIG" not in env
        # Where rank 0 may serve /progress for `kubectl get stj` (docs/api.md): the trainer's default port.
        assert env["SCALETRAIN_METRICS_PORT"] == "9400"
        assert {"name": "metrics", "containerPort": 9400} in _container(children)["ports"]
        assert env["WORLD_SIZE"] == "2" and env["RANK"] == env["NODE_RANK"]  # the rank env is all there


def test_every_pod_records_its_root_cause_error_in_a_file_of_its_own_and_its_log_tail_is_the_fallback():
    """torchelastic's @record (and torchrun, for its first failed worker) write an uncaught exception to
    TORCHELASTIC_ERROR_FILE: a file of the pod's own, never the termination message, which the kubelet mounts
    and torchrun would try to remove (wire.ERROR_FILE_PATH); the message is the launcher's, else the end of
    the container's log."""
    for spec in ({}, {"training": DELETE, "command": ["torchrun", "train.py"]}, {"training": DELETE, "args": ["x.py"]}):
        children = _children(base_job(**spec))
        container = _container(children)
        assert _env(children)["TORCHELASTIC_ERROR_FILE"] == "/tmp/torchelastic-error.json"
        assert container["terminationMessagePath"] == "/dev/termination-log"
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    own = base_job(env=[{"name": "TORCHELASTIC_ERROR_FILE", "value": "/output/error.json"}])
    assert _env(_children(own))["TORCHELASTIC_ERROR_FILE"] == "/output/error.json"  # the user's, in place


def test_training_is_still_required_for_the_built_in_trainer():
    with pytest.raises(ProblemsError) as error:
        parse_job(base_job(training=DELETE))
    assert [p.path for p in error.value.problems] == [("spec", "training")]


def test_rank_env_containers_get_the_trainers_env_over_their_own():
    template = {"spec": {"containers": [{"name": "pytorch", "image": "team/train:1", "env": [{"name": "OWN"}]}]}}
    document = base_job(
        rankEnvContainers=["trainer", "pytorch"], podTemplate=template, env=[{"name": "HF_HOME", "value": "/cache"}]
    )
    children = _children(document, generation=3)
    pytorch = _container(children, "pytorch")
    assert pytorch["image"] == "team/train:1"
    assert [var["name"] for var in pytorch["env"]] == ["OWN"] + [var["name"] for var in _container(children)["env"]]
    env = {var["name"]: var.get("value") for var in pytorch["env"]}
    assert env["MASTER_ADDR"] == "demo-g3-0.demo" and env["HF_HOME"] == "/cache"
    # Not rendered for a container not named: a sidecar keeps its own env only.
    sidecar = {"spec": {"containers": [{"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}]}}
    assert "env" not in _container(_children(base_job(podTemplate=sidecar)), "log-shipper")


def test_the_rank_env_of_other_containers_does_not_make_generations_differ():
    template = {"spec": {"containers": [{"name": "pytorch", "image": "team/train:1"}]}}
    job = parse_job(base_job(rankEnvContainers=["pytorch"], podTemplate=template))
    assert generation_free(render_job(job, 0)) == generation_free(render_job(job, 1))


def test_the_trainers_command_is_not_pid_1_unless_the_template_says():
    """As PID 1 of its namespace a plain `python train.py` ignores SIGTERM: pods share the process
    namespace, so that pause is PID 1, unless podTemplate decides."""
    assert _pod(_children(base_job()))["spec"]["shareProcessNamespace"] is True
    opted_out = base_job(podTemplate={"spec": {"shareProcessNamespace": False}})
    assert _pod(_children(opted_out))["spec"]["shareProcessNamespace"] is False


def test_object_storage_becomes_the_aws_sdks_env_with_the_keys_from_the_secret():
    container = _container(_children(base_job(objectStorage=OBJECT_STORAGE)))
    names = [var["name"] for var in container["env"]]
    rendered = container["env"][names.index("AWS_ENDPOINT_URL") :]  # after the rank layout and the defaults
    assert rendered == [
        {"name": "AWS_ENDPOINT_URL", "value": "http://seaweedfs.storage:8333"},
        {"name": "AWS_REGION", "value": "us-east-1"},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": secret_key_ref("s3-credentials", "AWS_ACCESS_KEY_ID")},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": secret_key_ref("s3-credentials", "AWS_SECRET_ACCESS_KEY")},
    ]


def test_a_session_token_and_keys_of_other_names_come_from_the_secret():
    secret = {"name": "s3-credentials", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret", "sessionTokenKey": "t"}
    env = _env(_children(base_job(objectStorage={"credentialsSecret": secret})))
    assert {name: env[name] for name in CREDENTIALS} == {
        "AWS_ACCESS_KEY_ID": secret_key_ref("s3-credentials", "id"),
        "AWS_SECRET_ACCESS_KEY": secret_key_ref("s3-credentials", "secret"),
        "AWS_SESSION_TOKEN": secret_key_ref("s3-credentials", "t"),
    }
    assert "AWS_ENDPOINT_URL" not in env and "AWS_REGION" not in env  # AWS's own endpoints, the SDK's region


def test_without_a_secret_no_key_is_set_and_the_pod_uses_its_own_identity():
    env = _env(_children(base_job(objectStorage={"region": "eu-west-1"}, serviceAccountName="trainer")))
    assert env["AWS_REGION"] == "eu-west-1" and not set(CREDENTIALS) & set(env)
    assert not any(name.startswith("AWS_") for name in _env(_children(base_job())))  # no objectStorage: nothing


def test_the_rendered_job_names_the_secret_never_a_key():
    job = _children(SPECS["object-storage"])[-1]
    for container in job["spec"]["template"]["spec"]["containers"]:
        for var in container["env"]:
            if var["name"] in CREDENTIALS:
                assert set(var) == {"name", "valueFrom"} and set(var["valueFrom"]) == {"secretKeyRef"}


def test_spec_env_overrides_object_storage_env_in_place_and_rank_env_containers_get_it():
    template = {"spec": {"containers": [{"name": "pytorch", "image": "ghcr.io/team-a/train:1"}]}}
    document = base_job(
        objectStorage=OBJECT_STORAGE,
        env=[
            {"name": "AWS_REGION", "value": "eu-west-1"},
            {"name": "AWS_ACCESS_KEY_ID", "valueFrom": secret_key_ref("other", "id")},
        ],
        podTemplate=template,
        rankEnvContainers=["trainer", "pytorch"],
    )
    children = _children(document)
    for name in ("trainer", "pytorch"):
        env = _container(children, name)["env"]
        names = [var["name"] for var in env]
        assert names.count("AWS_REGION") == 1 and names.index("AWS_REGION") < names.index("AWS_SECRET_ACCESS_KEY")
        assert env[names.index("AWS_REGION")] == {"name": "AWS_REGION", "value": "eu-west-1"}
        assert env[names.index("AWS_ACCESS_KEY_ID")] == {
            "name": "AWS_ACCESS_KEY_ID",
            "valueFrom": secret_key_ref("other", "id"),
        }
