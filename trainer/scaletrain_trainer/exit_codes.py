"""The trainer's exit codes: what a pod's exit code means. The operator, run-local and the tests import
them from here, so the code a trainer produces and the code its supervisors read cannot drift apart.
Torch-free on purpose: the operator imports it."""

import json

EXIT_CONFIG_ERROR = 78  # EX_CONFIG from sysexits.h: a bad config, which no retry can fix
CONFIG_ERROR_RESULT = "ConfigError"  # the termination message's "result" after a config error
EXIT_NON_FINITE = 79  # the loss or the gradients became NaN or infinite: the run diverged (loop.NonFinite)
NON_FINITE_RESULT = "NonFinite"


def is_config_error(exit_code: int | None, termination_message: str) -> bool:
    """Whether a container ended on a bad config: exit code 78, or a termination message saying so. The
    second covers a worker under torchrun, which reports any failed worker as exit code 1."""
    if exit_code == EXIT_CONFIG_ERROR:
        return True
    try:
        summary = json.loads(termination_message)
    except ValueError:
        return False
    return isinstance(summary, dict) and summary.get("result") == CONFIG_ERROR_RESULT


class NonFinite(Exception):
    """The run diverged at `step`: a NaN or infinite loss or gradient norm (fp16: the loss scale fell
    below loop.MIN_LOSS_SCALE). Raised at the first host read after it, before anything is saved; the
    trainer then exits EXIT_NON_FINITE."""

    def __init__(self, step: int):
        super().__init__(f"the loss or the gradients were not finite at step {step}: the run diverged")
        self.step = step
