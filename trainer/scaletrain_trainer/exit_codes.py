"""The trainer's exit codes: what a pod's exit code means. The operator, run-local and the tests import
them from here, so the code a trainer produces and the code its supervisors read cannot drift apart.
Torch-free on purpose: the operator imports it."""

import json

EXIT_CONFIG_ERROR = 78  # EX_CONFIG from sysexits.h: a bad config, which no retry can fix
CONFIG_ERROR_RESULT = "ConfigError"  # the termination message's "result" after a config error


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
