"""The TTL policy: a finished ScaleTrainJob is deleted `ttlSecondsAfterFinished` after it finished (its
Service, Jobs and pods follow through their ownerReferences)."""

from __future__ import annotations

from datetime import datetime, timedelta

from .decision import Decision
from .status import FINISHED


def decide_ttl(phase: str | None, finished_at: datetime, ttl_seconds: int | None, now: datetime) -> Decision:
    """Delete the job once its TTL after `finished_at` has passed; nothing while it runs or without a TTL."""
    if phase not in FINISHED or ttl_seconds is None or now < finished_at + timedelta(seconds=ttl_seconds):
        return Decision()
    return Decision(delete_stj=True)
