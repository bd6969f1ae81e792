"""`scaletrain validate` and `render` on good and bad input: every problem with its field path,
clear messages, no tracebacks. Each malformed spec also says which layer of a real cluster rejects
it (the CRD's OpenAPI schema, its CEL rules, or only the operator), and that claim is checked."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from scaletrain_testing.cli import run_cli
from scaletrain_testing.jobs import DELETE, EXAMPLES, base_job, patched
from scaletrain_testing.malformed import MALFORMED


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
    for case in MALFORMED:
        path = directory / f"{case.name}.yaml"
        path.write_text(yaml.safe_dump(_document(case.patch)))
        files.append(str(path))
    result = run_cli("validate", *files)
    return result, _problems_by_file(result.stderr), directory


def test_table_is_large_enough():
    assert len(MALFORMED) >= 30
    assert len({case.name for case in MALFORMED}) == len(MALFORMED)


def test_base_job_is_valid():
    result = run_cli("validate", "-", stdin=yaml.safe_dump(base_job()))
    assert result.returncode == 0, result.stderr
    assert "world size 2" in result.stdout and "2 accumulation step(s)" in result.stdout


@pytest.mark.parametrize("case", MALFORMED, ids=lambda case: case.name)
def test_malformed_spec_is_rejected_at_its_field(case, validate_output):
    result, problems, directory = validate_output
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    reported = problems[str(directory / f"{case.name}.yaml")]
    assert [p for p, _ in reported] == [case.field_path], reported
    assert case.message_fragment in reported[0][1]


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


def test_an_unreadable_or_garbled_file_exits_2_in_every_command(tmp_path):
    garbled = tmp_path / "garbled.yaml"
    garbled.write_text("spec: [unclosed\n")
    for command in ("validate", "render", "run-local"):
        missing = run_cli(command, "/nonexistent/job.yaml")
        assert missing.returncode == 2, command
        assert "/nonexistent/job.yaml: cannot read" in missing.stderr and "Traceback" not in missing.stderr
        unparsable = run_cli(command, str(garbled))
        assert (
            unparsable.returncode == 2
            and "not valid YAML" in unparsable.stderr
            and "line 2, column" in unparsable.stderr
        )


def test_render_refuses_a_namespace_that_is_not_one(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(base_job()))
    result = run_cli("render", str(path), "-n", "Bad NS/../x")
    assert result.returncode == 2 and "'Bad NS/../x' is not a namespace name" in result.stderr
    assert result.stdout == ""


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
    assert [c["kind"] for c in children] == ["Workload", "Service", "Service", "Job"]
    assert {c["metadata"]["namespace"] for c in children} == {"elsewhere"}
    assert "ownerReferences omitted" in rendered.stderr


def test_render_output_equals_the_renderer(tmp_path):
    from scaletrain_operator.api.job import parse_job
    from scaletrain_operator.render.children import render_children

    document = base_job()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    rendered = run_cli("render", str(path), "--generation", "2")
    assert list(yaml.safe_load_all(rendered.stdout)) == render_children(parse_job(document), 2)
    assert run_cli("render", str(path), "--generation", "-1").returncode == 2


def test_render_quotes_what_kubernetes_would_read_as_a_number_and_validate_says_what_runs(tmp_path):
    """`2e-5` is a string to PyYAML but a float to Kubernetes' YAML reader: written plain, an argument
    would reach the API server as a number and be refused."""
    path = tmp_path / "job.yaml"
    job = base_job(training=DELETE, command=["python", "train.py"], args=["--lr", "2e-5"])
    path.write_text(json.dumps(job))  # JSON quotes it (yaml.safe_dump would not)
    rendered = run_cli("render", str(path))
    assert rendered.returncode == 0 and "- '2e-5'" in rendered.stdout
    validated = run_cli("validate", str(path))
    assert validated.returncode == 0 and "its own command, without a training block" in validated.stdout


def test_render_rejects_an_invalid_job_without_output(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_document({"spec": {"nodes": 0}})))
    result = run_cli("render", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert "spec.nodes: Input should be greater than or equal to 1 (got 0)" in result.stderr
