"""Why a pod failed, kept within the limits on its way to the user: the pod launcher's termination message
(the root-cause error beside the trainer's summary, within the kubelet's 4096 bytes) and the operator's
bounded status and Event messages, each keeping the end of a traceback, where the exception is."""

from __future__ import annotations

import json

from scaletrain_operator.controller.status import bounded
from scaletrain_trainer.contract.exit_codes import elastic_error_text, result_of, summary_of
from scaletrain_trainer.contract.wire import TERMINATION_MESSAGE_LIMIT
from scaletrain_trainer.launch import CUT_MARK, tail, with_error

LAST_LINE = "ValueError: shard 7 of the training data is corrupt"
FRAMES = "".join(f'  File "/app/train.py", line {n}, in step_{n}\n    step_{n + 1}()\n' for n in range(200))
TRACEBACK = f"Traceback (most recent call last):\n{FRAMES}{LAST_LINE}"


def test_the_error_goes_into_the_trainers_summary_within_the_limit_keeping_its_end():
    summary = json.dumps({"result": "NonFinite", "firstNonFiniteStep": 9, "step": 10})
    message = with_error(summary, TRACEBACK)
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT < len(TRACEBACK)
    parsed = summary_of(message)  # still the trainer's summary, as the operator and the launcher read it
    assert parsed["firstNonFiniteStep"] == 9 and result_of(1, message) == "NonFinite"
    assert parsed["error"].startswith(CUT_MARK) and parsed["error"].endswith(LAST_LINE)


def test_without_a_summary_the_error_is_the_message_after_any_text_the_script_left():
    alone = with_error("", TRACEBACK)
    assert len(alone.encode()) <= TERMINATION_MESSAGE_LIMIT and alone.endswith(LAST_LINE)
    assert with_error("epoch 3 of 10\n", "ValueError: x") == "epoch 3 of 10\nValueError: x"


def test_the_limit_holds_in_bytes_for_text_that_json_escapes_or_utf8_widens():
    wide = "Traceback:\n" + 'ünïcødé ✓ "quoted"\n' * 400 + LAST_LINE
    for message in (with_error('{"result": "Hang", "step": 3}', wide), with_error("", wide)):
        assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    assert summary_of(with_error('{"result": "Hang", "step": 3}', wide))["error"].endswith(LAST_LINE)
    assert tail("✓✓✓✓", 7) == CUT_MARK + "✓"  # never half a character


def test_a_summary_that_leaves_no_room_is_kept_as_it_is():
    full = json.dumps({"result": "ConfigError", "problems": ["x" * 4050]})
    assert with_error(full, TRACEBACK) == full


def test_a_torchelastic_error_file_gives_its_traceback_else_its_message():
    recorded = {"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": TRACEBACK, "timestamp": "1"}}}
    assert elastic_error_text(recorded) == TRACEBACK
    no_stack = {"message": {"message": "Signal 9 (SIGKILL) received by PID 7", "extraInfo": {"timestamp": "1"}}}
    assert elastic_error_text(no_stack) == "Signal 9 (SIGKILL) received by PID 7"
    assert elastic_error_text({"message": "Signal 6 (SIGABRT)", "timestamp": 1}) == "Signal 6 (SIGABRT)"
    for other in ({"result": "Hang"}, {"message": "a script's own field"}, [1], None):
        assert elastic_error_text(other) is None


def test_a_bounded_message_keeps_its_start_and_most_of_its_end():
    message = "pod demo-g0-1 failed (Error, exit code 1); gang restart 1/3 from the last checkpoint. " + TRACEBACK
    for limit in (1024, 4000):
        cut = bounded(message, limit)
        assert len(cut) <= limit and cut.startswith("pod demo-g0-1 failed (Error, exit code 1);")
        assert cut.endswith(f"step_200()\n{LAST_LINE}") and "characters left out" in cut
    assert bounded("short", 1024) == "short"
