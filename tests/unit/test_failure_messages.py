"""Why a pod failed, kept within the limits on its way to the user: the pod launcher's termination message
(the root-cause error beside the trainer's summary, within the kubelet's 4096 bytes) and the operator's
bounded status and Event messages, each keeping the end of a traceback, where the exception is."""

from __future__ import annotations

import json

from scaletrain_operator.controller.status import bounded
from scaletrain_operator.policy.gang_policy import failure_text
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


# The end of a script's own torchrun's log when rank 1 raised under @record (torch 2.13, as run-local and the
# kubelet keep it with FallbackToLogsOnError): torchrun's ChildFailedError and its failure table.
TORCHRUN_LOG_TAIL = """\
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
raise_in_rank_1 FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-04_21:18:06
  host      : cause-g0-0.cause.default.svc.cluster.local
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 13186)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 13186
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-04_21:18:05
  host      : cause-g0-0.cause.default.svc.cluster.local
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 13187)
  error_file: /tmp/torchelastic_ne3vaquu/none_44dg94oj/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/opt/scripts/raise_in_rank_1.py", line 21, in main
      raise ValueError("shard 7 of the training data is corrupt")
  ValueError: shard 7 of the training data is corrupt
  \n============================================================
"""


def test_a_script_s_own_torchrun_failure_is_told_by_its_first_failed_worker():
    """Not torchrun's own exception, nor the SIGTERM of the rank it stopped: the Root Cause entry, ending with
    the worker's exception."""
    told = failure_text(TORCHRUN_LOG_TAIL)
    assert told.startswith("Root Cause (first observed failure):\n[0]:") and "rank      : 1" in told
    assert told.endswith(LAST_LINE)
    assert failure_text("a log without torchrun's table\n") == "a log without torchrun's table"


def test_a_bounded_message_keeps_its_start_and_most_of_its_end():
    message = "pod demo-g0-1 failed (Error, exit code 1); gang restart 1/3 from the last checkpoint. " + TRACEBACK
    for limit in (1024, 4000):
        cut = bounded(message, limit)
        assert len(cut) <= limit and cut.startswith("pod demo-g0-1 failed (Error, exit code 1);")
        assert cut.endswith(f"step_200()\n{LAST_LINE}") and "characters left out" in cut
    assert bounded("short", 1024) == "short"
