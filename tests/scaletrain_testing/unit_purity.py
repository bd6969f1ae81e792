"""A pytest plugin that keeps the unit tier pure: a test marked `unit` fails, naming what it did, when its
set-up or its body starts a process, sleeps or opens a network socket. Such a test is slow, flaky on a
loaded machine, or both; it belongs in tests/integration.

While a unit test's set-up and body run, the callables that do those things are swapped for guards that
refuse the call; they are put back afterwards, however the phase ends. A refused call raises in the thread
that made it, and fails the test also where that thread is not the test's own (a server's, a worker's) or
the test caught the error. Calls through a reference taken beforehand (`from time import sleep`), and
processes or sockets that native code starts (gloo's), go unseen.

Allowed: time.sleep(0) and asyncio.sleep(0), which only yield; AF_UNIX sockets, such as the socketpair
every asyncio event loop makes for itself; a socket object around an existing descriptor (an accepted
connection, socket.fromfd)."""

from __future__ import annotations

import asyncio
import multiprocessing.process
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

TIER = "unit"
ADVICE = "tests/unit is pure (no process, no sleep, no socket): a test that needs one belongs in tests/integration"
# Each ends in os.fork, os.posix_spawn or a Popen, but is named as the test called it.
OS_PROCESS_STARTERS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system") + tuple(
    name for name in dir(os) if name.startswith("spawn")
)
NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)
DEFAULT = -1  # socket.socket's "not given" for family, type and proto


class PurityGuard:
    """The guards of one phase of one test, and the calls they refused."""

    def __init__(self, phase: str):
        self.during = " during its set-up" if phase == "setup" else ""
        self.test_thread = threading.current_thread()
        self.refused: list[pytest.fail.Exception] = []

    @contextmanager
    def installed(self) -> Iterator[None]:
        # Each guard is a plain function, not a bound method: set on a class, it gets the instance bound to
        # it as the method it stands in for does.
        with pytest.MonkeyPatch.context() as patch:
            for name in OS_PROCESS_STARTERS:
                if hasattr(os, name):
                    patch.setattr(os, name, self._refusing(f"os.{name}"))
            patch.setattr(subprocess.Popen, "__init__", self._refusing_popen())
            patch.setattr(multiprocessing.process.BaseProcess, "start", self._refusing_process_start())
            patch.setattr(time, "sleep", self._guarded_sleep(time.sleep))
            patch.setattr(asyncio, "sleep", self._guarded_asyncio_sleep(asyncio.sleep))
            patch.setattr(socket.socket, "__init__", self._guarded_socket(socket.socket.__init__))
            yield

    def refuse(self, what: str) -> None:
        """Raise, in the calling thread, the failure that names what the test did; the test fails with it
        after the phase even where this thread is not the test's."""
        __tracebackhide__ = True  # the traceback ends at the call, not in this plugin
        thread = threading.current_thread()
        where = "" if thread is self.test_thread else f" (in its thread {thread.name!r})"
        refusal = pytest.fail.Exception(f"this unit test {what}{self.during}{where}. {ADVICE}", pytrace=True)
        self.refused.append(refusal)
        raise refusal

    def check(self, ended_with: BaseException | None) -> None:
        """After the phase: fail it for the calls refused, unless it ended with such a refusal already (whose
        traceback shows the call)."""
        if not self.refused or any(ended_with is refusal for refusal in self.refused):
            return
        raise pytest.fail.Exception("\n".join(str(refusal) for refusal in self.refused), pytrace=False) from ended_with

    def _refusing(self, name: str) -> Callable[..., None]:
        def refuse(*args: Any) -> None:
            __tracebackhide__ = True
            self.refuse(f"started a process: {name}({', '.join(repr(arg) for arg in args)})")

        return refuse

    def _refusing_popen(self) -> Callable[..., None]:
        def init(popen: subprocess.Popen, args: Any, *more: Any, **options: Any) -> None:
            __tracebackhide__ = True
            self.refuse(f"started a process: subprocess.Popen({args!r})")

        return init

    def _refusing_process_start(self) -> Callable[[multiprocessing.process.BaseProcess], None]:
        def start(process: multiprocessing.process.BaseProcess) -> None:
            __tracebackhide__ = True
            self.refuse(f"started a process: multiprocessing's {process.name}.start()")

        return start

    def _guarded_sleep(self, real_sleep: Callable[[float], None]) -> Callable[[float], None]:
        def sleep(seconds: float) -> None:
            __tracebackhide__ = True
            if seconds > 0:
                self.refuse(f"slept: time.sleep({seconds!r})")
            real_sleep(seconds)

        return sleep

    def _guarded_asyncio_sleep(self, real_sleep: Callable[..., Any]) -> Callable[..., Any]:
        def sleep(delay: float, result: Any = None) -> Any:
            __tracebackhide__ = True
            if delay > 0:
                self.refuse(f"slept: asyncio.sleep({delay!r})")
            return real_sleep(delay, result)

        return sleep

    def _guarded_socket(self, real_init: Callable[..., None]) -> Callable[..., None]:
        def init(sock: socket.socket, family=DEFAULT, type=DEFAULT, proto=DEFAULT, fileno=None) -> None:
            __tracebackhide__ = True
            # A new socket (no descriptor to wrap) whose family is not given is an AF_INET one.
            if fileno is None and (family == DEFAULT or family in NETWORK_FAMILIES):
                name = socket.AddressFamily(socket.AF_INET if family == DEFAULT else family).name
                self.refuse(f"opened a network socket: socket.socket({name})")
            real_init(sock, family, type, proto, fileno)

        return init


def _guarded(item: pytest.Item, phase: str) -> Iterator[Any]:
    """A phase's hook wrapper: the phase, guarded where the item is a unit test."""
    if item.get_closest_marker(TIER) is None:
        return (yield)
    guard = PurityGuard(phase)
    with guard.installed():
        try:
            result = yield
        except BaseException as error:
            guard.check(error)
            raise
    guard.check(None)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[Any]:
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    return (yield from _guarded(item, "call"))
