"""The one RFC 3339 formatter (api/timestamps.py), at the precision each of its readers parses."""

from __future__ import annotations

from datetime import datetime, timezone

from scaletrain_operator.api.timestamps import parse_timestamp, timestamp

ON_THE_SECOND = datetime(2026, 12, 4, 12, 0, 5, tzinfo=timezone.utc)
WITHIN_A_SECOND = ON_THE_SECOND.replace(microsecond=250)


def test_an_event_time_has_six_fraction_digits_even_on_a_whole_second():
    """metav1.MicroTime is parsed with the layout RFC3339Micro: an eventTime without its six digits (what
    isoformat writes for a whole second) is refused, and with it the Event."""
    assert timestamp(ON_THE_SECOND, "microseconds") == "2026-12-04T12:00:05.000000Z"
    assert timestamp(WITHIN_A_SECOND, "microseconds") == "2026-12-04T12:00:05.000250Z"


def test_a_pod_time_is_whole_seconds_and_a_status_time_what_it_holds():
    assert timestamp(WITHIN_A_SECOND, "seconds") == "2026-12-04T12:00:05Z"
    assert timestamp(WITHIN_A_SECOND) == "2026-12-04T12:00:05.000250Z"
    assert timestamp(ON_THE_SECOND) == "2026-12-04T12:00:05Z"
    assert parse_timestamp(timestamp(WITHIN_A_SECOND)) == WITHIN_A_SECOND
