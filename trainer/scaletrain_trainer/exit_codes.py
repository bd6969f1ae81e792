"""The trainer's exit codes: what a pod's exit code means. The operator, run-local and the tests import
them from here, so the code a trainer produces and the code its supervisors read cannot drift apart.
Torch-free on purpose: the operator imports it."""

EXIT_CONFIG_ERROR = 78  # EX_CONFIG from sysexits.h: a bad config, which no retry can fix
