"""RFC 3339 times as the API server writes and reads them (metav1.Time: UTC, "Z")."""

from __future__ import annotations

from datetime import datetime


def timestamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def parse_timestamp(text: str) -> datetime:
    """Python 3.10's fromisoformat does not take "Z"."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
