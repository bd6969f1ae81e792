"""Pod entry point: check the training config, then run torchrun with the given arguments.

torchrun reports any failed worker as exit code 1, so a config error found inside the workers would
look like a crash worth restarting. Checking first, in the pod's own process, lets the pod exit with
EXIT_CONFIG_ERROR, which the operator does not retry. What only a worker can find (a token id out of
range, a full disk) it records as the termination message's result; when torchrun fails, the pod
exits with that result's code instead of torchrun's 1 (exit_codes.result_of).

Why a pod failed reaches its status: torchrun is given a TORCHELASTIC_ERROR_FILE of the launcher's own,
into which it copies the root-cause error (the first failed worker's exception and traceback, written by
torchelastic's @record) when it fails. The launcher then puts the end of that traceback, where the
exception is, into the pod's termination message: as the `error` field of the summary the trainer left
there, or on its own when there is none, within the kubelet's 4096 bytes. Usage (the rendered default):

    python -m scaletrain_trainer.launch --module scaletrain_trainer
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .__main__ import config_error
from .contract import wire
from .contract.config import FILE_DATA_SOURCES, load_training_config
from .contract.exit_codes import (
    ERROR_FIELD,
    EXIT_CODES,
    PREEMPTED_RESULT,
    elastic_error_text,
    result_of,
    summary_of,
)
from .contract.storage_urls import is_object_url
from .contract.validation import Problem, ProblemsError
from .stop_signals import StopSignals

# torchrun, stopped by a signal, passes it to its workers and SIGKILLs those still running after this many
# seconds (default 30: torch/distributed/launcher/api.py). The trainer needs one step and one checkpoint
# save after a SIGTERM, and bounds that itself (watchdog.py), so the pod's terminationGracePeriodSeconds,
# after which the kubelet kills the container, is left as the only limit.
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
TRAINER_SHUTDOWN_TIMEOUT_SECONDS = 24 * 3600
# torchrun (torchrun.py) with this Python, without depending on PATH; torchrun's arguments follow.
TORCHRUN = (sys.executable, "-m", "scaletrain_trainer.torchrun")
LOG_DIR_ENV = "PET_LOG_DIR"  # torchrun's --log-dir: where each worker writes its own error file
CUT_MARK = "..."  # where the start of a traceback too long for the termination message was cut off


def preflight(environ: dict[str, str]) -> None:
    """The checks that need no torch: the config, its fit to the world size, and the data file (one in the pod: an
    object store's is the trainer's to reach, with its credentials)."""
    config = load_training_config(environ=environ)
    world_size = int(environ.get("PET_NNODES", "1")) * int(environ.get("PET_NPROC_PER_NODE", "1"))
    config.accumulation_steps(world_size)
    path = config.data.path or ""
    if config.data.source in FILE_DATA_SOURCES and not is_object_url(path) and not Path(path).is_file():
        raise ProblemsError([Problem(("data", "path"), f"{config.data.path} is not a readable file in this pod")])


def main(argv: list[str]) -> int:
    stop_signals = StopSignals()
    # A job without a training block (args of its own, e.g. `--module my_train`) has no config to check.
    try:
        if wire.CONFIG_ENV in os.environ:
            preflight(dict(os.environ))
    except ProblemsError as error:
        return config_error(error)
    if stop_signals.received is not None:
        return 128 + stop_signals.received  # stopped before training began: nothing to save
    # torchrun runs as a child, not exec'd, so that its exit can be read; the pod's stop signals reach it
    # through this process.
    with error_files() as root_cause:
        env = torchrun_env(os.environ)
        # The workers' error files go where this launcher finds them, unless the pod's env says where.
        workers = root_cause.parent / "workers" if root_cause is not None and LOG_DIR_ENV not in env else None
        if root_cause is not None:
            env |= {wire.ERROR_FILE_ENV: str(root_cause)} | ({LOG_DIR_ENV: str(workers)} if workers else {})
        torchrun = subprocess.Popen([*TORCHRUN, *argv], env=env)
        stop_signals.forward_to(torchrun)
        torchrun_exit = torchrun.wait()
        if torchrun_exit != 0 and root_cause is not None:
            record_root_cause(
                first_error(root_cause, workers) if workers else root_cause, wire.termination_message_path()
            )
    return pod_exit_code(torchrun_exit, wire.termination_message_path())


@contextmanager
def error_files() -> Iterator[Path | None]:
    """A path for torchrun's root-cause error, private to this launcher: the pod's own TORCHELASTIC_ERROR_FILE
    is its termination message, which torchrun would overwrite whole, and unbounded. Its directory holds the
    workers' own error files too (torchrun's log directory, unless the pod's env names one). None where no
    temporary directory can be made (a read-only root filesystem): the pod then runs without."""
    try:
        directory = tempfile.TemporaryDirectory(prefix="scaletrain-launch-")
    except OSError as error:
        print(f"scaletrain: no file for torchrun's root-cause error ({error}); running without", file=sys.stderr)
        directory = None
    if directory is None:
        yield None
        return
    with directory as path:
        yield Path(path) / "error.json"


def first_error(chosen: Path, log_dir: Path) -> Path:
    """The error file of the worker that failed first, in torchrun's last attempt. torchrun copies the one
    with the earliest timestamp into `chosen`, but its timestamps are whole seconds, and a tie goes to the
    lowest rank: a peer that failed because the culprit's connection closed ("Connection closed by peer")
    within the same second was named instead. The files' modification times tell them apart."""
    attempts: dict[int, list[Path]] = {}
    for path in log_dir.glob("*/attempt_*/*/error.json"):
        number = path.parent.parent.name.removeprefix("attempt_")
        if number.isascii() and number.isdigit():
            attempts.setdefault(int(number), []).append(path)
    if not attempts:
        return chosen
    return min(attempts[max(attempts)], key=lambda path: path.stat().st_mtime_ns)


