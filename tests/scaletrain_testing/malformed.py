"""The malformed-spec table: each case a MalformedCase, a patch over base_job() with the field path and
message that `scaletrain validate` reports and the layer of a real cluster that refuses it (the CRD's
OpenAPI schema, its CEL rules, or only the operator). tests/unit/test_validate.py checks the validator
against it, tests/integration/test_crd_server.py the real API server, and tests/integration/
test_operator.py the operator; REFUSED_AT_JOB_CREATION also tests/unit/test_kube_schema.py and
tests/integration/test_child_validation_server.py."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from scaletrain_testing.jobs import DELETE


class Layer(Enum):
    """The layer of a real cluster that refuses a malformed ScaleTrainJob."""

    SCHEMA = "schema"  # the CRD's OpenAPI schema: types, bounds, patterns, enums, unknown fields
    CEL = "cel"  # the CRD's CEL rules, which relate fields to each other
    OPERATOR = "operator"  # only the operator: the API server stores the object, the operator fails it as InvalidSpec


@dataclass(frozen=True, kw_only=True)
class MalformedCase:
    """One malformed ScaleTrainJob and how it is refused.

    name: the pytest id, and the name of the file or object each test writes it as.
    patch: what turns base_job() into the malformed document, merged over it by jobs.patched (DELETE
        removes a key).
    field_path: where `scaletrain validate` reports its one problem; the layer that refuses it names the
        same path (the API server in its refusal, the operator in its InvalidSpec message).
    message_fragment: a part of that problem's message.
    refused_by: the layer of a real cluster that refuses it; None for a document that is not a
        ScaleTrainJob at all, which no layer of the cluster sees as one.
    """

    name: str
    patch: dict[str, Any]
    field_path: str
    message_fragment: str
    refused_by: Layer | None


_SIDECAR = {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}

# What the CRD lets through (its schemaless pass-throughs) and the API server refuses in the Job the operator
# creates: validate and the operator refuse them first (validation/kube_schema.py). tests/integration/
# test_child_validation_server.py checks that the server refuses each rendered Job.
REFUSED_AT_JOB_CREATION = [
    MalformedCase(
        name="sidecar-env-a-string",
        patch={"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"env": "LOG_LEVEL=debug"}]}}}},
        field_path="spec.podTemplate.spec.containers[0].env",
        message_fragment="must be a list, not str",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sidecar-mounts-two-volumes-at-one-path",
        patch={
            "spec": {
                "podTemplate": {
                    "spec": {
                        "containers": [
                            _SIDECAR
                            | {
                                "volumeMounts": [
                                    {"name": "a", "mountPath": "/data"},
                                    {"name": "b", "mountPath": "/data"},
                                ]
                            }
                        ],
                        "volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
                    }
                }
            }
        },  # fmt: skip
        field_path="spec.podTemplate.spec.containers[0].volumeMounts[1].mountPath",
        message_fragment="/data is mounted twice",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="toleration-value-not-a-label-value",
        patch={"spec": {"tolerations": [{"key": "team", "operator": "Equal", "value": "vision team"}]}},
        field_path="spec.tolerations[0].value",
        message_fragment="must be a label value",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sidecar-quantity-bad",
        patch={
            "spec": {
                "podTemplate": {"spec": {"containers": [_SIDECAR | {"resources": {"limits": {"memory": "1 GB"}}}]}}
            }
        },
        field_path="spec.podTemplate.spec.containers[0].resources.limits.memory",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="volume-size-limit-bad",
        patch={
            "spec": {
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "lots"}}],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }
        },
        field_path="spec.volumes[0].emptyDir.sizeLimit",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="affinity-operator-unknown",
        patch={
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "zone", "operator": "Equals", "values": ["a"]}]}
                            ]
                        }
                    }
                }
            }
        },
        field_path="spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].operator",
        message_fragment="'Equals' must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="affinity-not-a-mapping",
        patch={"spec": {"affinity": {"podAntiAffinity": ["spread"]}}},
        field_path="spec.affinity.podAntiAffinity",
        message_fragment="must be a mapping, not list",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="affinity-topology-key-missing",
        patch={
            "spec": {
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": ""}
                        ]
                    }
                }
            }
        },
        field_path="spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        message_fragment="required, e.g. kubernetes.io/hostname",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sidecar-name-underscore",
        patch={"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"name": "log_shipper"}]}}}},
        field_path="spec.podTemplate.spec.containers[0].name",
        message_fragment="'log_shipper' is not a DNS label",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sidecar-without-image",
        patch={"spec": {"podTemplate": {"spec": {"containers": [{"name": "log-shipper"}]}}}},
        field_path="spec.podTemplate.spec.containers[0].image",
        message_fragment="every container needs an image",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sidecar-port-out-of-range",
        patch={"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"ports": [{"containerPort": 70000}]}]}}}},
        field_path="spec.podTemplate.spec.containers[0].ports[0].containerPort",
        message_fragment="must be a port number from 1 to 65535",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sidecar-mounts-a-missing-volume",
        patch={
            "spec": {
                "podTemplate": {
                    "spec": {"containers": [_SIDECAR | {"volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}]}
                }
            }
        },
        field_path="spec.podTemplate.spec.containers[0].volumeMounts[0].name",
        message_fragment="no volume named logs in the pod",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="template-field-unknown",
        patch={"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"volumeMount": []}]}}}},
        field_path="spec.podTemplate.spec.containers[0].volumeMount",
        message_fragment="unknown field; did you mean volumeMounts?",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="env-value-from-key-missing",
        patch={"spec": {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token"}}}]}},
        field_path="spec.env[0].valueFrom.secretKeyRef.key",
        message_fragment="required field is missing",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="template-volume-two-sources",
        patch={
            "spec": {
                "podTemplate": {"spec": {"volumes": [{"name": "cache", "emptyDir": {}, "hostPath": {"path": "/x"}}]}}
            }
        },
        field_path="spec.podTemplate.spec.volumes[0]",
        message_fragment="give exactly one volume source",
        refused_by=Layer.OPERATOR,
    ),
]

# Every case, those of REFUSED_AT_JOB_CREATION among them.
MALFORMED = [
    MalformedCase(
        name="image-missing",
        patch={"spec": {"image": DELETE}},
        field_path="spec.image",
        message_fragment="required field is missing",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="image-empty",
        patch={"spec": {"image": ""}},
        field_path="spec.image",
        message_fragment="at least 1 character",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="nodes-zero",
        patch={"spec": {"nodes": 0}},
        field_path="spec.nodes",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="nodes-too-many",
        patch={"spec": {"nodes": 5000}},
        field_path="spec.nodes",
        message_fragment="less than or equal to 4096",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="nodes-not-int",
        patch={"spec": {"nodes": "two"}},
        field_path="spec.nodes",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="gpus-negative",
        patch={"spec": {"gpusPerNode": -1}},
        field_path="spec.gpusPerNode",
        message_fragment="greater than or equal to 0",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="procs-zero",
        patch={"spec": {"procsPerNode": 0}},
        field_path="spec.procsPerNode",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="backend-unknown",
        patch={"spec": {"backend": "mpi"}},
        field_path="spec.backend",
        message_fragment="'auto', 'nccl' or 'gloo'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="image-pull-policy",
        patch={"spec": {"imagePullPolicy": "Sometimes"}},
        field_path="spec.imagePullPolicy",
        message_fragment="'Always'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="unknown-spec-field",
        patch={"spec": {"nodez": 2}},
        field_path="spec.nodez",
        message_fragment="did you mean nodes?",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="unknown-training-field",
        patch={"spec": {"training": {"globalBatchsize": 16}}},
        field_path="spec.training.globalBatchsize",
        message_fragment="did you mean globalBatchSize?",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="unknown-optimizer-field",
        patch={"spec": {"training": {"optimizer": {"learningRate": 0.1}}}},
        field_path="spec.training.optimizer.learningRate",
        message_fragment="unknown field",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="training-missing",
        patch={"spec": {"training": DELETE}},
        field_path="spec.training",
        message_fragment="only a job with a command or args of its own may leave it out",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="global-batch-missing",
        patch={"spec": {"training": {"globalBatchSize": DELETE}}},
        field_path="spec.training.globalBatchSize",
        message_fragment="required field is missing",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="precision-unknown",
        patch={"spec": {"training": {"precision": "fp8"}}},
        field_path="spec.training.precision",
        message_fragment="'bf16'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="strategy-unknown",
        patch={"spec": {"training": {"strategy": "zero3"}}},
        field_path="spec.training.strategy",
        message_fragment="'fsdp'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="data-source-bad",
        patch={"spec": {"training": {"data": {"source": "my.module"}}}},
        field_path="spec.training.data.source",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="model-name-bad",
        patch={"spec": {"training": {"model": {"name": "my model"}}}},
        field_path="spec.training.model.name",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="lr-zero",
        patch={"spec": {"training": {"optimizer": {"lr": 0}}}},
        field_path="spec.training.optimizer.lr",
        message_fragment="greater than 0",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="checkpoint-keep-zero",
        patch={"spec": {"training": {"checkpoint": {"keep": 0}}}},
        field_path="spec.training.checkpoint.keep",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="metrics-port-privileged",
        patch={"spec": {"training": {"metricsPort": 80}}},
        field_path="spec.training.metricsPort",
        message_fragment="greater than or equal to 1024",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="shm-size-bad",
        patch={"spec": {"shmSize": "lots"}},
        field_path="spec.shmSize",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="memory-request-bad",
        patch={"spec": {"resources": {"requests": {"memory": "1 GB"}}}},
        field_path="spec.resources.requests.memory",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="env-name-bad",
        patch={"spec": {"env": [{"name": "1 BAD", "value": "x"}]}},
        field_path="spec.env[0].name",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="toleration-operator",
        patch={"spec": {"tolerations": [{"key": "a", "operator": "Maybe"}]}},
        field_path="spec.tolerations[0].operator",
        message_fragment="'Exists' or 'Equal'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="toleration-exists-with-value",
        patch={"spec": {"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}},
        field_path="spec.tolerations[0].value",
        message_fragment="must be empty when operator is Exists",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="toleration-without-key",
        patch={"spec": {"tolerations": [{"effect": "NoSchedule"}]}},
        field_path="spec.tolerations[0].key",
        message_fragment="required unless operator is Exists",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="volume-also-in-pod-template",
        patch={
            "spec": {
                "volumes": [{"name": "data", "emptyDir": {}}],
                "podTemplate": {"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]}},
            }
        },
        field_path="spec.volumes[0].name",
        message_fragment="also defined in podTemplate",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="max-restarts-too-many",
        patch={"spec": {"maxRestarts": 1000}},
        field_path="spec.maxRestarts",
        message_fragment="less than or equal to 100",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="deadline-zero",
        patch={"spec": {"activeDeadlineSeconds": 0}},
        field_path="spec.activeDeadlineSeconds",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="queue-empty",
        patch={"spec": {"queueName": ""}},
        field_path="spec.queueName",
        message_fragment="at least 1 character",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="node-selector-not-string",
        patch={"spec": {"nodeSelector": {"pool": 5}}},
        field_path="spec.nodeSelector.pool",
        message_fragment="valid string",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="batch-not-divisible",
        patch={"spec": {"nodes": 4, "procsPerNode": 1, "training": {"globalBatchSize": 100, "microBatchSize": 8}}},
        field_path="spec.training.globalBatchSize",
        message_fragment="100 is not divisible by microBatchSize × world size (8 × 4 = 32)",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="restart-backoff-cap-below-its-start",
        patch={"spec": {"restartBackoff": {"initialSeconds": 60, "maxSeconds": 30}}},
        field_path="spec.restartBackoff.maxSeconds",
        message_fragment="must be at least initialSeconds",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="elastic-min-above-nodes",
        patch={"spec": {"elastic": {"minNodes": 3}}},
        field_path="spec.elastic.minNodes",
        message_fragment="3 exceeds nodes (2)",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        # 16 samples a step over 4 samples a rank: 1, 2 or 4 ranks keep it, 3 do not.
        name="elastic-range-changes-the-batch",
        patch={"spec": {"nodes": 4, "elastic": {"minNodes": 3}}},
        field_path="spec.elastic.minNodes",
        message_fragment="The sizes up to 4 that keep it: 1, 2, 4; set minNodes to one of them, or make "
        "globalBatchSize a multiple of 48",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="elastic-with-a-required-topology",
        patch={"spec": {"placement": {"topology": {"required": "example.com/block"}}, "elastic": {"minNodes": 1}}},
        field_path="spec.elastic",
        message_fragment="an elastic gang cannot keep placement.topology.required",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="elastic-with-a-queue",
        patch={"spec": {"queueName": "team-a", "elastic": {"minNodes": 1}}},
        field_path="spec.elastic",
        message_fragment="an elastic gang cannot grow back through a Kueue queue yet",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="batch-not-divisible-gpus",
        patch={"spec": {"nodes": 2, "gpusPerNode": 8, "training": {"globalBatchSize": 64, "microBatchSize": 8}}},
        field_path="spec.training.globalBatchSize",
        message_fragment="(8 × 16 = 128)",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="micro-exceeds-global",
        patch={"spec": {"nodes": 1, "training": {"globalBatchSize": 4, "microBatchSize": 8}}},
        field_path="spec.training.microBatchSize",
        message_fragment="exceeds globalBatchSize",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="nccl-on-cpu",
        patch={"spec": {"backend": "nccl"}},
        field_path="spec.backend",
        message_fragment="nccl needs GPUs",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="procs-exceed-gpus",
        patch={"spec": {"nodes": 1, "gpusPerNode": 8, "procsPerNode": 16, "training": {"globalBatchSize": 64}}},
        field_path="spec.procsPerNode",
        message_fragment="each process drives one GPU",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="sync-bn-on-cpu",
        patch={"spec": {"training": {"syncBatchNorm": True}}},
        field_path="spec.training.syncBatchNorm",
        message_fragment="SyncBatchNorm needs GPUs",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="width-not-divisible",
        patch={"spec": {"training": {"model": {"width": 100, "heads": 3}}}},
        field_path="spec.training.model.width",
        message_fragment="not divisible by heads",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="text-without-path",
        patch={"spec": {"training": {"data": {"source": "text"}}}},
        field_path="spec.training.data.path",
        message_fragment="required for source text",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="packing-without-instructions",
        patch={"spec": {"training": {"data": {"packing": True}}}},
        field_path="spec.training.data.packing",
        message_fragment="packs instructions only",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="warmup-exceeds-steps",
        patch={"spec": {"training": {"maxSteps": 10, "scheduler": {"warmupSteps": 50}}}},
        field_path="spec.training.scheduler.warmupSteps",
        message_fragment="exceeds maxSteps",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="name-too-long",
        patch={"metadata": {"name": "x" * 54}},
        field_path="metadata.name",
        message_fragment="at most 53 characters",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="name-uppercase",
        patch={"metadata": {"name": "MyJob"}},
        field_path="metadata.name",
        message_fragment="should match pattern",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="env-rank-reserved",
        patch={"spec": {"env": [{"name": "WORLD_SIZE", "value": "8"}]}},
        field_path="spec.env[0].name",
        message_fragment="WORLD_SIZE is set by ScaleTrain from nodes × procsPerNode; remove it",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="env-rank-with-one-process-per-node",
        patch={"spec": {"env": [{"name": "RANK", "value": "0"}]}},
        field_path="spec.env[0].name",
        message_fragment="RANK is set by ScaleTrain from the node rank, with procsPerNode 1",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-env-rank-reserved",
        patch={
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "trainer", "env": [{"name": "MASTER_PORT"}]}]}}}
        },
        field_path="spec.podTemplate.spec.containers[0].env[0].name",
        message_fragment="MASTER_PORT is set by ScaleTrain from masterPort",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-env-of-a-rank-env-container",
        patch={
            "spec": {
                "rankEnvContainers": ["pytorch"],
                "podTemplate": {"spec": {"containers": [{"name": "pytorch", "env": [{"name": "WORLD_SIZE"}]}]}},
            }
        },
        field_path="spec.podTemplate.spec.containers[0].env[0].name",
        message_fragment="WORLD_SIZE is set by ScaleTrain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="rank-env-container-not-in-template",
        patch={"spec": {"rankEnvContainers": ["trainer", "pytorch"]}},
        field_path="spec.rankEnvContainers[1]",
        message_fragment="no container pytorch in podTemplate.spec.containers",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-gpu-limit",
        patch={
            "spec": {
                "podTemplate": {
                    "spec": {"containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
                }
            }
        },
        field_path="spec.podTemplate.spec.containers[0].resources.limits.nvidia.com/gpu",
        message_fragment="set gpusPerNode instead",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="master-port-is-the-metrics-port",
        patch={"spec": {"masterPort": 9400}},
        field_path="spec.masterPort",
        message_fragment="9400 is training.metricsPort too",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="env-duplicate",
        patch={"spec": {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}},
        field_path="spec.env[1].name",
        message_fragment="set twice",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="env-value-and-value-from",
        patch={"spec": {"env": [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {}}}]}},
        field_path="spec.env[0].valueFrom",
        message_fragment="either value or valueFrom",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="gpu-in-resources",
        patch={"spec": {"resources": {"limits": {"nvidia.com/gpu": 8}}}},
        field_path="spec.resources.limits.nvidia.com/gpu",
        message_fragment="set gpusPerNode instead",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="mount-unknown-volume",
        patch={"spec": {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}},
        field_path="spec.volumeMounts[0].name",
        message_fragment="no volume named data",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="mount-dev-shm",
        patch={
            "spec": {
                "volumes": [{"name": "s", "emptyDir": {}}],
                "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}],
            }
        },
        field_path="spec.volumeMounts[0].mountPath",
        message_fragment="size it with shmSize",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="volume-without-source",
        patch={"spec": {"volumes": [{"name": "data"}]}},
        field_path="spec.volumes[0]",
        message_fragment="exactly one volume source",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="volume-name-reserved",
        patch={"spec": {"volumes": [{"name": "scaletrain-shm", "emptyDir": {}}]}},
        field_path="spec.volumes[0].name",
        message_fragment="reserved for /dev/shm",
        refused_by=Layer.OPERATOR,
    ),
    # Coercions the CRD refuses: strict types.
    MalformedCase(
        name="nodes-numeric-string",
        patch={"spec": {"nodes": "2"}},
        field_path="spec.nodes",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="nodes-boolean",
        patch={"spec": {"nodes": True}},
        field_path="spec.nodes",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="suspend-string",
        patch={"spec": {"suspend": "yes"}},
        field_path="spec.suspend",
        message_fragment="valid boolean",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="lr-quoted",
        patch={"spec": {"training": {"optimizer": {"lr": "0.0003"}}}},
        field_path="spec.training.optimizer.lr",
        message_fragment="valid number",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="shm-trailing-newline",
        patch={"spec": {"shmSize": "2Gi\n"}},
        field_path="spec.shmSize",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="command-empty",
        patch={"spec": {"command": []}},
        field_path="spec.command",
        message_fragment="at least 1 item",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="volume-not-mapping",
        patch={"spec": {"volumes": [1]}},
        field_path="spec.volumes[0]",
        message_fragment="valid dictionary",
        refused_by=Layer.SCHEMA,
    ),
    # A podTemplate's shape (its contents are the cluster's to judge).
    MalformedCase(
        name="pod-template-spec-string",
        patch={"spec": {"podTemplate": {"spec": "x"}}},
        field_path="spec.podTemplate.spec",
        message_fragment="must be a mapping, not str",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-containers-not-list",
        patch={"spec": {"podTemplate": {"spec": {"containers": "sidecar"}}}},
        field_path="spec.podTemplate.spec.containers",
        message_fragment="must be a list",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-container-without-name",
        patch={"spec": {"podTemplate": {"spec": {"containers": [{"image": "busybox"}]}}}},
        field_path="spec.podTemplate.spec.containers[0]",
        message_fragment="a mapping with a name",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-unknown-field",
        patch={"spec": {"podTemplate": {"template": {"spec": {}}}}},
        field_path="spec.podTemplate.template",
        message_fragment="a pod template has metadata and spec",
        refused_by=Layer.OPERATOR,
    ),
    # Kubernetes' rules for what the pods get (validation/kube_rules.py): resources.
    MalformedCase(
        name="requests-above-limits",
        patch={"spec": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}},
        field_path="spec.resources.requests.cpu",
        message_fragment="2 is more than limits.cpu (1)",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="memory-request-above-limit",
        patch={"spec": {"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1000Mi"}}}},
        field_path="spec.resources.requests.memory",
        message_fragment="more than limits.memory (1000Mi)",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="cpu-negative",
        patch={"spec": {"resources": {"requests": {"cpu": "-1"}}}},
        field_path="spec.resources.requests.cpu",
        message_fragment="is negative",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="resource-not-standard",
        patch={"spec": {"resources": {"limits": {"gpu": "1"}}}},
        field_path="spec.resources.limits.gpu",
        message_fragment="not a standard resource",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="resource-name-empty",
        patch={"spec": {"resources": {"limits": {"example.com/": "1"}}}},
        field_path="spec.resources.limits.example.com/",
        message_fragment="must be a qualified name",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="resource-prefix-uppercase",
        patch={"spec": {"resources": {"limits": {"Example.com/dev": "1"}}}},
        field_path="spec.resources.limits.Example.com/dev",
        message_fragment="prefix must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="memory-in-gb",
        patch={"spec": {"resources": {"limits": {"memory": "2GB"}}}},
        field_path="spec.resources.limits.memory",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="cpu-two-dots",
        patch={"spec": {"resources": {"requests": {"cpu": "1.5.5"}}}},
        field_path="spec.resources.requests.cpu",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="shm-size-negative",
        patch={"spec": {"shmSize": "-1Gi"}},
        field_path="spec.shmSize",
        message_fragment="must be more than 0",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="shm-size-zero",
        patch={"spec": {"shmSize": "0"}},
        field_path="spec.shmSize",
        message_fragment="must be more than 0",
        refused_by=Layer.OPERATOR,
    ),
    # Node selectors and labels.
    MalformedCase(
        name="node-selector-key-space",
        patch={"spec": {"nodeSelector": {"gpu type": "a100"}}},
        field_path="spec.nodeSelector",
        message_fragment="key must be a qualified name",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="node-selector-key-two-slashes",
        patch={"spec": {"nodeSelector": {"a/b/c": "x"}}},
        field_path="spec.nodeSelector",
        message_fragment="key prefix must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="node-selector-key-prefix-uppercase",
        patch={"spec": {"nodeSelector": {"Example.com/x": "y"}}},
        field_path="spec.nodeSelector",
        message_fragment="prefix must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="node-selector-key-empty",
        patch={"spec": {"nodeSelector": {"": "x"}}},
        field_path="spec.nodeSelector",
        message_fragment="must be a qualified name",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="node-selector-key-too-long",
        patch={"spec": {"nodeSelector": {"k" * 64: "x"}}},
        field_path="spec.nodeSelector",
        message_fragment="at most 63 characters",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="node-selector-value-space",
        patch={"spec": {"nodeSelector": {"gpu": "a 100"}}},
        field_path="spec.nodeSelector",
        message_fragment="must be a label value",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="node-selector-value-dash",
        patch={"spec": {"nodeSelector": {"gpu": "-a100"}}},
        field_path="spec.nodeSelector",
        message_fragment="starting and ending alphanumeric",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="node-selector-value-too-long",
        patch={"spec": {"nodeSelector": {"gpu": "v" * 64}}},
        field_path="spec.nodeSelector.gpu",
        message_fragment="at most 63 characters",
        refused_by=Layer.SCHEMA,
    ),
    # Names of other objects.
    MalformedCase(
        name="priority-class-underscore",
        patch={"spec": {"priorityClassName": "Not_Valid"}},
        field_path="spec.priorityClassName",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="priority-class-uppercase",
        patch={"spec": {"priorityClassName": "High"}},
        field_path="spec.priorityClassName",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="service-account-space",
        patch={"spec": {"serviceAccountName": "my account"}},
        field_path="spec.serviceAccountName",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="service-account-too-long",
        patch={"spec": {"serviceAccountName": "a" * 254}},
        field_path="spec.serviceAccountName",
        message_fragment="at most 253 characters",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="scheduler-uppercase",
        patch={"spec": {"schedulerName": "Volcano"}},
        field_path="spec.schedulerName",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="scheduler-double-dot",
        patch={"spec": {"schedulerName": "a..b"}},
        field_path="spec.schedulerName",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    # Mounts and volume sources.
    MalformedCase(
        name="mount-path-twice",
        patch={
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/data"}, {"name": "b", "mountPath": "/data/"}],
            }
        },
        field_path="spec.volumeMounts[1].mountPath",
        message_fragment="mounted twice",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sub-path-climbs",
        patch={
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/data", "subPath": "../x"}],
            }
        },
        field_path="spec.volumeMounts[0].subPath",
        message_fragment="relative path without '..'",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sub-path-absolute",
        patch={
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/data", "subPath": "/etc"}],
            }
        },
        field_path="spec.volumeMounts[0].subPath",
        message_fragment="relative path without '..'",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="sub-path-climbs-midway",
        patch={
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/d", "subPath": "a/../../b"}],
            }
        },
        field_path="spec.volumeMounts[0].subPath",
        message_fragment="relative path without '..'",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="claim-name-underscore",
        patch={"spec": {"volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": "Bad_Claim"}}]}},
        field_path="spec.volumes[0].persistentVolumeClaim.claimName",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="claim-name-number",
        patch={"spec": {"volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": 7}}]}},
        field_path="spec.volumes[0].persistentVolumeClaim.claimName",
        message_fragment="must be a string",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="config-map-name-path",
        patch={"spec": {"volumes": [{"name": "a", "configMap": {"name": "../x"}}]}},
        field_path="spec.volumes[0].configMap.name",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="secret-name-uppercase",
        patch={"spec": {"volumes": [{"name": "a", "secret": {"secretName": "TOKEN"}}]}},
        field_path="spec.volumes[0].secret.secretName",
        message_fragment="must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="volume-name-uppercase",
        patch={"spec": {"volumes": [{"name": "Data", "emptyDir": {}}]}},
        field_path="spec.volumes[0].name",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="volume-name-too-long",
        patch={"spec": {"volumes": [{"name": "v" * 64, "emptyDir": {}}]}},
        field_path="spec.volumes[0].name",
        message_fragment="at most 63 characters",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="mount-path-relative",
        patch={
            "spec": {"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "data"}]}
        },
        field_path="spec.volumeMounts[0].mountPath",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="mount-name-empty",
        patch={"spec": {"volumeMounts": [{"name": "", "mountPath": "/data"}]}},
        field_path="spec.volumeMounts[0].name",
        message_fragment="at least 1 character",
        refused_by=Layer.SCHEMA,
    ),
    # A podTemplate's metadata.
    MalformedCase(
        name="pod-template-label-key-space",
        patch={"spec": {"podTemplate": {"metadata": {"labels": {"a b": "x"}}}}},
        field_path="spec.podTemplate.metadata.labels",
        message_fragment="key must be a qualified name",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-label-value-bad",
        patch={"spec": {"podTemplate": {"metadata": {"labels": {"team": "a b"}}}}},
        field_path="spec.podTemplate.metadata.labels",
        message_fragment="must be a label value",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-label-value-number",
        patch={"spec": {"podTemplate": {"metadata": {"labels": {"team": 7}}}}},
        field_path="spec.podTemplate.metadata.labels",
        message_fragment="must be a string",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-annotation-key-bad",
        patch={"spec": {"podTemplate": {"metadata": {"annotations": {"x/y/z": "1"}}}}},
        field_path="spec.podTemplate.metadata.annotations",
        message_fragment="prefix must be a DNS-1123 subdomain",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-annotations-too-big",
        patch={"spec": {"podTemplate": {"metadata": {"annotations": {"big": "x" * (256 * 1024)}}}}},
        field_path="spec.podTemplate.metadata.annotations",
        message_fragment="annotations may hold at most 262144",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-labels-not-mapping",
        patch={"spec": {"podTemplate": {"metadata": {"labels": "team=a"}}}},
        field_path="spec.podTemplate.metadata.labels",
        message_fragment="must be a mapping of strings",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-metadata-string",
        patch={"spec": {"podTemplate": {"metadata": "x"}}},
        field_path="spec.podTemplate.metadata",
        message_fragment="must be a mapping, not str",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-volumes-not-list",
        patch={"spec": {"podTemplate": {"spec": {"volumes": {"name": "a"}}}}},
        field_path="spec.podTemplate.spec.volumes",
        message_fragment="must be a list, not dict",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="pod-template-init-container-without-name",
        patch={"spec": {"podTemplate": {"spec": {"initContainers": [{"image": "busybox"}]}}}},
        field_path="spec.podTemplate.spec.initContainers[0]",
        message_fragment="a mapping with a name",
        refused_by=Layer.OPERATOR,
    ),
    # The ScaleTrainJob's own metadata, which the API server checks.
    MalformedCase(
        name="label-key-space",
        patch={"metadata": {"labels": {"a b": "x"}}},
        field_path="metadata.labels",
        message_fragment="key must be a qualified name",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="label-value-dash",
        patch={"metadata": {"labels": {"team": "-a"}}},
        field_path="metadata.labels",
        message_fragment="must be a label value",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="annotation-key-bad",
        patch={"metadata": {"annotations": {"a b": "x"}}},
        field_path="metadata.annotations",
        message_fragment="key must be a qualified name",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="annotations-too-big",
        patch={"metadata": {"annotations": {"big": "x" * (256 * 1024)}}},
        field_path="metadata.annotations",
        message_fragment="annotations may hold at most 262144",
        refused_by=Layer.SCHEMA,
    ),
    # Strict types.
    MalformedCase(
        name="gpus-numeric-string",
        patch={"spec": {"gpusPerNode": "8"}},
        field_path="spec.gpusPerNode",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="max-restarts-string",
        patch={"spec": {"maxRestarts": "3"}},
        field_path="spec.maxRestarts",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="max-restarts-boolean",
        patch={"spec": {"maxRestarts": True}},
        field_path="spec.maxRestarts",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="max-steps-string",
        patch={"spec": {"training": {"maxSteps": "100"}}},
        field_path="spec.training.maxSteps",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="global-batch-fraction",
        patch={"spec": {"training": {"globalBatchSize": 8.5}}},
        field_path="spec.training.globalBatchSize",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="lr-boolean",
        patch={"spec": {"training": {"optimizer": {"lr": True}}}},
        field_path="spec.training.optimizer.lr",
        message_fragment="valid number",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="seed-string",
        patch={"spec": {"training": {"seed": "1"}}},
        field_path="spec.training.seed",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="deadline-string",
        patch={"spec": {"activeDeadlineSeconds": "60"}},
        field_path="spec.activeDeadlineSeconds",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="ttl-boolean",
        patch={"spec": {"ttlSecondsAfterFinished": False}},
        field_path="spec.ttlSecondsAfterFinished",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="shm-boolean",
        patch={"spec": {"shmSize": True}},
        field_path="spec.shmSize",
        message_fragment="not a Kubernetes quantity",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="suspend-number",
        patch={"spec": {"suspend": 1}},
        field_path="spec.suspend",
        message_fragment="valid boolean",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="env-value-number",
        patch={"spec": {"env": [{"name": "X", "value": 5}]}},
        field_path="spec.env[0].value",
        message_fragment="valid string",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="command-number",
        patch={"spec": {"command": ["python", 1]}},
        field_path="spec.command[1]",
        message_fragment="valid string",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="args-string",
        patch={"spec": {"args": "train.py"}},
        field_path="spec.args",
        message_fragment="valid list",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="image-number",
        patch={"spec": {"image": 5}},
        field_path="spec.image",
        message_fragment="valid string",
        refused_by=Layer.SCHEMA,
    ),
    # Tolerations.
    MalformedCase(
        name="toleration-seconds-without-no-execute",
        patch={"spec": {"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]}},
        field_path="spec.tolerations[0].tolerationSeconds",
        message_fragment="only applies to effect NoExecute",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="toleration-effect-unknown",
        patch={"spec": {"tolerations": [{"key": "k", "effect": "Sometimes"}]}},
        field_path="spec.tolerations[0].effect",
        message_fragment="'NoSchedule'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="toleration-key-space",
        patch={"spec": {"tolerations": [{"key": "a b", "operator": "Exists"}]}},
        field_path="spec.tolerations[0].key",
        message_fragment="must be a qualified name",
        refused_by=Layer.OPERATOR,
    ),
    # Sizes and ranges.
    MalformedCase(
        name="gpu-resource-bare",
        patch={"spec": {"gpuResource": "gpu"}},
        field_path="spec.gpuResource",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="procs-too-many",
        patch={"spec": {"procsPerNode": 300}},
        field_path="spec.procsPerNode",
        message_fragment="less than or equal to 256",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="gpus-too-many",
        patch={"spec": {"gpusPerNode": 65}},
        field_path="spec.gpusPerNode",
        message_fragment="less than or equal to 64",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="nodes-negative",
        patch={"spec": {"nodes": -1}},
        field_path="spec.nodes",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="max-restarts-negative",
        patch={"spec": {"maxRestarts": -1}},
        field_path="spec.maxRestarts",
        message_fragment="greater than or equal to 0",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="backend-uppercase",
        patch={"spec": {"backend": "NCCL"}},
        field_path="spec.backend",
        message_fragment="'auto', 'nccl' or 'gloo'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="tolerations-too-many",
        patch={"spec": {"tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(65)]}},
        field_path="spec.tolerations",
        message_fragment="at most 64 items",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="model-layers-zero",
        patch={"spec": {"training": {"model": {"layers": 0}}}},
        field_path="spec.training.model.layers",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="run-as-user-negative",
        patch={"spec": {"securityContext": {"runAsUser": -1}}},
        field_path="spec.securityContext.runAsUser",
        message_fragment="greater than or equal to 0",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="fs-group-string",
        patch={"spec": {"securityContext": {"fsGroup": "x"}}},
        field_path="spec.securityContext.fsGroup",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="affinity-string",
        patch={"spec": {"affinity": "x"}},
        field_path="spec.affinity",
        message_fragment="valid dictionary",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="env-name-starts-with-digit",
        patch={"spec": {"env": [{"name": "1ABC", "value": "x"}]}},
        field_path="spec.env[0].name",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="env-name-with-equals",
        patch={"spec": {"env": [{"name": "A=B", "value": "x"}]}},
        field_path="spec.env[0].name",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="env-name-empty",
        patch={"spec": {"env": [{"name": "", "value": "x"}]}},
        field_path="spec.env[0].name",
        message_fragment="at least 1 character",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="micro-batch-zero",
        patch={"spec": {"training": {"microBatchSize": 0}}},
        field_path="spec.training.microBatchSize",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="log-every-zero",
        patch={"spec": {"training": {"logEverySteps": 0}}},
        field_path="spec.training.logEverySteps",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="checkpoint-every-negative",
        patch={"spec": {"training": {"checkpoint": {"everySteps": -1}}}},
        field_path="spec.training.checkpoint.everySteps",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="synthetic-samples-zero",
        patch={"spec": {"training": {"data": {"syntheticSamples": 0}}}},
        field_path="spec.training.data.syntheticSamples",
        message_fragment="greater than or equal to 1",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="heads-string",
        patch={"spec": {"training": {"model": {"heads": "4"}}}},
        field_path="spec.training.model.heads",
        message_fragment="valid integer",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="precision-number",
        patch={"spec": {"training": {"precision": 16}}},
        field_path="spec.training.precision",
        message_fragment="'bf16'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="token-dtype-unknown",
        patch={"spec": {"training": {"data": {"tokenDtype": "int8"}}}},
        field_path="spec.training.data.tokenDtype",
        message_fragment="'uint16' or 'uint32'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="grad-clip-negative",
        patch={"spec": {"training": {"gradClipNorm": -1}}},
        field_path="spec.training.gradClipNorm",
        message_fragment="greater than or equal to 0",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="dropout-string",
        patch={"spec": {"training": {"model": {"dropout": "0.1"}}}},
        field_path="spec.training.model.dropout",
        message_fragment="valid number",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="queue-name-space",
        patch={"spec": {"queueName": "team a"}},
        field_path="spec.queueName",
        message_fragment="must be a label value",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="env-too-many",
        patch={"spec": {"env": [{"name": f"V{i}", "value": "x"} for i in range(513)]}},
        field_path="spec.env",
        message_fragment="at most 512 items",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="volumes-too-many",
        patch={"spec": {"volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(65)]}},
        field_path="spec.volumes",
        message_fragment="at most 64 items",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="failure-rule-names-twice",
        patch={
            "spec": {
                "failurePolicy": {"rules": [{"name": "A", "action": "FailJob"}, {"name": "A", "action": "RestartGang"}]}
            }
        },
        field_path="spec.failurePolicy.rules",
        message_fragment="each rule's name must be unique",
        refused_by=Layer.CEL,
    ),
    MalformedCase(
        name="failure-rule-action-unknown",
        patch={"spec": {"failurePolicy": {"rules": [{"name": "A", "action": "Retry"}]}}},
        field_path="spec.failurePolicy.rules[0].action",
        message_fragment="'FailJob', 'RestartGang' or 'RestartGangIgnoreLimit'",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="failure-rule-name-not-a-reason",
        patch={"spec": {"failurePolicy": {"rules": [{"name": "bad input", "action": "FailJob"}]}}},
        field_path="spec.failurePolicy.rules[0].name",
        message_fragment="should match pattern",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="failure-rule-exit-code-too-big",
        patch={
            "spec": {
                "failurePolicy": {
                    "rules": [{"name": "A", "action": "FailJob", "onExitCodes": {"operator": "In", "values": [256]}}]
                }
            }
        },
        field_path="spec.failurePolicy.rules[0].onExitCodes.values[0]",
        message_fragment="less than or equal to 255",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="grace-period-set-twice",
        patch={
            "spec": {
                "terminationGracePeriodSeconds": 600,
                "podTemplate": {"spec": {"terminationGracePeriodSeconds": 30}},
            }
        },
        field_path="spec.podTemplate.spec.terminationGracePeriodSeconds",
        message_fragment="set it in one place",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="object-storage-secret-without-name",
        patch={"spec": {"objectStorage": {"credentialsSecret": {"accessKeyIdKey": "id"}}}},
        field_path="spec.objectStorage.credentialsSecret.name",
        message_fragment="required field is missing",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="object-storage-endpoint-without-scheme",
        patch={"spec": {"objectStorage": {"endpoint": "seaweedfs.storage:8333"}}},
        field_path="spec.objectStorage.endpoint",
        message_fragment="not an http(s) URL of a host, e.g. http://seaweedfs.storage:8333",
        refused_by=Layer.SCHEMA,
    ),
    MalformedCase(
        name="checkpoint-dir-s3-without-bucket",
        patch={"spec": {"training": {"checkpoint": {"dir": "s3:///checkpoints"}}}},
        field_path="spec.training.checkpoint.dir",
        message_fragment="names no bucket: give s3://BUCKET/PREFIX",
        refused_by=Layer.OPERATOR,
    ),
    MalformedCase(
        name="data-path-s3-bucket-only",
        patch={"spec": {"training": {"data": {"source": "tokens", "path": "s3://team-a-data"}}}},
        field_path="spec.training.data.path",
        message_fragment="names a bucket or a prefix, not an object: give s3://BUCKET/KEY",
        refused_by=Layer.OPERATOR,
    ),
    *REFUSED_AT_JOB_CREATION,
    MalformedCase(
        name="wrong-kind",
        patch={"kind": "PyTorchJob"},
        field_path="kind",
        message_fragment="expected apiVersion scaletrain.io/v1alpha1 and kind ScaleTrainJob",
        refused_by=None,
    ),
]

REFUSED_BY_THE_CRD = [case for case in MALFORMED if case.refused_by in (Layer.SCHEMA, Layer.CEL)]
REFUSED_ONLY_BY_THE_OPERATOR = [case for case in MALFORMED if case.refused_by is Layer.OPERATOR]
