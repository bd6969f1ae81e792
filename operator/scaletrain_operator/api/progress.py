"""Reading rank 0's /progress endpoint: the operator copies it into status.progress, run-local draws it."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

log = logging.getLogger(__name__)

# The fields of status.progress, as the trainer's /progress names them.
PROGRESS_KEYS = ("step", "maxSteps", "loss", "samplesPerSecond", "etaSeconds", "updatedAt")


def read_progress(url: str, timeout_seconds: float) -> dict[str, Any] | None:
    """The progress at `url`, or None when it cannot be read (not up yet, gone, or garbled)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_seconds) as response:
            raw = json.load(response)
    except (OSError, ValueError) as error:
        log.debug("no progress from %s: %s", url, error)
        return None
    return {key: raw[key] for key in PROGRESS_KEYS if raw.get(key) is not None}
