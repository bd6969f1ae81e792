"""The unit tier's purity plugin (scaletrain_testing/unit_purity.py), run by pytest in this process on tests
of its own: a unit test that sleeps, starts a process or opens a network socket fails naming what it did,
in its body, its set-up or a thread of its own; a pure one passes, and so does an impure test of another
tier. Afterwards every guarded callable is the original again."""

from __future__ import annotations

import asyncio
import multiprocessing.process
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from scaletrain_testing import unit_purity


@pytest.fixture
def run_tests(pytester):
    """Runs the given test module under the plugin, `unit` declared as the tiers' conftest marks tests."""
    pytester.makeini("[pytest]\nmarkers =\n    unit: pure\n    integration: the rest\n")

    def run(source: str) -> pytest.RunResult:
        pytester.makepyfile(test_module=source)
        return pytester.runpytest_inprocess("-p", unit_purity.__name__, "-p", "no:cacheprovider", "--strict-markers")

    return run


def assert_said(result: pytest.RunResult, message: str) -> None:
    """That a line of the report holds `message`."""
    result.stdout.re_match_lines([f".*{re.escape(message)}"])


def test_a_unit_test_that_sleeps_fails_naming_the_sleep(run_tests):
    result = run_tests(
        """
import time
import pytest

@pytest.mark.unit
def test_waits():
    time.sleep(0.01)
"""
    )
    result.assert_outcomes(failed=1)
    assert_said(result, "this unit test slept: time.sleep(0.01). tests/unit is pure")


def test_a_unit_test_that_awaits_asyncio_sleep_fails_naming_it(run_tests):
    result = run_tests(
        """
import asyncio
import pytest

@pytest.mark.unit
def test_waits():
    asyncio.run(asyncio.sleep(0.01))
"""
    )
    result.assert_outcomes(failed=1)
    assert_said(result, "this unit test slept: asyncio.sleep(0.01)")


@pytest.mark.parametrize(
    "start, named",
    [
        ("subprocess.run([sys.executable, '-c', 'pass'])", f"subprocess.Popen([{sys.executable!r}, '-c', 'pass'])"),
        ("os.system('true')", "os.system('true')"),
        ("multiprocessing.Process(target=print, name='printer').start()", "multiprocessing's printer.start()"),
    ],
    ids=["subprocess", "os.system", "multiprocessing"],
)
def test_a_unit_test_that_starts_a_process_fails_naming_how(run_tests, start, named):
    result = run_tests(
        f"""
import multiprocessing, os, subprocess, sys
import pytest

@pytest.mark.unit
def test_starts():
    {start}
"""
    )
    result.assert_outcomes(failed=1)
    assert_said(result, f"this unit test started a process: {named}")


def test_a_unit_test_that_opens_a_network_socket_fails(run_tests):
    result = run_tests(
        """
import socket
import pytest

@pytest.mark.unit
def test_opens_ipv4_by_default():
    socket.socket().close()

@pytest.mark.unit
def test_opens_ipv6():
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()
"""
    )
    result.assert_outcomes(failed=2)
    assert_said(result, "this unit test opened a network socket: socket.socket(AF_INET).")
    assert_said(result, "this unit test opened a network socket: socket.socket(AF_INET6).")


def test_impurity_in_a_fixture_or_a_thread_of_the_test_fails_it_too(run_tests):
    result = run_tests(
        """
import threading, time
import pytest

@pytest.fixture
def slow():
    time.sleep(0.01)

@pytest.mark.unit
def test_set_up_slowly(slow):
    pass

@pytest.mark.unit
def test_in_a_thread():
    waiting = threading.Thread(target=time.sleep, args=(0.01,), name="waiter")
    waiting.start()
    waiting.join()

@pytest.mark.unit
def test_caught():
    try:
        time.sleep(0.01)
    except BaseException:
        pass
"""
    )
    result.assert_outcomes(errors=1, failed=2)
    assert_said(result, "this unit test slept: time.sleep(0.01) during its set-up.")
    assert_said(result, "this unit test slept: time.sleep(0.01) (in its thread 'waiter').")
    result.stdout.re_match_lines(["_+ test_caught _+", re.escape("this unit test slept: time.sleep(0.01).")])


def test_a_pure_unit_test_passes_and_an_impure_test_of_another_tier_too(run_tests):
    result = run_tests(
        """
import asyncio, socket, time
import pytest

@pytest.mark.unit
def test_pure():
    time.sleep(0)  # only yields
    asyncio.run(asyncio.sleep(0))  # its event loop makes a socketpair of AF_UNIX sockets
    first, second = socket.socketpair()
    first.close()
    second.close()

@pytest.mark.integration
def test_of_another_tier():
    time.sleep(0.01)
"""
    )
    result.assert_outcomes(passed=2)


def guarded_callables() -> list:
    return [
        *(getattr(os, name) for name in unit_purity.OS_PROCESS_STARTERS if hasattr(os, name)),
        subprocess.Popen.__init__,
        multiprocessing.process.BaseProcess.start,
        time.sleep,
        asyncio.sleep,
        socket.socket.__init__,
    ]


def test_every_guarded_callable_is_the_original_again_after_a_failed_test(run_tests):
    originals = guarded_callables()
    result = run_tests(
        """
import time
import pytest

@pytest.mark.unit
def test_waits():
    time.sleep(0.01)
"""
    )
    result.assert_outcomes(failed=1)
    assert all(now is before for now, before in zip(guarded_callables(), originals, strict=True))
