"""The malformed-spec table: each case a patch over base_job(), the field path and message that
`scaletrain validate` reports, and the layer of a real cluster that rejects it (the CRD's OpenAPI
schema, its CEL rules, or only the operator). tests/unit/test_validate.py checks the validator against
it, and tests/integration/test_crd_server.py the real API server."""

from __future__ import annotations

from scaletrain_testing.jobs import DELETE

SCHEMA, CEL, OPERATOR = "schema", "cel", "operator"
_SIDECAR = {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}

# What the CRD lets through (its schemaless pass-throughs) and the API server refuses in the Job the operator
# creates: validate and the operator refuse them first (api/kube_schema.py). tests/integration/
# test_child_validation_server.py checks that the server refuses each rendered Job.
REFUSED_AT_JOB_CREATION = [
    (
        "sidecar-env-a-string",
        {"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"env": "LOG_LEVEL=debug"}]}}}},
        "spec.podTemplate.spec.containers[0].env",
        "must be a list, not str",
        OPERATOR,
    ),
    (
        "toleration-value-not-a-label-value",
        {"spec": {"tolerations": [{"key": "team", "operator": "Equal", "value": "vision team"}]}},
        "spec.tolerations[0].value",
        "must be a label value",
        OPERATOR,
    ),
    (
        "sidecar-quantity-bad",
        {"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"resources": {"limits": {"memory": "1 GB"}}}]}}}},
        "spec.podTemplate.spec.containers[0].resources.limits.memory",
        "not a Kubernetes quantity",
        OPERATOR,
    ),
    (
        "volume-size-limit-bad",
        {
            "spec": {
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "lots"}}],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }
        },
        "spec.volumes[0].emptyDir.sizeLimit",
        "not a Kubernetes quantity",
        OPERATOR,
    ),
    (
        "affinity-operator-unknown",
        {
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
        },  # fmt: skip
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].operator",
        "'Equals' must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt",
        OPERATOR,
    ),
    (
        "affinity-not-a-mapping",
        {"spec": {"affinity": {"podAntiAffinity": ["spread"]}}},
        "spec.affinity.podAntiAffinity",
        "must be a mapping, not list",
        OPERATOR,
    ),
    (
        "affinity-topology-key-missing",
        {
            "spec": {
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": ""}
                        ]
                    }
                }
            }
        },  # fmt: skip
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        "required, e.g. kubernetes.io/hostname",
        OPERATOR,
    ),
    (
        "sidecar-name-underscore",
        {"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"name": "log_shipper"}]}}}},
        "spec.podTemplate.spec.containers[0].name",
        "'log_shipper' is not a DNS label",
        OPERATOR,
    ),
    (
        "sidecar-without-image",
        {"spec": {"podTemplate": {"spec": {"containers": [{"name": "log-shipper"}]}}}},
        "spec.podTemplate.spec.containers[0].image",
        "every container needs an image",
        OPERATOR,
    ),
    (
        "sidecar-port-out-of-range",
        {"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"ports": [{"containerPort": 70000}]}]}}}},
        "spec.podTemplate.spec.containers[0].ports[0].containerPort",
        "must be a port number from 1 to 65535",
        OPERATOR,
    ),
    (
        "sidecar-mounts-a-missing-volume",
        {
            "spec": {
                "podTemplate": {
                    "spec": {"containers": [_SIDECAR | {"volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}]}
                }
            }
        },  # fmt: skip
        "spec.podTemplate.spec.containers[0].volumeMounts[0].name",
        "no volume named logs in the pod",
        OPERATOR,
    ),
    (
        "template-field-unknown",
        {"spec": {"podTemplate": {"spec": {"containers": [_SIDECAR | {"volumeMount": []}]}}}},
        "spec.podTemplate.spec.containers[0].volumeMount",
        "unknown field; did you mean volumeMounts?",
        OPERATOR,
    ),
    (
        "env-value-from-key-missing",
        {"spec": {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token"}}}]}},
        "spec.env[0].valueFrom.secretKeyRef.key",
        "required field is missing",
        OPERATOR,
    ),
    (
        "template-volume-two-sources",
        {
            "spec": {
                "podTemplate": {"spec": {"volumes": [{"name": "cache", "emptyDir": {}, "hostPath": {"path": "/x"}}]}}
            }
        },
        "spec.podTemplate.spec.volumes[0]",
        "give exactly one volume source",
        OPERATOR,
    ),
]

# (id, patch over base_job(), expected path, expected message fragment, layer that rejects it; None: no layer
# of the cluster, as the object is not a ScaleTrainJob at all)
MALFORMED = [
    ("image-missing", {"spec": {"image": DELETE}}, "spec.image", "required field is missing", SCHEMA),
    ("image-empty", {"spec": {"image": ""}}, "spec.image", "at least 1 character", SCHEMA),
    ("nodes-zero", {"spec": {"nodes": 0}}, "spec.nodes", "greater than or equal to 1", SCHEMA),
    ("nodes-too-many", {"spec": {"nodes": 5000}}, "spec.nodes", "less than or equal to 4096", SCHEMA),
    ("nodes-not-int", {"spec": {"nodes": "two"}}, "spec.nodes", "valid integer", SCHEMA),
    ("gpus-negative", {"spec": {"gpusPerNode": -1}}, "spec.gpusPerNode", "greater than or equal to 0", SCHEMA),
    ("procs-zero", {"spec": {"procsPerNode": 0}}, "spec.procsPerNode", "greater than or equal to 1", SCHEMA),
    ("backend-unknown", {"spec": {"backend": "mpi"}}, "spec.backend", "'auto', 'nccl' or 'gloo'", SCHEMA),
    ("image-pull-policy", {"spec": {"imagePullPolicy": "Sometimes"}}, "spec.imagePullPolicy", "'Always'", SCHEMA),
    ("unknown-spec-field", {"spec": {"nodez": 2}}, "spec.nodez", "did you mean nodes?", SCHEMA),
    (
        "unknown-training-field",
        {"spec": {"training": {"globalBatchsize": 16}}},
        "spec.training.globalBatchsize",
        "did you mean globalBatchSize?",
        SCHEMA,
    ),
    (
        "unknown-optimizer-field",
        {"spec": {"training": {"optimizer": {"learningRate": 0.1}}}},
        "spec.training.optimizer.learningRate",
        "unknown field",
        SCHEMA,
    ),
    (
        "training-missing",
        {"spec": {"training": DELETE}},
        "spec.training",
        "only a job with a command or args of its own may leave it out",
        CEL,
    ),
    (
        "global-batch-missing",
        {"spec": {"training": {"globalBatchSize": DELETE}}},
        "spec.training.globalBatchSize",
        "required field is missing",
        SCHEMA,
    ),
    ("precision-unknown", {"spec": {"training": {"precision": "fp8"}}}, "spec.training.precision", "'bf16'", SCHEMA),
    ("strategy-unknown", {"spec": {"training": {"strategy": "zero3"}}}, "spec.training.strategy", "'fsdp'", SCHEMA),
    (
        "data-source-bad",
        {"spec": {"training": {"data": {"source": "my.module"}}}},
        "spec.training.data.source",
        "should match pattern",
        SCHEMA,
    ),
    (
        "model-name-bad",
        {"spec": {"training": {"model": {"name": "my model"}}}},
        "spec.training.model.name",
        "should match pattern",
        SCHEMA,
    ),
    (
        "lr-zero",
        {"spec": {"training": {"optimizer": {"lr": 0}}}},
        "spec.training.optimizer.lr",
        "greater than 0",
        SCHEMA,
    ),
    (
        "checkpoint-keep-zero",
        {"spec": {"training": {"checkpoint": {"keep": 0}}}},
        "spec.training.checkpoint.keep",
        "greater than or equal to 1",
        SCHEMA,
    ),
    (
        "metrics-port-privileged",
        {"spec": {"training": {"metricsPort": 80}}},
        "spec.training.metricsPort",
        "greater than or equal to 1024",
        SCHEMA,
    ),
    ("shm-size-bad", {"spec": {"shmSize": "lots"}}, "spec.shmSize", "not a Kubernetes quantity", SCHEMA),
    (
        "memory-request-bad",
        {"spec": {"resources": {"requests": {"memory": "1 GB"}}}},
        "spec.resources.requests.memory",
        "not a Kubernetes quantity",
        SCHEMA,
    ),
    (
        "env-name-bad",
        {"spec": {"env": [{"name": "1 BAD", "value": "x"}]}},
        "spec.env[0].name",
        "should match pattern",
        SCHEMA,
    ),
    (
        "toleration-operator",
        {"spec": {"tolerations": [{"key": "a", "operator": "Maybe"}]}},
        "spec.tolerations[0].operator",
        "'Exists' or 'Equal'",
        SCHEMA,
    ),
    (
        "toleration-exists-with-value",
        {"spec": {"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}},
        "spec.tolerations[0].value",
        "must be empty when operator is Exists",
        OPERATOR,
    ),
    (
        "toleration-without-key",
        {"spec": {"tolerations": [{"effect": "NoSchedule"}]}},
        "spec.tolerations[0].key",
        "required unless operator is Exists",
        OPERATOR,
    ),
    (
        "volume-also-in-pod-template",
        {
            "spec": {
                "volumes": [{"name": "data", "emptyDir": {}}],
                "podTemplate": {"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]}},
            }
        },
        "spec.volumes[0].name",
        "also defined in podTemplate",
        OPERATOR,
    ),
    ("max-restarts-too-many", {"spec": {"maxRestarts": 1000}}, "spec.maxRestarts", "less than or equal to 100", SCHEMA),
    (
        "deadline-zero",
        {"spec": {"activeDeadlineSeconds": 0}},
        "spec.activeDeadlineSeconds",
        "greater than or equal to 1",
        SCHEMA,
    ),
    ("queue-empty", {"spec": {"queueName": ""}}, "spec.queueName", "at least 1 character", SCHEMA),
    (
        "node-selector-not-string",
        {"spec": {"nodeSelector": {"pool": 5}}},
        "spec.nodeSelector.pool",
        "valid string",
        SCHEMA,
    ),
    (
        "batch-not-divisible",
        {"spec": {"nodes": 4, "procsPerNode": 1, "training": {"globalBatchSize": 100, "microBatchSize": 8}}},
        "spec.training.globalBatchSize",
        "100 is not divisible by microBatchSize × world size (8 × 4 = 32)",
        CEL,
    ),
    (
        "batch-not-divisible-gpus",
        {"spec": {"nodes": 2, "gpusPerNode": 8, "training": {"globalBatchSize": 64, "microBatchSize": 8}}},
        "spec.training.globalBatchSize",
        "(8 × 16 = 128)",
        CEL,
    ),
    (
        "micro-exceeds-global",
        {"spec": {"nodes": 1, "training": {"globalBatchSize": 4, "microBatchSize": 8}}},
        "spec.training.microBatchSize",
        "exceeds globalBatchSize",
        CEL,
    ),
    ("nccl-on-cpu", {"spec": {"backend": "nccl"}}, "spec.backend", "nccl needs GPUs", CEL),
    (
        "procs-exceed-gpus",
        {"spec": {"nodes": 1, "gpusPerNode": 8, "procsPerNode": 16, "training": {"globalBatchSize": 64}}},
        "spec.procsPerNode",
        "each process drives one GPU",
        CEL,
    ),
    (
        "sync-bn-on-cpu",
        {"spec": {"training": {"syncBatchNorm": True}}},
        "spec.training.syncBatchNorm",
        "SyncBatchNorm needs GPUs",
        CEL,
    ),
    (
        "width-not-divisible",
        {"spec": {"training": {"model": {"width": 100, "heads": 3}}}},
        "spec.training.model.width",
        "not divisible by heads",
        CEL,
    ),
    (
        "text-without-path",
        {"spec": {"training": {"data": {"source": "text"}}}},
        "spec.training.data.path",
        "required for source text",
        CEL,
    ),
    (
        "warmup-exceeds-steps",
        {"spec": {"training": {"maxSteps": 10, "scheduler": {"warmupSteps": 50}}}},
        "spec.training.scheduler.warmupSteps",
        "exceeds maxSteps",
        CEL,
    ),
    ("name-too-long", {"metadata": {"name": "x" * 54}}, "metadata.name", "at most 53 characters", CEL),
    ("name-uppercase", {"metadata": {"name": "MyJob"}}, "metadata.name", "should match pattern", CEL),
    (
        "env-rank-reserved",
        {"spec": {"env": [{"name": "WORLD_SIZE", "value": "8"}]}},
        "spec.env[0].name",
        "WORLD_SIZE is set by ScaleTrain from nodes × procsPerNode; remove it",
        OPERATOR,
    ),
    (
        "env-rank-with-one-process-per-node",
        {"spec": {"env": [{"name": "RANK", "value": "0"}]}},
        "spec.env[0].name",
        "RANK is set by ScaleTrain from the node rank, with procsPerNode 1",
        OPERATOR,
    ),
    (
        "pod-template-env-rank-reserved",
        {"spec": {"podTemplate": {"spec": {"containers": [{"name": "trainer", "env": [{"name": "MASTER_PORT"}]}]}}}},
        "spec.podTemplate.spec.containers[0].env[0].name",
        "MASTER_PORT is set by ScaleTrain from masterPort",
        OPERATOR,
    ),
    (
        "pod-template-env-of-a-rank-env-container",
        {
            "spec": {
                "rankEnvContainers": ["pytorch"],
                "podTemplate": {"spec": {"containers": [{"name": "pytorch", "env": [{"name": "WORLD_SIZE"}]}]}},
            }
        },
        "spec.podTemplate.spec.containers[0].env[0].name",
        "WORLD_SIZE is set by ScaleTrain",
        OPERATOR,
    ),
    (
        "rank-env-container-not-in-template",
        {"spec": {"rankEnvContainers": ["trainer", "pytorch"]}},
        "spec.rankEnvContainers[1]",
        "no container pytorch in podTemplate.spec.containers",
        OPERATOR,
    ),
    (
        "pod-template-gpu-limit",
        {
            "spec": {
                "podTemplate": {
                    "spec": {"containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
                }
            }
        },
        "spec.podTemplate.spec.containers[0].resources.limits.nvidia.com/gpu",
        "set gpusPerNode instead",
        OPERATOR,
    ),
    (
        "master-port-is-the-metrics-port",
        {"spec": {"masterPort": 9400}},
        "spec.masterPort",
        "9400 is training.metricsPort too",
        OPERATOR,
    ),
    (
        "env-duplicate",
        {"spec": {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}},
        "spec.env[1].name",
        "set twice",
        OPERATOR,
    ),
    (
        "env-value-and-value-from",
        {"spec": {"env": [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {}}}]}},
        "spec.env[0].valueFrom",
        "either value or valueFrom",
        OPERATOR,
    ),
    (
        "gpu-in-resources",
        {"spec": {"resources": {"limits": {"nvidia.com/gpu": 8}}}},
        "spec.resources.limits.nvidia.com/gpu",
        "set gpusPerNode instead",
        OPERATOR,
    ),
    (
        "mount-unknown-volume",
        {"spec": {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}},
        "spec.volumeMounts[0].name",
        "no volume named data",
        OPERATOR,
    ),
    (
        "mount-dev-shm",
        {
            "spec": {
                "volumes": [{"name": "s", "emptyDir": {}}],
                "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}],
            }
        },
        "spec.volumeMounts[0].mountPath",
        "size it with shmSize",
        OPERATOR,
    ),
    (
        "volume-without-source",
        {"spec": {"volumes": [{"name": "data"}]}},
        "spec.volumes[0]",
        "exactly one volume source",
        OPERATOR,
    ),
    (
        "volume-name-reserved",
        {"spec": {"volumes": [{"name": "scaletrain-shm", "emptyDir": {}}]}},
        "spec.volumes[0].name",
        "reserved for /dev/shm",
        OPERATOR,
    ),
    # Coercions the CRD refuses: strict types.
    ("nodes-numeric-string", {"spec": {"nodes": "2"}}, "spec.nodes", "valid integer", SCHEMA),
    ("nodes-boolean", {"spec": {"nodes": True}}, "spec.nodes", "valid integer", SCHEMA),
    ("suspend-string", {"spec": {"suspend": "yes"}}, "spec.suspend", "valid boolean", SCHEMA),
    (
        "lr-quoted",
        {"spec": {"training": {"optimizer": {"lr": "0.0003"}}}},
        "spec.training.optimizer.lr",
        "valid number",
        SCHEMA,
    ),
    ("shm-trailing-newline", {"spec": {"shmSize": "2Gi\n"}}, "spec.shmSize", "not a Kubernetes quantity", SCHEMA),
    ("command-empty", {"spec": {"command": []}}, "spec.command", "at least 1 item", SCHEMA),
    ("volume-not-mapping", {"spec": {"volumes": [1]}}, "spec.volumes[0]", "valid dictionary", SCHEMA),
    # A podTemplate's shape (its contents are the cluster's to judge).
    (
        "pod-template-spec-string",
        {"spec": {"podTemplate": {"spec": "x"}}},
        "spec.podTemplate.spec",
        "must be a mapping, not str",
        OPERATOR,
    ),
    (
        "pod-template-containers-not-list",
        {"spec": {"podTemplate": {"spec": {"containers": "sidecar"}}}},
        "spec.podTemplate.spec.containers",
        "must be a list",
        OPERATOR,
    ),
    (
        "pod-template-container-without-name",
        {"spec": {"podTemplate": {"spec": {"containers": [{"image": "busybox"}]}}}},
        "spec.podTemplate.spec.containers[0]",
        "a mapping with a name",
        OPERATOR,
    ),
    (
        "pod-template-unknown-field",
        {"spec": {"podTemplate": {"template": {"spec": {}}}}},
        "spec.podTemplate.template",
        "a pod template has metadata and spec",
        OPERATOR,
    ),
    # Kubernetes' rules for what the pods get (api/kube_rules.py): resources.
    (
        "requests-above-limits",
        {"spec": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}},
        "spec.resources.requests.cpu",
        "2 is more than limits.cpu (1)",
        OPERATOR,
    ),
    (
        "memory-request-above-limit",
        {"spec": {"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1000Mi"}}}},
        "spec.resources.requests.memory",
        "more than limits.memory (1000Mi)",
        OPERATOR,
    ),
    (
        "cpu-negative",
        {"spec": {"resources": {"requests": {"cpu": "-1"}}}},
        "spec.resources.requests.cpu",
        "is negative",
        OPERATOR,
    ),
    (
        "resource-not-standard",
        {"spec": {"resources": {"limits": {"gpu": "1"}}}},
        "spec.resources.limits.gpu",
        "not a standard resource",
        OPERATOR,
    ),
    (
        "resource-name-empty",
        {"spec": {"resources": {"limits": {"example.com/": "1"}}}},
        "spec.resources.limits.example.com/",
        "must be a qualified name",
        OPERATOR,
    ),
    (
        "resource-prefix-uppercase",
        {"spec": {"resources": {"limits": {"Example.com/dev": "1"}}}},
        "spec.resources.limits.Example.com/dev",
        "prefix must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "memory-in-gb",
        {"spec": {"resources": {"limits": {"memory": "2GB"}}}},
        "spec.resources.limits.memory",
        "not a Kubernetes quantity",
        SCHEMA,
    ),
    (
        "cpu-two-dots",
        {"spec": {"resources": {"requests": {"cpu": "1.5.5"}}}},
        "spec.resources.requests.cpu",
        "not a Kubernetes quantity",
        SCHEMA,
    ),
    ("shm-size-negative", {"spec": {"shmSize": "-1Gi"}}, "spec.shmSize", "must be more than 0", OPERATOR),
    ("shm-size-zero", {"spec": {"shmSize": "0"}}, "spec.shmSize", "must be more than 0", OPERATOR),
    # Node selectors and labels.
    (
        "node-selector-key-space",
        {"spec": {"nodeSelector": {"gpu type": "a100"}}},
        "spec.nodeSelector",
        "key must be a qualified name",
        OPERATOR,
    ),
    (
        "node-selector-key-two-slashes",
        {"spec": {"nodeSelector": {"a/b/c": "x"}}},
        "spec.nodeSelector",
        "key prefix must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "node-selector-key-prefix-uppercase",
        {"spec": {"nodeSelector": {"Example.com/x": "y"}}},
        "spec.nodeSelector",
        "prefix must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "node-selector-key-empty",
        {"spec": {"nodeSelector": {"": "x"}}},
        "spec.nodeSelector",
        "must be a qualified name",
        OPERATOR,
    ),
    (
        "node-selector-key-too-long",
        {"spec": {"nodeSelector": {"k" * 64: "x"}}},
        "spec.nodeSelector",
        "at most 63 characters",
        OPERATOR,
    ),
    (
        "node-selector-value-space",
        {"spec": {"nodeSelector": {"gpu": "a 100"}}},
        "spec.nodeSelector",
        "must be a label value",
        OPERATOR,
    ),
    (
        "node-selector-value-dash",
        {"spec": {"nodeSelector": {"gpu": "-a100"}}},
        "spec.nodeSelector",
        "starting and ending alphanumeric",
        OPERATOR,
    ),
    (
        "node-selector-value-too-long",
        {"spec": {"nodeSelector": {"gpu": "v" * 64}}},
        "spec.nodeSelector.gpu",
        "at most 63 characters",
        SCHEMA,
    ),
    # Names of other objects.
    (
        "priority-class-underscore",
        {"spec": {"priorityClassName": "Not_Valid"}},
        "spec.priorityClassName",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "priority-class-uppercase",
        {"spec": {"priorityClassName": "High"}},
        "spec.priorityClassName",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "service-account-space",
        {"spec": {"serviceAccountName": "my account"}},
        "spec.serviceAccountName",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "service-account-too-long",
        {"spec": {"serviceAccountName": "a" * 254}},
        "spec.serviceAccountName",
        "at most 253 characters",
        OPERATOR,
    ),
    (
        "scheduler-uppercase",
        {"spec": {"schedulerName": "Volcano"}},
        "spec.schedulerName",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "scheduler-double-dot",
        {"spec": {"schedulerName": "a..b"}},
        "spec.schedulerName",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    # Mounts and volume sources.
    (
        "mount-path-twice",
        {
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/data"}, {"name": "b", "mountPath": "/data/"}],
            }
        },
        "spec.volumeMounts[1].mountPath",
        "mounted twice",
        OPERATOR,
    ),
    (
        "sub-path-climbs",
        {
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/data", "subPath": "../x"}],
            }
        },
        "spec.volumeMounts[0].subPath",
        "relative path without '..'",
        OPERATOR,
    ),
    (
        "sub-path-absolute",
        {
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/data", "subPath": "/etc"}],
            }
        },
        "spec.volumeMounts[0].subPath",
        "relative path without '..'",
        OPERATOR,
    ),
    (
        "sub-path-climbs-midway",
        {
            "spec": {
                "volumes": [{"name": "a", "emptyDir": {}}],
                "volumeMounts": [{"name": "a", "mountPath": "/d", "subPath": "a/../../b"}],
            }
        },
        "spec.volumeMounts[0].subPath",
        "relative path without '..'",
        OPERATOR,
    ),
    (
        "claim-name-underscore",
        {"spec": {"volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": "Bad_Claim"}}]}},
        "spec.volumes[0].persistentVolumeClaim.claimName",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "claim-name-number",
        {"spec": {"volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": 7}}]}},
        "spec.volumes[0].persistentVolumeClaim.claimName",
        "must be a string",
        OPERATOR,
    ),
    (
        "config-map-name-path",
        {"spec": {"volumes": [{"name": "a", "configMap": {"name": "../x"}}]}},
        "spec.volumes[0].configMap.name",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "secret-name-uppercase",
        {"spec": {"volumes": [{"name": "a", "secret": {"secretName": "TOKEN"}}]}},
        "spec.volumes[0].secret.secretName",
        "must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "volume-name-uppercase",
        {"spec": {"volumes": [{"name": "Data", "emptyDir": {}}]}},
        "spec.volumes[0].name",
        "should match pattern",
        SCHEMA,
    ),
    (
        "volume-name-too-long",
        {"spec": {"volumes": [{"name": "v" * 64, "emptyDir": {}}]}},
        "spec.volumes[0].name",
        "at most 63 characters",
        SCHEMA,
    ),
    (
        "mount-path-relative",
        {"spec": {"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "data"}]}},
        "spec.volumeMounts[0].mountPath",
        "should match pattern",
        SCHEMA,
    ),
    (
        "mount-name-empty",
        {"spec": {"volumeMounts": [{"name": "", "mountPath": "/data"}]}},
        "spec.volumeMounts[0].name",
        "at least 1 character",
        SCHEMA,
    ),
    # A podTemplate's metadata.
    (
        "pod-template-label-key-space",
        {"spec": {"podTemplate": {"metadata": {"labels": {"a b": "x"}}}}},
        "spec.podTemplate.metadata.labels",
        "key must be a qualified name",
        OPERATOR,
    ),
    (
        "pod-template-label-value-bad",
        {"spec": {"podTemplate": {"metadata": {"labels": {"team": "a b"}}}}},
        "spec.podTemplate.metadata.labels",
        "must be a label value",
        OPERATOR,
    ),
    (
        "pod-template-label-value-number",
        {"spec": {"podTemplate": {"metadata": {"labels": {"team": 7}}}}},
        "spec.podTemplate.metadata.labels",
        "must be a string",
        OPERATOR,
    ),
    (
        "pod-template-annotation-key-bad",
        {"spec": {"podTemplate": {"metadata": {"annotations": {"x/y/z": "1"}}}}},
        "spec.podTemplate.metadata.annotations",
        "prefix must be a DNS-1123 subdomain",
        OPERATOR,
    ),
    (
        "pod-template-annotations-too-big",
        {"spec": {"podTemplate": {"metadata": {"annotations": {"big": "x" * (256 * 1024)}}}}},
        "spec.podTemplate.metadata.annotations",
        "annotations may hold at most 262144",
        OPERATOR,
    ),
    (
        "pod-template-labels-not-mapping",
        {"spec": {"podTemplate": {"metadata": {"labels": "team=a"}}}},
        "spec.podTemplate.metadata.labels",
        "must be a mapping of strings",
        OPERATOR,
    ),
    (
        "pod-template-metadata-string",
        {"spec": {"podTemplate": {"metadata": "x"}}},
        "spec.podTemplate.metadata",
        "must be a mapping, not str",
        OPERATOR,
    ),
    (
        "pod-template-volumes-not-list",
        {"spec": {"podTemplate": {"spec": {"volumes": {"name": "a"}}}}},
        "spec.podTemplate.spec.volumes",
        "must be a list, not dict",
        OPERATOR,
    ),
    (
        "pod-template-init-container-without-name",
        {"spec": {"podTemplate": {"spec": {"initContainers": [{"image": "busybox"}]}}}},
        "spec.podTemplate.spec.initContainers[0]",
        "a mapping with a name",
        OPERATOR,
    ),
    # The ScaleTrainJob's own metadata, which the API server checks.
    (
        "label-key-space",
        {"metadata": {"labels": {"a b": "x"}}},
        "metadata.labels",
        "key must be a qualified name",
        SCHEMA,
    ),
    (
        "label-value-dash",
        {"metadata": {"labels": {"team": "-a"}}},
        "metadata.labels",
        "must be a label value",
        SCHEMA,
    ),
    (
        "annotation-key-bad",
        {"metadata": {"annotations": {"a b": "x"}}},
        "metadata.annotations",
        "key must be a qualified name",
        SCHEMA,
    ),
    (
        "annotations-too-big",
        {"metadata": {"annotations": {"big": "x" * (256 * 1024)}}},
        "metadata.annotations",
        "annotations may hold at most 262144",
        SCHEMA,
    ),
    # Strict types.
    ("gpus-numeric-string", {"spec": {"gpusPerNode": "8"}}, "spec.gpusPerNode", "valid integer", SCHEMA),
    ("max-restarts-string", {"spec": {"maxRestarts": "3"}}, "spec.maxRestarts", "valid integer", SCHEMA),
    ("max-restarts-boolean", {"spec": {"maxRestarts": True}}, "spec.maxRestarts", "valid integer", SCHEMA),
    (
        "max-steps-string",
        {"spec": {"training": {"maxSteps": "100"}}},
        "spec.training.maxSteps",
        "valid integer",
        SCHEMA,
    ),
    (
        "global-batch-fraction",
        {"spec": {"training": {"globalBatchSize": 8.5}}},
        "spec.training.globalBatchSize",
        "valid integer",
        SCHEMA,
    ),
    (
        "lr-boolean",
        {"spec": {"training": {"optimizer": {"lr": True}}}},
        "spec.training.optimizer.lr",
        "valid number",
        SCHEMA,
    ),
    ("seed-string", {"spec": {"training": {"seed": "1"}}}, "spec.training.seed", "valid integer", SCHEMA),
    (
        "deadline-string",
        {"spec": {"activeDeadlineSeconds": "60"}},
        "spec.activeDeadlineSeconds",
        "valid integer",
        SCHEMA,
    ),
    (
        "ttl-boolean",
        {"spec": {"ttlSecondsAfterFinished": False}},
        "spec.ttlSecondsAfterFinished",
        "valid integer",
        SCHEMA,
    ),
    ("shm-boolean", {"spec": {"shmSize": True}}, "spec.shmSize", "not a Kubernetes quantity", SCHEMA),
    ("suspend-number", {"spec": {"suspend": 1}}, "spec.suspend", "valid boolean", SCHEMA),
    ("env-value-number", {"spec": {"env": [{"name": "X", "value": 5}]}}, "spec.env[0].value", "valid string", SCHEMA),
    ("command-number", {"spec": {"command": ["python", 1]}}, "spec.command[1]", "valid string", SCHEMA),
    ("args-string", {"spec": {"args": "train.py"}}, "spec.args", "valid list", SCHEMA),
    ("image-number", {"spec": {"image": 5}}, "spec.image", "valid string", SCHEMA),
    # Tolerations.
    (
        "toleration-seconds-without-no-execute",
        {"spec": {"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]}},
        "spec.tolerations[0].tolerationSeconds",
        "only applies to effect NoExecute",
        OPERATOR,
    ),
    (
        "toleration-effect-unknown",
        {"spec": {"tolerations": [{"key": "k", "effect": "Sometimes"}]}},
        "spec.tolerations[0].effect",
        "'NoSchedule'",
        SCHEMA,
    ),
    (
        "toleration-key-space",
        {"spec": {"tolerations": [{"key": "a b", "operator": "Exists"}]}},
        "spec.tolerations[0].key",
        "must be a qualified name",
        OPERATOR,
    ),
    # Sizes and ranges.
    ("gpu-resource-bare", {"spec": {"gpuResource": "gpu"}}, "spec.gpuResource", "should match pattern", SCHEMA),
    ("procs-too-many", {"spec": {"procsPerNode": 300}}, "spec.procsPerNode", "less than or equal to 256", SCHEMA),
    ("gpus-too-many", {"spec": {"gpusPerNode": 65}}, "spec.gpusPerNode", "less than or equal to 64", SCHEMA),
    ("nodes-negative", {"spec": {"nodes": -1}}, "spec.nodes", "greater than or equal to 1", SCHEMA),
    ("max-restarts-negative", {"spec": {"maxRestarts": -1}}, "spec.maxRestarts", "greater than or equal to 0", SCHEMA),
    ("backend-uppercase", {"spec": {"backend": "NCCL"}}, "spec.backend", "'auto', 'nccl' or 'gloo'", SCHEMA),
    (
        "tolerations-too-many",
        {"spec": {"tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(65)]}},
        "spec.tolerations",
        "at most 64 items",
        SCHEMA,
    ),
    (
        "model-layers-zero",
        {"spec": {"training": {"model": {"layers": 0}}}},
        "spec.training.model.layers",
        "greater than or equal to 1",
        SCHEMA,
    ),
    (
        "run-as-user-negative",
        {"spec": {"securityContext": {"runAsUser": -1}}},
        "spec.securityContext.runAsUser",
        "greater than or equal to 0",
        SCHEMA,
    ),
    (
        "fs-group-string",
        {"spec": {"securityContext": {"fsGroup": "x"}}},
        "spec.securityContext.fsGroup",
        "valid integer",
        SCHEMA,
    ),
    ("affinity-string", {"spec": {"affinity": "x"}}, "spec.affinity", "valid dictionary", SCHEMA),
    (
        "env-name-starts-with-digit",
        {"spec": {"env": [{"name": "1ABC", "value": "x"}]}},
        "spec.env[0].name",
        "should match pattern",
        SCHEMA,
    ),
    (
        "env-name-with-equals",
        {"spec": {"env": [{"name": "A=B", "value": "x"}]}},
        "spec.env[0].name",
        "should match pattern",
        SCHEMA,
    ),
    (
        "env-name-empty",
        {"spec": {"env": [{"name": "", "value": "x"}]}},
        "spec.env[0].name",
        "at least 1 character",
        SCHEMA,
    ),
    (
        "micro-batch-zero",
        {"spec": {"training": {"microBatchSize": 0}}},
        "spec.training.microBatchSize",
        "greater than or equal to 1",
        SCHEMA,
    ),
    (
        "log-every-zero",
        {"spec": {"training": {"logEverySteps": 0}}},
        "spec.training.logEverySteps",
        "greater than or equal to 1",
        SCHEMA,
    ),
    (
        "checkpoint-every-negative",
        {"spec": {"training": {"checkpoint": {"everySteps": -1}}}},
        "spec.training.checkpoint.everySteps",
        "greater than or equal to 1",
        SCHEMA,
    ),
    (
        "synthetic-samples-zero",
        {"spec": {"training": {"data": {"syntheticSamples": 0}}}},
        "spec.training.data.syntheticSamples",
        "greater than or equal to 1",
        SCHEMA,
    ),
    (
        "heads-string",
        {"spec": {"training": {"model": {"heads": "4"}}}},
        "spec.training.model.heads",
        "valid integer",
        SCHEMA,
    ),
    ("precision-number", {"spec": {"training": {"precision": 16}}}, "spec.training.precision", "'bf16'", SCHEMA),
    (
        "token-dtype-unknown",
        {"spec": {"training": {"data": {"tokenDtype": "int8"}}}},
        "spec.training.data.tokenDtype",
        "'uint16' or 'uint32'",
        SCHEMA,
    ),
    (
        "grad-clip-negative",
        {"spec": {"training": {"gradClipNorm": -1}}},
        "spec.training.gradClipNorm",
        "greater than or equal to 0",
        SCHEMA,
    ),
    (
        "dropout-string",
        {"spec": {"training": {"model": {"dropout": "0.1"}}}},
        "spec.training.model.dropout",
        "valid number",
        SCHEMA,
    ),
    ("queue-name-space", {"spec": {"queueName": "team a"}}, "spec.queueName", "must be a label value", OPERATOR),
    (
        "env-too-many",
        {"spec": {"env": [{"name": f"V{i}", "value": "x"} for i in range(513)]}},
        "spec.env",
        "at most 512 items",
        SCHEMA,
    ),
    (
        "volumes-too-many",
        {"spec": {"volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(65)]}},
        "spec.volumes",
        "at most 64 items",
        SCHEMA,
    ),
    (
        "failure-rule-names-twice",
        {
            "spec": {
                "failurePolicy": {"rules": [{"name": "A", "action": "FailJob"}, {"name": "A", "action": "RestartGang"}]}
            }
        },
        "spec.failurePolicy.rules",
        "each rule's name must be unique",
        CEL,
    ),
    (
        "failure-rule-action-unknown",
        {"spec": {"failurePolicy": {"rules": [{"name": "A", "action": "Retry"}]}}},
        "spec.failurePolicy.rules[0].action",
        "'FailJob', 'RestartGang' or 'RestartGangIgnoreLimit'",
        SCHEMA,
    ),
    (
        "failure-rule-name-not-a-reason",
        {"spec": {"failurePolicy": {"rules": [{"name": "bad input", "action": "FailJob"}]}}},
        "spec.failurePolicy.rules[0].name",
        "should match pattern",
        SCHEMA,
    ),
    (
        "failure-rule-exit-code-too-big",
        {
            "spec": {
                "failurePolicy": {
                    "rules": [{"name": "A", "action": "FailJob", "onExitCodes": {"operator": "In", "values": [256]}}]
                }
            }
        },
        "spec.failurePolicy.rules[0].onExitCodes.values[0]",
        "less than or equal to 255",
        SCHEMA,
    ),
    (
        "grace-period-set-twice",
        {
            "spec": {
                "terminationGracePeriodSeconds": 600,
                "podTemplate": {"spec": {"terminationGracePeriodSeconds": 30}},
            }
        },
        "spec.podTemplate.spec.terminationGracePeriodSeconds",
        "set it in one place",
        OPERATOR,
    ),
    *REFUSED_AT_JOB_CREATION,
    (
        "wrong-kind",
        {"kind": "PyTorchJob"},
        "kind",
        "expected apiVersion scaletrain.io/v1alpha1 and kind ScaleTrainJob",
        None,
    ),
]
