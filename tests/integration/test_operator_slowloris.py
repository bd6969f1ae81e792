"""Another tenant's pods hold rank 0's progress port: connections that trickle a request a byte a second,
or send nothing, as many as the server will take. The operator, as the chart installs it, keeps reading
the trainer's real progress server (metrics.MetricsReporter) all the while, and the healthy gang is never
taken for hung."""

from __future__ import annotations

import os
import secrets
import threading
import time
from datetime import datetime

from scaletrain_testing.hostile_http import Slowloris
from scaletrain_testing.kube import Kube
from scaletrain_testing.operator_harness import QUIET, Team, install_watching, operator_process
from scaletrain_testing.trainer_runs import free_port
from scaletrain_trainer.reporting.metrics import MetricsReporter

# How long the attack holds; SCALETRAIN_SLOWLORIS_SECONDS=300 runs it for five minutes.
ATTACK_S = float(os.environ.get("SCALETRAIN_SLOWLORIS_SECONDS", "60"))
PROMISE = 3.0  # seconds rank 0 promises its next report within: a stretched read would break it
POLL = 0.5  # the operator's progress interval here


def keep_stepping(reporter: MetricsReporter, stop: threading.Event) -> None:
    """A healthy trainer: a step logged every 0.2 s, each promising the next report within PROMISE."""
    step = 0
    while not stop.wait(0.2):
        step += 1
        reporter.log(
            {"step": step, "loss": 2.0, "samplesPerSecond": 10.0}, eta_seconds=60.0, next_report_within=PROMISE
        )


def read_at(status: dict) -> datetime | None:
    text = (status.get("progress") or {}).get("readAt")
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def test_a_slowloris_on_rank_0s_port_neither_stops_the_operators_reads_nor_makes_a_hang(control_plane, tmp_path):
    namespace = control_plane.create_namespace(f"slowloris-{secrets.token_hex(3)}")
    install = install_watching(control_plane, namespace, tmp_path)
    team = Team(Kube(control_plane.api_client()), namespace)
    port, stop = free_port(), threading.Event()
    reporter = MetricsReporter(str(tmp_path / "out"), port, max_steps=1_000_000, enabled=True)
    stepping = threading.Thread(target=keep_stepping, args=(reporter, stop), daemon=True)
    stepping.start()
    env = {"SCALETRAIN_OPERATOR_PROGRESS_URL": "http://{pod_ip}:{port}/progress"}
    try:
        with operator_process(
            install, *QUIET, "--progress-interval", str(POLL), "--progress-write-interval", "0", env=env
        ):
            team.submit("victim", training={"metricsPort": port}, maxRestarts=3)
            team.start_pods("victim-g0")
            team.wait_status("victim", lambda s: read_at(s) is not None)
            with Slowloris(port, trickling=200, idle=200, tick=1.0):
                gaps, last, until = [], None, time.monotonic() + ATTACK_S
                while time.monotonic() < until:
                    status = team.stj("victim")["status"]
                    assert status["restarts"] == 0 and status["currentJob"] == "victim-g0", status
                    if (seen := read_at(status)) != last and last is not None:
                        gaps.append((seen - last).total_seconds())
                    last = seen
                    time.sleep(0.5)
            status = team.stj("victim")["status"]
    finally:
        stop.set()
        reporter.close()
    print(f"{len(gaps)} reads copied in {ATTACK_S:.0f} s; the longest gap between two: {max(gaps):.1f} s")
    assert len(gaps) >= ATTACK_S / (4 * POLL)  # most passes read it
    assert max(gaps) < PROMISE, gaps  # never long enough to break a promise
    assert status["phase"] == "Running" and status["restarts"] == 0
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    assert conditions.get("ProgressUnreachable") != "True"
    assert "Hang" not in [reason for _, reason, _ in team.events("victim")]
