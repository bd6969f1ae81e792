"""The causes a failed run reports (contract/exit_codes.py): a write error named in one line."""

from __future__ import annotations

import errno

from torch.distributed.checkpoint.api import CheckpointException

from scaletrain_trainer.contract.exit_codes import write_error_cause


def test_write_errors_are_named_in_one_line_even_inside_a_distributed_checkpoint_failure():
    full = OSError(errno.ENOSPC, "No space left on device", "/ckpt/step-10.partial/__0_0.distcp")
    assert write_error_cause(full) == "disk full (ENOSPC) writing /ckpt/step-10.partial/__0_0.distcp"
    wrapped = CheckpointException("write", {1: (OSError(errno.EROFS, "Read-only file system"), None)})
    assert write_error_cause(wrapped) == "read-only file system (EROFS)"
    refused = PermissionError(errno.EACCES, "Permission denied", "/checkpoints/run")
    assert write_error_cause(refused).startswith("permission denied: not writable by the container's user;")
    assert write_error_cause(refused).endswith("(EACCES) writing /checkpoints/run")
    # fsGroup makes an emptyDir or a claim writable, never a hostPath directory: the fix named must be one that works.
    assert "A hostPath directory keeps its owner and mode (fsGroup does not change them)" in write_error_cause(refused)
    assert write_error_cause(OSError(errno.ENOENT, "No such file")) is None
    assert write_error_cause(RuntimeError("boom")) is None
