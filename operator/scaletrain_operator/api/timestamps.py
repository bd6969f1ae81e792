"""RFC 3339 times as the API server writes and reads them: UTC, "Z". The one formatter and the one parser."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

# "as given": whatever `moment` holds (the status's times); "seconds": metav1.Time as the kubelet writes a pod's
# times; "microseconds": metav1.MicroTime, which the API server parses with exactly six digits (an Event's
# eventTime: a time that happens to fall on a whole second must still have them).
Precision = Literal["as given", "seconds", "microseconds"]
_TIMESPEC = {"as given": "auto", "seconds": "seconds", "microseconds": "microseconds"}


def timestamp(moment: datetime, precision: Precision = "as given") -> str:
    """`moment`, a time in UTC, in RFC 3339 at `precision`."""
    return moment.isoformat(timespec=_TIMESPEC[precision]).replace("+00:00", "Z")


def parse_timestamp(text: str) -> datetime:
    """Python 3.10's fromisoformat does not take "Z"."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
