"""A pod agent's call on the in-place restart channel (wire.IN_PLACE_PATH), read strictly: it comes from a pod, whose
workload is anyone's code, and what it says of an ended workload decides the gang's fate."""

from __future__ import annotations

from dataclasses import dataclass

from scaletrain_trainer.contract import wire

from .progress_answer import Unreadable, json_object

MAX_CALL_BYTES = 4 * wire.TERMINATION_MESSAGE_LIMIT + 256  # a termination message, each byte escaped at worst
STATES = (wire.READY, wire.RUNNING, wire.ENDED)


@dataclass(frozen=True)
class Call:
    """What a pod's agent says: its `state` at `generation` (READY: the last one it ran, -1 before any) and, ENDED,
    its workload's exit code and termination message."""

    state: str
    generation: int
    exit_code: int | None = None
    message: str = ""


def parse_call(body: bytes) -> Call:
    """The call in `body`; Unreadable, saying which field and what it takes, when it is not one."""
    raw = json_object(body, MAX_CALL_BYTES, "a call")
    state, generation = raw.get("state"), raw.get("generation")
    if state not in STATES:
        raise Unreadable(f"state: one of {', '.join(STATES)} is expected")
    if not _whole(generation) or generation < -1:
        raise Unreadable("generation: a whole number of -1 or more is expected")
    if state != wire.ENDED:
        return Call(state, generation)
    exit_code, message = raw.get("exitCode"), raw.get("message", "")
    if not _whole(exit_code) or not 0 <= exit_code <= 255:
        raise Unreadable("exitCode: the workload's exit code, 0 to 255, is expected")
    if not isinstance(message, str) or len(message.encode(errors="replace")) > wire.TERMINATION_MESSAGE_LIMIT:
        raise Unreadable(
            f"message: the termination message, at most {wire.TERMINATION_MESSAGE_LIMIT} bytes, is expected"
        )
    return Call(state, generation, exit_code, message)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
