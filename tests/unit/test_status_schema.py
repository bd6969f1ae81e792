"""Values a tenant's pod can put in front of the operator (rank 0's /progress answers and termination
messages) that Python takes but the CRD's status schema refuses: none may make a status write fail, and
a status write is held against the CRD's own schema first (api/status_schema.py)."""

from __future__ import annotations

import json

import pytest

from scaletrain_operator.api.crd import build_crd, status_schema
from scaletrain_operator.validation.progress_answer import final_progress, parse_progress, status_patch
from scaletrain_operator.validation.status_schema import fit_status, schema_problem

HUGE = 10**400  # an integer JSON allows, and float64 does not hold


@pytest.mark.parametrize(
    "answer",
    [
        {"step": 3, "loss": HUGE},
        {"step": 3, "evalLoss": -HUGE, "tokensPerSecond": HUGE, "mfu": HUGE},
        {"step": 3, "updatedAt": "20261130T120000+00:00"},  # ISO 8601's basic format: Python parses it
        {"step": 3, "staleAfter": "2026-11-30T12:00:00+05:30:15"},  # an offset with seconds: not RFC 3339
        {"step": 3, "checkpointsSetAside": ["step-" + "0" * 60 + ".corrupt"]},  # over the schema's 64
        {"step": 2**63, "maxSteps": 2**63 - 1},  # step beyond int64
    ],
    ids=["huge-loss", "huge-numbers", "basic-time", "second-offset", "long-name", "int64"],
)
def test_no_answer_a_pod_can_give_makes_a_status_write_the_schema_refuses(answer):
    body = json.dumps(answer).encode()
    for progress in (parse_progress(body), final_progress(body.decode())):  # neither raises
        patch = {"progress": status_patch(progress, 0, {})}
        kept, left_out = fit_status(patch, status_schema())
        assert left_out == [] and kept == patch, left_out


def test_timestamps_are_written_in_rfc_3339_whatever_iso_spelling_rank_0_used():
    progress = parse_progress(b'{"step": 1, "updatedAt": "20261130T120000+00:00"}')
    assert status_patch(progress, 0, {})["updatedAt"] == "2026-11-30T12:00:00Z"


def test_fields_the_schema_refuses_are_left_out_and_named_and_the_rest_is_written():
    patch = {
        "phase": "Running",
        "restarts": 1,
        "message": "x",
        "progress": {"step": 3, "loss": float("nan"), "updatedAt": "yesterday", "maxSteps": 2**63},
        "conditions": [{"type": "NoSuchType", "status": "True", "reason": "R", "lastTransitionTime": "x"}],
        "gangs": None,  # a merge patch's null removes: always fits
    }
    kept, left_out = fit_status(patch, status_schema())
    assert kept == {"phase": "Running", "restarts": 1, "message": "x", "progress": {"step": 3}, "gangs": None}
    assert [problem.split(":")[0] for problem in left_out] == [
        "status.progress.loss",
        "status.progress.updatedAt",
        "status.progress.maxSteps",
        "status.conditions[0].type",
    ]


def test_the_checks_are_the_structural_schemas_own():
    assert schema_problem("Running", {"type": "string", "enum": ["Running"]}, "p") is None
    assert schema_problem("x" * 65, {"type": "string", "maxLength": 64}, "p") == "p: longer than 64 characters"
    assert schema_problem("a b", {"type": "string", "pattern": "^[a-z]+$"}, "p") == "p: does not match ^[a-z]+$"
    assert schema_problem(-1, {"type": "integer", "minimum": 0}, "p") == "p: below its minimum 0"
    assert schema_problem(True, {"type": "integer"}, "p") is not None  # a bool is no integer to Go either
    assert schema_problem([1, 2], {"type": "array", "maxItems": 1}, "p") == "p: 2 items"
    assert schema_problem({"a": 1}, {"type": "object", "properties": {}}, "p") == "p.a: not in the schema"
    assert (
        schema_problem({"a": {"b": 1}}, {"type": "object", "x-kubernetes-preserve-unknown-fields": True}, "p") is None
    )
    assert schema_problem("1Gi", {"x-kubernetes-int-or-string": True}, "p") is None


def test_the_schema_checked_against_is_the_crds():
    """One schema: the one the CRD is generated from, and that the API server applies."""
    status = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    progress = status["properties"]["progress"]
    assert progress["properties"]["checkpointsSetAside"]["items"]["maxLength"] == 64
    assert fit_status({"progress": {"checkpointsSetAside": ["x" * 65]}}, status_schema())[1] != []
