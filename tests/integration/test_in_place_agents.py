"""In-place gang restarts between the operator's endpoint and real agents (agent.py), over real TLS on loopback;
the test plays the operator's decisions (in_place.py's want and end). The kubelet's part, a restart of every
container of the pod when the agent exits with EXIT_RESTART_IN_PLACE, is the pod executor's
(tests/integration/test_pod_restarts.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import urllib.error
from pathlib import Path

import pytest

from scaletrain_operator.render.in_place import agent_writer
from scaletrain_operator.report_server import HELD_PER_POD
from scaletrain_testing.in_place import AGENT, JOB, in_place_endpoint
from scaletrain_testing.waiting import wait_until
from scaletrain_trainer.agent import Channel
from scaletrain_trainer.contract import wire
from scaletrain_trainer.contract.exit_codes import EXIT_RESTART_IN_PLACE

FAILING = (
    "import pathlib, os, sys; pathlib.Path(os.environ['SCALETRAIN_TERMINATION_LOG']).write_text('{msg}'); sys.exit(3)"
)
SAYS_GENERATION = "import os, pathlib; pathlib.Path('{out}').write_text(os.environ['SCALETRAIN_GENERATION'])"


def agent(endpoint, rank: int, code: str) -> subprocess.Popen:
    return subprocess.Popen([*AGENT, sys.executable, "-c", code], env=endpoint.pod_env(rank), stderr=subprocess.PIPE)


def test_a_failed_rank_says_why_and_every_rank_restarts_then_waits_for_all_at_the_barrier(tmp_path):
    with in_place_endpoint(tmp_path) as endpoint:
        endpoint.gangs.want(JOB, 0, ranks=2)
        healthy = agent(endpoint, 0, "import time; time.sleep(300)")
        failed = agent(endpoint, 1, FAILING.format(msg="ValueError: bad batch"))
        outcomes = wait_until(lambda: endpoint.gangs.outcomes(JOB, 0), 30, "rank 1's outcome")
        assert [(r, o.exit_code, o.message) for r, o in outcomes.items()] == [(1, 3, "ValueError: bad batch")]
        assert failed.poll() is None and healthy.poll() is None  # both wait for the operator's word
        endpoint.gangs.want(JOB, 1, ranks=2)  # the operator's decision: restart in place
        assert failed.wait(10) == EXIT_RESTART_IN_PLACE
        assert healthy.wait(10) == EXIT_RESTART_IN_PLACE  # its workload killed, not waited for

        # The kubelet starts each pod's containers again; the state volume says they ran generation 0.
        outs = [tmp_path / f"generation-{rank}" for rank in range(2)]
        first = agent(endpoint, 0, SAYS_GENERATION.format(out=outs[0]))
        time.sleep(1.5)
        assert first.poll() is None and not outs[0].exists()  # no rank trains alone
        second = agent(endpoint, 1, SAYS_GENERATION.format(out=outs[1]))
        assert (first.wait(10), second.wait(10)) == (0, 0)
        assert [out.read_text() for out in outs] == ["1", "1"]


def test_a_gang_the_operator_ends_leaves_each_pod_its_workloads_own_code(tmp_path):
    with in_place_endpoint(tmp_path) as endpoint:
        endpoint.gangs.want(JOB, 0, ranks=1)
        failed = agent(endpoint, 0, FAILING.format(msg="no"))
        wait_until(lambda: endpoint.gangs.outcomes(JOB, 0), 30, "the outcome")
        endpoint.gangs.end(JOB, 0)
        assert failed.wait(10) == 3


LINES = "for n in range(100): print(f'line {{n}}', file=sys.{stream})\n"
CORRUPT = "sys.exit('ValueError: shard 7 is corrupt')"  # Python says it on stderr
ERROR_ON_STDOUT = "print('ValueError: shard 7 is corrupt')\nsys.exit(1)"
LAST_80_LINES = [*(f"line {n}" for n in range(21, 100)), "ValueError: shard 7 is corrupt"]


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (LINES.format(stream="stderr") + CORRUPT, LAST_80_LINES),
        (LINES.format(stream="stdout") + CORRUPT, ["ValueError: shard 7 is corrupt"]),  # stdout's progress is not why
        (LINES.format(stream="stdout") + ERROR_ON_STDOUT, LAST_80_LINES),  # nothing on stderr: stdout's end
    ],
    ids=["stderr", "progress on stdout, the error on stderr", "stdout alone"],
)
def test_a_workload_that_fails_with_no_termination_message_is_said_by_the_end_of_its_log(tmp_path, script, message):
    """As the kubelet's FallbackToLogsOnError says a container that wrote no message: a script's own torchrun
    writes its worker's error to its log (and to TORCHELASTIC_ERROR_FILE, which is not the termination log). Its
    stderr's end, where it wrote anything there."""
    with in_place_endpoint(tmp_path) as endpoint:
        endpoint.gangs.want(JOB, 0, ranks=1)
        failed = agent(endpoint, 0, "import sys\n" + script)
        (said,) = wait_until(lambda: endpoint.gangs.outcomes(JOB, 0), 30, "the outcome").values()
        endpoint.gangs.end(JOB, 0)
        assert failed.wait(10) == 1
    assert said.message.splitlines() == message


