"""Rank 0's reporting (reporting/metrics.py) without its progress endpoint: the termination message."""

from __future__ import annotations

from scaletrain_trainer.reporting.metrics import write_termination_message


def test_termination_message_only_where_the_file_exists(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    monkeypatch.setenv("SCALETRAIN_TERMINATION_LOG", str(path))
    write_termination_message({"result": "Succeeded"})
    assert not path.exists()
    path.touch()
    write_termination_message({"result": "Succeeded", "blob": "x" * 10000})
    assert len(path.read_text()) == 4096