def record_root_cause(error_file: Path, termination_message: Path) -> None:
    """Put the end of the error torchrun recorded in `error_file` into the termination message, when both
    files are there: torchrun writes none when no worker raised (an exit code of its own, a signal), and
    outside a pod there is no termination message."""
    if not error_file.exists() or not termination_message.exists():
        return
    try:
        if summary_of(termination_message.read_text()).get("result") == PREEMPTED_RESULT:
            return  # stopped from outside after its checkpoint: the workers' tracebacks are of the stop signal
        error = elastic_error_text(json.loads(error_file.read_text()))
        if error is None:
            return
        termination_message.write_text(with_error(termination_message.read_text(), error))
    except (OSError, ValueError, RecursionError) as problem:  # best effort: the exit code says the rest
        print(f"scaletrain: cannot record the root-cause error in {termination_message}: {problem}", file=sys.stderr)


def with_error(termination_message: str, error: str, limit: int = wire.TERMINATION_MESSAGE_LIMIT) -> str:
    """The termination message with `error` added: as the `error` field of the trainer's summary when the
    message is one, else after the text a script left there, if any; either way within `limit` bytes, cut
    at the start (the end names the exception)."""
    summary = summary_of(termination_message)
    if not summary:
        return tail(f"{termination_message.rstrip()}\n{error}" if termination_message.strip() else error, limit)
    room = limit - len(json.dumps(summary | {ERROR_FIELD: ""}).encode())
    while room > 0:
        message = json.dumps(summary | {ERROR_FIELD: tail(error, room)})
        excess = len(message.encode()) - limit  # JSON escapes make the error longer than its text
        if excess <= 0:
            return message
        room -= excess
    return termination_message  # no room beside the summary, which the operator needs more


def torchrun_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The pod's environment, and for the built-in trainer (a training config) time to checkpoint after a
    SIGTERM; a script of one's own keeps torchrun's default, as does a timeout the pod's env sets."""
    if wire.CONFIG_ENV not in environ:
        return dict(environ)
    return {SHUTDOWN_TIMEOUT_ENV: str(TRAINER_SHUTDOWN_TIMEOUT_SECONDS)} | dict(environ)


def pod_exit_code(torchrun_exit: int, termination_message: Path) -> int:
    """torchrun's exit code, or the code of the result a worker recorded in the termination message."""
    if torchrun_exit == 0:
        return 0
    if torchrun_exit < 0:  # killed by a signal: a shell's 128 + N, as a container runtime reports it
        return 128 - torchrun_exit
    try:
        message = termination_message.read_text()
    except OSError:
        return torchrun_exit
    result = result_of(None, message)
    return EXIT_CODES[result] if result is not None else torchrun_exit


def tail(text: str, limit: int) -> str:
    """`text` within `limit` bytes (UTF-8), its start cut off and marked when it is longer."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    kept = encoded[len(encoded) - max(0, limit - len(CUT_MARK)) :]
    return CUT_MARK + kept.decode(errors="ignore")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