def test_a_stop_signal_ends_the_wait_for_a_verdict(tmp_path):
    with in_place_endpoint(tmp_path) as endpoint:
        endpoint.gangs.want(JOB, 0, ranks=1)
        failed = agent(endpoint, 0, FAILING.format(msg="no"))
        wait_until(lambda: endpoint.gangs.outcomes(JOB, 0), 30, "the outcome")
        failed.send_signal(signal.SIGTERM)  # the pod is going away: no verdict will matter
        assert failed.wait(5) == 3  # not the rest of a held call (wire.HOLD_SECONDS)


def test_every_one_of_100_held_calls_is_told_of_a_restart(tmp_path):
    with in_place_endpoint(tmp_path) as endpoint:
        endpoint.gangs.want(JOB, 0, ranks=100)
        words = {}

        def listen(rank: int) -> None:
            pod = endpoint.pod_env(rank)
            channel = Channel(endpoint.url, Path(pod[wire.REPORT_TOKEN_ENV]), endpoint.ca)
            words[rank] = channel.until({"state": wire.RUNNING, "generation": 0}, 60)

        listeners = [threading.Thread(target=listen, args=(rank,)) for rank in range(100)]
        for listener in listeners:
            listener.start()
        time.sleep(2)  # held, each of them
        assert words == {}
        endpoint.gangs.want(JOB, 1, ranks=100)
        for listener in listeners:
            listener.join(30)
        assert {word.verdict for word in words.values()} == {wire.RESTART} and len(words) == 100


def test_an_operator_out_of_reach_gives_no_word_within_the_wait(tmp_path):
    with in_place_endpoint(tmp_path) as endpoint:
        pod = endpoint.pod_env(0)
    channel = Channel(endpoint.url, Path(pod[wire.REPORT_TOKEN_ENV]), endpoint.ca)  # its server stopped
    started = time.monotonic()
    assert channel.until({"state": wire.RUNNING, "generation": 0}, 1.0) is None
    assert time.monotonic() - started < 5


def test_a_pod_cannot_hold_more_than_its_share_of_the_endpoint(tmp_path):
    with in_place_endpoint(tmp_path) as endpoint:
        endpoint.gangs.want(JOB, 0, ranks=1)
        pod = endpoint.pod_env(0)
        channel = Channel(endpoint.url, Path(pod[wire.REPORT_TOKEN_ENV]), endpoint.ca)
        running = {"state": wire.RUNNING, "generation": 0}
        words = []
        held = [threading.Thread(target=lambda: words.append(channel.call(running))) for _ in range(HELD_PER_POD)]
        for call in held:
            call.start()
        time.sleep(2)  # each of them held
        with pytest.raises(urllib.error.HTTPError, match="429"):
            channel.call(running)
        endpoint.gangs.want(JOB, 1, ranks=1)
        for call in held:
            call.join(10)
        assert [word.verdict for word in words] == [wire.RESTART] * HELD_PER_POD


def test_the_agent_bundled_for_a_script_of_ones_own_runs_on_a_python_without_scaletrain(tmp_path):
    """What a script of one's own's init container writes (render/in_place.agent_writer), its image's Python runs
    with the standard library alone (-I: isolated, no site-packages): the workload's exit code is the pod's."""
    writer = agent_writer("any-image")
    subprocess.run([sys.executable, *writer["command"][1:-1], str(tmp_path)], check=True, capture_output=True)
    bundled = [sys.executable, "-I", str(tmp_path / "agent.pyz"), "--"]
    ran = subprocess.run([*bundled, sys.executable, "-c", "raise SystemExit(7)"], capture_output=True, timeout=60)
    assert ran.returncode == 7
    # A command the image lacks ends the pod as the runtime would end it (128), saying so: never a traceback.
    message = tmp_path / "termination-log"
    env = {wire.TERMINATION_LOG_ENV: str(message)}
    missing = subprocess.run([*bundled, "no-such-command"], capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 128 and "Traceback" not in missing.stderr
    assert message.read_text() == "exec: 'no-such-command': No such file or directory"
    # The workload's output passes through to the pod's own.
    script = "import sys\nprint('line 0')\nsys.exit('boom: the last words')"
    failed = subprocess.run([*bundled, sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and failed.stdout == "line 0\n" and "boom: the last words" in failed.stderr
