"""How often a Running job's status takes rank 0's progress: rank 0 is read every --progress-interval, and an answer
that says nothing new is written no oftener than --progress-write-interval (a minute by default: at 1,000 jobs, 17
status writes a second rather than 67). The end of the run is not held back by it."""

from __future__ import annotations

import time

from scaletrain_testing.audit import counts
from scaletrain_testing.e2e_jobs import OPERATOR_ENV, e2e_namespace, paced, submit_training
from scaletrain_testing.kubelet import FakeNode
from scaletrain_testing.operator_harness import PROGRESS_READ_S, QUIET, operator_process
from scaletrain_testing.timeouts import WHOLE_JOB_S

WRITE_EVERY_S, WINDOW_S = 4.0, 10.0
STATUS_WRITE = ("patch", "scaletrainjobs.scaletrain.io/status")


def test_a_running_jobs_progress_is_written_once_a_write_interval_though_read_every_interval(control_plane, tmp_path):
    arguments = ("--progress-interval", str(PROGRESS_READ_S), "--progress-write-interval", str(WRITE_EVERY_S), *QUIET)
    with (
        e2e_namespace(control_plane, tmp_path, [FakeNode("cadence-1"), FakeNode("cadence-2")]) as team,
        operator_process(team.install, *arguments, env=OPERATOR_ENV),
    ):
        training = {"data": paced(0.02), "maxSteps": 200, "checkpoint": {"everySteps": 1000}}
        submit_training(team, "cadence", training)
        first = team.wait_status("cadence", lambda s: (s.get("progress") or {}).get("step"), WHOLE_JOB_S, "a step")
        mark = control_plane.audit.mark()
        time.sleep(WINDOW_S)
        during = team.status("cadence")
        writes = counts(control_plane.audit.requests(team.install.user, after=mark))[STATUS_WRITE]
        # Read about 33 times in the window, each answer a step further: written once every WRITE_EVERY_S.
        assert 1 <= writes <= WINDOW_S / WRITE_EVERY_S + 1, writes
        assert during["phase"] == "Running" and during["progress"]["step"] > first["progress"]["step"]
        done = team.wait_phase("cadence", "Succeeded", WHOLE_JOB_S)["status"]
        assert done["progress"]["step"] == 200  # the last step is news: written at once
