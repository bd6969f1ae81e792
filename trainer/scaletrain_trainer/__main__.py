"""Entry point: `python -m scaletrain_trainer [--config FILE]`, under torchrun or standalone.

Exit codes (exit_codes.py): 0 done; EXIT_CONFIG_ERROR (78) for a bad config, EXIT_WRITE_ERROR (74) for a
full or read-only disk and EXIT_STORAGE_ERROR (77) for checkpoint storage that refused the trainer at start
(CheckpointStorageError: a wrong key, no bucket, no answer), which retrying cannot fix (the operator fails the
job at once); EXIT_NON_FINITE (79) for a diverged run; EXIT_PREEMPTED (80) after a SIGTERM or SIGINT, once
every rank has saved a checkpoint at the same step (preemption.py); anything else for a runtime failure,
which a gang restart may fix. Each named result also leaves a one-line termination message, with the last
completed step.
"""

from __future__ import annotations

from .reporting.preemption import Preempted, ignore_stop_signals, install_handlers

if __name__ == "__main__":
    # Before the other imports (the config's take 0.3 s on idle cores, over a second on busy ones): until the
    # handlers are in, a stop signal ends this process as it ends any other (-15), without a word to its peers.
    install_handlers()

import argparse
import logging
import os
import sys

from .contract.config import load_training_config
from .contract.exit_codes import (
    CONFIG_ERROR_RESULT,
    EXIT_CONFIG_ERROR,
    EXIT_NON_FINITE,
    EXIT_PREEMPTED,
    EXIT_STORAGE_ERROR,
    EXIT_WRITE_ERROR,
    NON_FINITE_RESULT,
    PREEMPTED_RESULT,
    STORAGE_ERROR_RESULT,
    WRITE_ERROR_RESULT,
    CheckpointStorageError,
    NonFinite,
    WriteError,
    write_error_cause,
)
from .contract.validation import ProblemsError
from .reporting.metrics import write_termination_message
from .startup import frozen_imports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scaletrain_trainer", description=__doc__)
    parser.add_argument("--config", help="training config file (YAML or JSON); default: $SCALETRAIN_CONFIG")
    args = parser.parse_args(argv)
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(asctime)s %(name)s: %(message)s")
    try:
        config = load_training_config(args.config)
        with frozen_imports():  # torch is imported only once the config is valid
            from .training.distributed import init_distributed, shutdown
            from .training.loop import train

        runtime = init_distributed(config.distributed_timeout_seconds)
        # A stop signal during the set-up is acted on at the first step boundary, as one during training is.
        try:
            summary = train(config, runtime)  # a failure propagates: non-zero exit, and torchrun stops the peers
        except Preempted:
            # Every rank stopped after the same step and saved it: they leave the group together, as after the
            # last step, so that none tears its group down, or exits, while a peer is still in the save's
            # last collective.
            shutdown()
            raise
        shutdown()
    except ProblemsError as error:
        return config_error(error)
    except NonFinite as diverged:  # on every rank, at the same step: nothing after it was saved
        print(f"scaletrain: {diverged}", file=sys.stderr)
        write_termination_message(
            {
                "result": NON_FINITE_RESULT,
                "firstNonFiniteStep": diverged.step,
                "lastFiniteCheckpointStep": diverged.last_checkpoint_step,
            }
        )
        return EXIT_NON_FINITE
    except Preempted as stopped:  # on every rank, after the same step, whose checkpoint is saved
        print(f"scaletrain: {stopped}", file=sys.stderr)
        # Its step, the one every rank stopped after, is added as to every termination message.
        write_termination_message(
            {"result": PREEMPTED_RESULT, "signal": stopped.signal.name, "checkpoint": stopped.checkpoint}
        )
        return EXIT_PREEMPTED
    except CheckpointStorageError as error:  # before any training: every rank checks on its own
        print(f"scaletrain: {error.cause}", file=sys.stderr)
        write_termination_message({"result": STORAGE_ERROR_RESULT, "cause": error.cause})
        return EXIT_STORAGE_ERROR
    except WriteError as error:
        return write_error(error.cause)
    except OSError as error:  # a full or read-only outputDir, say: one line, not a traceback
        if (cause := write_error_cause(error)) is None:
            raise
        return write_error(cause)
    if runtime.is_main:
        write_termination_message({"result": "Succeeded", **summary})
    return 0


def config_error(error: ProblemsError) -> int:
    """Print every problem on one short block, record it for the pod status, and exit EX_CONFIG."""
    lines = [str(p) if p.path else p.message for p in error.problems]
    print("scaletrain: invalid training config:\n  " + "\n  ".join(lines), file=sys.stderr)
    write_termination_message({"result": CONFIG_ERROR_RESULT, "problems": lines})
    return EXIT_CONFIG_ERROR


def write_error(cause: str) -> int:
    print(f"scaletrain: {cause}", file=sys.stderr)
    write_termination_message({"result": WRITE_ERROR_RESULT, "cause": cause})
    return EXIT_WRITE_ERROR


def record_for_torchrun(error: BaseException) -> None:
    """Write `error` and its traceback to TORCHELASTIC_ERROR_FILE, which torchrun gives each worker, as
    torchelastic's @record does: torchrun copies the first failed worker's into its own, and the pod
    launcher puts its end into the termination message (launch.py). Not @record on main itself: that would
    import torch before the config is checked."""
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    get_error_handler().record_exception(error)


if __name__ == "__main__":
    try:
        exit_code = main()
    except Exception as uncaught:
        record_for_torchrun(uncaught)
        raise
    finally:
        ignore_stop_signals()  # the exit code is decided: no stop signal may change it now
    sys.exit(exit_code)
