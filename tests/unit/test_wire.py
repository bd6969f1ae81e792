"""The contract's `wire` module is the one definition of what passes between the operator and a pod:
each progress field reaches the CRD, the operator's reader and the trainer's endpoint as `wire` says,
and the constants it names are spelled nowhere else."""

from __future__ import annotations

import json
import re
import tokenize

import pytest

from scaletrain_operator.api.crd import build_crd
from scaletrain_operator.validation.progress_answer import parse_progress, status_patch
from scaletrain_testing.jobs import REPO
from scaletrain_trainer.contract import exit_codes, wire

SCHEMA_TYPES = {
    "integer": "integer", "number": "number", "boolean": "boolean", "timestamp": "string", "named numbers": "object"
}  # fmt: skip
SOURCES = sorted((REPO / "operator").rglob("*.py")) + sorted((REPO / "trainer").rglob("*.py"))
WIRE = REPO / "trainer" / "scaletrain_trainer" / "contract" / "wire.py"
# A value of each kind that every field of that kind takes.
FITTING = {
    "integer": 7, "number": 0.5, "timestamp": "2026-12-01T10:00:00Z", "set-aside names": ["step-4.corrupt"],
    "named numbers": {"learning_rate": 0.0003},
}  # fmt: skip


def progress_schema() -> dict:
    (version,) = build_crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["progress"]["properties"]


@pytest.mark.parametrize("field", wire.PROGRESS_FIELDS, ids=lambda field: field.name)
def test_each_progress_field_is_in_the_crd_with_its_type_and_bounds(field):
    schema = progress_schema()[field.name]
    assert schema["description"] == field.description
    assert schema.get("minimum") == field.minimum and schema.get("maximum") == field.maximum
    if field.kind == "set-aside names":
        assert schema["maxItems"] == wire.MAX_SET_ASIDE and schema["items"]["maxLength"] == wire.MAX_TEXT
    elif field.kind == "named numbers":
        assert schema["maxProperties"] == wire.MAX_METRICS and schema["additionalProperties"]["type"] == "number"
    else:
        assert schema["type"] == SCHEMA_TYPES[field.kind]


def test_the_crd_has_no_progress_field_wire_lacks():
    assert list(progress_schema()) == [field.name for field in wire.PROGRESS_FIELDS]


def test_kubectl_columns_are_the_fields_wire_gives_one():
    (version,) = build_crd()["spec"]["versions"]
    columns = {column["jsonPath"]: column for column in version["additionalPrinterColumns"]}
    for field in wire.PROGRESS_FIELDS:
        column = columns.get(f".status.progress.{field.name}")
        assert (column is None) == (field.column is None), field.name
        if column is not None:
            assert column["name"] == field.column.header and column["type"] == SCHEMA_TYPES[field.kind]
            assert column.get("priority", 0) == (1 if field.column.wide else 0)


@pytest.mark.parametrize("field", wire.REPORTED, ids=lambda field: field.name)
def test_the_reader_keeps_a_reported_value_in_range_and_drops_one_out_of_it(field):
    fitting = FITTING[field.kind]
    assert parse_progress(json.dumps({field.name: fitting}).encode()) == {field.name: fitting}
    beyond = [bound + sign for bound, sign in ((field.minimum, -1), (field.maximum, 1)) if bound is not None]
    for value in (*beyond, "text" if field.kind != "timestamp" else 1, None):
        assert field.name not in parse_progress(json.dumps({field.name: value}).encode()), value


def test_the_operator_adds_its_own_fields_and_takes_none_of_them_from_rank_0():
    stamped = {field.name for field in wire.PROGRESS_FIELDS} - {field.name for field in wire.REPORTED}
    assert stamped == {"lossFinite", "generation", "readAt", "reportedAt"}
    operators = (
        b'{"generation": 9, "readAt": "2026-12-01T10:00:00Z", "reportedAt": "2026-12-01T10:00:00Z", "lossFinite": true}'
    )
    assert parse_progress(operators) == {}
    patch = status_patch({"step": 3}, generation=2, stored={})
    assert set(patch) == {field.name for field in wire.PROGRESS_FIELDS} and patch["generation"] == 2


def test_rounded_fields_are_rounded_for_kubectl_and_the_rest_kept_whole():
    progress = {field.name: 1.23456789 for field in wire.REPORTED if field.kind == "number"}
    patch = status_patch(progress, generation=0, stored={})
    for field in wire.REPORTED:
        if field.kind == "number":
            assert patch[field.name] == (1.235 if field.rounded else 1.23456789), field.name


def string_literals(path) -> list[tuple[int, str]]:
    with tokenize.open(path) as file:
        return [(token.start[0], token.string) for token in tokenize.generate_tokens(file.readline)
                if token.type == tokenize.STRING]  # fmt: skip


def test_the_envs_wire_names_are_spelled_in_no_other_module():
    names = {value for key, value in vars(wire).items() if key.endswith("_ENV")}
    assert "SCALETRAIN_CONFIG" in names
    found = [
        f"{path.relative_to(REPO)}:{line}: {text}"
        for path in SOURCES
        if path != WIRE
        for line, text in string_literals(path)
        if text.strip("'\"") in names
    ]
    assert found == []


def test_the_termination_message_limit_is_defined_once():
    defined = re.compile(r"^\s*\w*(TERMINATION|MESSAGE)\w*\s*(:\s*\w+\s*)?=\s*4096\b", re.M)
    found = [str(path.relative_to(REPO)) for path in SOURCES if defined.search(path.read_text())]
    assert found == [str(WIRE.relative_to(REPO))]


def test_no_crd_description_spells_an_exit_code_by_hand():
    """Descriptions take the codes from exit_codes, so that they cannot drift from what pods exit with."""
    codes = "|".join(str(code) for code in exit_codes.EXIT_CODES.values())
    by_hand = re.compile(rf"\bexit(s|ing)? (code )?({codes})\b")
    described = [
        REPO / "operator/scaletrain_operator/api/spec.py",
        REPO / "operator/scaletrain_operator/api/job_status.py",
        REPO / "trainer/scaletrain_trainer/contract/config.py",
    ]
    found = [
        f"{path.name}:{line}: {text}"
        for path in described
        for line, text in string_literals(path)
        if by_hand.search(text)
    ]
    assert found == []
