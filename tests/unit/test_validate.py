"""`scaletrain validate` and `render` on good and bad input: every problem with its field path,
clear messages, no tracebacks. Each malformed spec also says which layer of a real cluster rejects
it (the CRD's OpenAPI schema, its CEL rules, or only the operator), and that claim is checked."""

from __future__ import annotations

import re

import pytest
import yaml

from support.cli import run_cli
from support.jobs import DELETE, EXAMPLES, base_job, patched
from support.kube_schema import apply_defaults, cel_failures, schema_errors

SCHEMA, CEL, OPERATOR = "schema", "cel", "operator"

# (id, patch over base_job(), expected path, expected message fragment, layer that rejects it)
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
    ("training-missing", {"spec": {"training": DELETE}}, "spec.training", "required field is missing", SCHEMA),
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
        "set by ScaleTrain",
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
    (
        "wrong-kind",
        {"kind": "PyTorchJob"},
        "kind",
        "expected apiVersion scaletrain.io/v1alpha1 and kind ScaleTrainJob",
        None,
    ),
]


def _document(patch):
    return patched(base_job(), patch)


def _problems_by_file(stderr: str) -> dict[str, list[tuple[str, str]]]:
    """Parse `validate` output: a 'FILE: invalid ...' header, then '  path: message' lines."""
    problems: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in stderr.splitlines():
        if line.startswith("  ") and current is not None:
            path, _, message = line.strip().partition(": ")
            problems[current].append((path, message))
        else:
            current = line.split(": invalid", 1)[0]
            problems[current] = []
    return problems


@pytest.fixture(scope="module")
def validate_output(tmp_path_factory):
    """One `scaletrain validate` run over every malformed file (one process keeps the suite fast)."""
    directory = tmp_path_factory.mktemp("malformed")
    files = []
    for case_id, patch, *_ in MALFORMED:
        path = directory / f"{case_id}.yaml"
        path.write_text(yaml.safe_dump(_document(patch)))
        files.append(str(path))
    result = run_cli("validate", *files)
    return result, _problems_by_file(result.stderr), directory


def test_table_is_large_enough():
    assert len(MALFORMED) >= 30
    assert len({case[0] for case in MALFORMED}) == len(MALFORMED)


def test_base_job_is_valid():
    result = run_cli("validate", "-", stdin=yaml.safe_dump(base_job()))
    assert result.returncode == 0, result.stderr
    assert "world size 2" in result.stdout and "2 accumulation step(s)" in result.stdout


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_spec_is_rejected_at_its_field(case, validate_output):
    case_id, _, path, fragment, _ = case
    result, problems, directory = validate_output
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    reported = problems[str(directory / f"{case_id}.yaml")]
    assert [p for p, _ in reported] == [path], reported
    assert fragment in reported[0][1]


@pytest.mark.parametrize("case", [c for c in MALFORMED if c[4] is not None], ids=lambda c: c[0])
def test_cluster_layer_that_rejects_each_malformed_spec(case, crd_schema):
    """SCHEMA cases fail the CRD's OpenAPI schema; CEL cases pass it but fail a CEL rule at the same
    field; OPERATOR cases get past the CRD, and the operator reports them."""
    _, patch, path, _, layer = case
    document = _document(patch)
    structural = schema_errors(crd_schema, document)
    cel = [] if structural else cel_failures(crd_schema, apply_defaults(crd_schema, document))
    if layer == SCHEMA:
        assert structural
    elif layer == CEL:
        assert not structural
        # Root rules cannot set a fieldPath into metadata (it has no schema); their message names the field.
        assert path in [p.lstrip(".") or message.split(" ", 1)[0] for p, message in cel], cel
    else:
        assert not structural and not cel


def test_every_problem_is_reported_at_once(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(
        yaml.safe_dump(
            _document(
                {
                    "spec": {
                        "nodes": 0,
                        "backend": "mpi",
                        "shmSize": "lots",
                        "training": {"precision": "fp8", "globalBatchsize": 1},
                    }
                }
            )
        )
    )
    result = run_cli("validate", str(path))
    reported = [p for p, _ in _problems_by_file(result.stderr)[str(path)]]
    assert sorted(reported) == sorted(
        [
            "spec.nodes",
            "spec.backend",
            "spec.shmSize",
            "spec.training.precision",
            "spec.training.globalBatchsize",
        ]
    )
    assert f"{path}: invalid ScaleTrainJob (5 problems)" in result.stderr


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("spec: [unclosed", "not valid YAML"),
        ("", "no YAML document found"),
        ("- just\n- a list\n", "expected a ScaleTrainJob mapping, got list"),
    ],
)
def test_unparseable_input_gets_a_clear_error(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for command in ("validate", "render"):
        result = run_cli(command, str(path))
        assert result.returncode != 0
        assert fragment in result.stderr and "Traceback" not in result.stderr


def test_missing_file_is_a_clear_error():
    result = run_cli("validate", "/nonexistent/job.yaml")
    assert result.returncode != 0
    assert "/nonexistent/job.yaml: cannot read" in result.stderr and "Traceback" not in result.stderr


def test_multi_document_file_names_the_document(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([base_job(), _document({"spec": {"nodes": 0}})]))
    result = run_cli("validate", str(path))
    assert result.returncode == 1
    assert "document 2.spec.nodes: Input should be greater than or equal to 1 (got 0)" in result.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_and_render(path):
    validated = run_cli("validate", str(path))
    assert validated.returncode == 0 and re.search(r"is valid: .* world size \d+", validated.stdout)
    rendered = run_cli("render", str(path), "-n", "elsewhere")
    assert rendered.returncode == 0, rendered.stderr
    children = list(yaml.safe_load_all(rendered.stdout))
    assert [c["kind"] for c in children] == ["Service", "Job"]
    assert {c["metadata"]["namespace"] for c in children} == {"elsewhere"}
    assert "ownerReferences omitted" in rendered.stderr


def test_render_output_equals_the_renderer(tmp_path):
    from scaletrain_operator.api.models import parse_job
    from scaletrain_operator.api.render import render_children

    document = base_job()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    rendered = run_cli("render", str(path), "--generation", "2")
    assert list(yaml.safe_load_all(rendered.stdout)) == render_children(parse_job(document), 2)
    assert run_cli("render", str(path), "--generation", "-1").returncode == 2


def test_render_rejects_an_invalid_job_without_output(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_document({"spec": {"nodes": 0}})))
    result = run_cli("render", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert "spec.nodes: Input should be greater than or equal to 1 (got 0)" in result.stderr
