"""The hang watchdog (reporting/watchdog.py): its timeout, configured or from the median step."""

from __future__ import annotations

from scaletrain_trainer.reporting.watchdog import Watchdog


def test_the_hang_timeout_is_the_configured_one_else_ten_median_steps_but_at_least_five_minutes(tmp_path):
    assert Watchdog(4, str(tmp_path), rank=0).timeout == 4
    automatic = Watchdog(None, str(tmp_path), rank=0)
    assert automatic.timeout == 300  # no steps yet
    automatic.step_seconds = [500.0, 90.0, 80.0] + [20.0, 40.0, 50.0]  # the first (warm-up) steps do not count
    assert automatic.timeout == 400
    automatic.step_seconds = [1.0] * 10
    assert automatic.timeout == 300
