"""How the operator's progress reader (progress.py) tells an answer is whole, and words a failure."""

from __future__ import annotations

import socket

import pytest

from scaletrain_operator.api.crd import status_schema
from scaletrain_operator.progress import describe, is_whole
from scaletrain_operator.validation.progress_answer import status_patch
from scaletrain_operator.validation.status_schema import fit_status

HEAD = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"


@pytest.mark.parametrize(
    ("answer", "whole"),
    [
        (HEAD + b'{"step": 3}', True),
        (HEAD + b'{"step":', False),  # more to come
        (HEAD[:-2], False),  # the head has not ended
        (b"HTTP/1.0 200 OK\r\nCONTENT-LENGTH:  0 \r\n\r\n", True),
        (b'HTTP/1.0 200 OK\r\n\r\n{"step": 3}', False),  # no length: whole only when the server closes
        (b'HTTP/1.0 200 OK\r\nX-Content-Length: 1\r\n\r\n{"step": 3}', False),
    ],
)
def test_an_answer_is_whole_once_its_content_length_has_come(answer, whole):
    assert is_whole(answer) is whole


def test_a_failed_name_lookup_is_worded_not_numbered():
    error = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert describe(error) == "name or service not known"
    assert describe(ConnectionRefusedError(111, "Connection refused")) == "connection refused"


def test_a_value_that_rounds_past_the_largest_float_replaces_the_last_answers_like_any_other():
    """1.7976931348623157e308 rounds to 1.798e308, which is infinite: the status cannot hold it, so the field would
    be left out of the merge patch, and the previous answer's value would stay beside this answer's."""
    patch = status_patch({"tokensPerSecond": 1.7976931348623157e308, "step": 3}, generation=0, stored={})
    kept, left_out = fit_status({"progress": patch}, status_schema())
    assert left_out == [] and kept["progress"]["tokensPerSecond"] == 1.7976931348623157e308
