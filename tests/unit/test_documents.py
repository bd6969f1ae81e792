"""YAML read as Kubernetes reads it (trainer/scaletrain_trainer/documents.py), within the API server's
limits: exponent numbers are numbers, and oversized or absurdly nested input is a clear error."""

from __future__ import annotations

import time

import pytest

from scaletrain_trainer.contract.documents import MAX_DOCUMENT_BYTES, DocumentError, load_documents


def test_numbers_are_read_as_kubernetes_reads_them():
    (document,) = load_documents("lr: 3e-4\nbig: 1E5\nplain: 10\nsigned: +1.5e+3\nquoted: '3e-4'\nword: e5\n", "x")
    assert document == {"lr": 3e-4, "big": 1e5, "plain": 10, "signed": 1500.0, "quoted": "3e-4", "word": "e5"}
    assert isinstance(document["plain"], int)


def test_json_is_yaml():
    assert load_documents('{"optimizer": {"eps": 1e-08}}', "x") == [{"optimizer": {"eps": 1e-8}}]


def test_a_document_larger_than_the_api_server_takes_is_refused_before_parsing():
    text = "a: " + "x" * MAX_DOCUMENT_BYTES
    started = time.monotonic()
    with pytest.raises(DocumentError, match=r"job\.yaml: \d+ bytes; the API server takes at most 3145728 bytes"):
        load_documents(text, "job.yaml")
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")])
def test_absurd_nesting_is_an_error_not_a_traceback(opening, closing):
    started = time.monotonic()
    nested = r"deep\.yaml: (nested more than 100 levels deep|not valid YAML: .*maximum nesting depth).*line 1, column"
    with pytest.raises(DocumentError, match=f"(?s){nested}"):  # ours, or libyaml's at 1000 flow levels
        load_documents(opening * 100_000 + closing * 100_000, "deep.yaml")
    assert time.monotonic() - started < 1  # refused as the parser reaches level 101, not after building it all


def test_a_syntax_error_names_the_line_and_column():
    with pytest.raises(DocumentError, match=r"(?s)bad\.yaml: not valid YAML: .*line 2, column 4"):
        load_documents("a: 1\n  b: [\n", "bad.yaml")


def test_deep_block_nesting_is_refused_at_the_line_it_goes_too_deep():
    text = "".join(" " * depth + "k:\n" for depth in range(150)) + " " * 150 + "v\n"
    with pytest.raises(DocumentError, match=r"nested more than 100 levels deep at line 101, column 101"):
        load_documents(text, "block.yaml")


def test_mapping_keys_are_strings_as_kubernetes_json_makes_them():
    """A label written `1: x` is {"1": "x"} to the API server; mixed key types once broke validation."""
    (document,) = load_documents("labels: {1: x, true: y, null: z, 2.5: w, a: b}", "job.yaml")
    assert document == {"labels": {"1": "x", "true": "y", "null": "z", "2.5": "w", "a": "b"}}


def test_a_mapping_keyed_by_a_list_is_a_document_error():
    with pytest.raises(DocumentError, match="a key must be a scalar"):
        load_documents("? [a, b]\n: c\n", "job.yaml")
