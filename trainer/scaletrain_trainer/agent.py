"""A pod's main process where its gang restarts in place: it runs the pod's workload (the built-in trainer's
launcher, or a script's own torchrun) as a child, and asks the operator what to do when the workload ends, or
while it runs. Usage: `python -m scaletrain_trainer.agent -- COMMAND...`.

The operator's word comes over its status-report endpoint (wire.IN_PLACE_PATH), on the pod's projected token: the
pod needs no API permissions. The protocol is wire.py's; the operator's side is in_place.py.

- **Ended.** When the workload fails, the agent says how (its exit code and termination message, which the kubelet
  forgets in an in-place restart) and waits for the verdict: RESTART, and it exits with EXIT_RESTART_IN_PLACE,
  which the container's restart rule turns into a restart of every container of the pod where it stands; END, and
  it exits with the workload's own code. A success, or a stop signal (the pod is going away), ends it at once.
- **Running.** Meanwhile it listens: a RESTART for a newer generation (another rank failed, the gang hung) kills
  the workload and exits the same way.
- **Restarted.** Started again in a pod where it ran before (the state file, on a volume the restart keeps), it
  waits at the barrier until the operator releases the next generation to every rank, and runs the workload at
  that generation (wire.GENERATION_ENV).

Every wait is bounded. An operator that cannot be reached, or says nothing in time, leaves the pod to end with the
workload's own code (or EXIT_HANG at the barrier): the operator then recreates the gang, as without this agent."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .contract import wire
from .contract.exit_codes import EXIT_HANG, EXIT_RESTART_IN_PLACE
from .stop_signals import StopSignals

VERDICT_SECONDS = 120.0  # how long an ended workload waits for the operator's verdict (a failover takes ~15 s)
BARRIER_SECONDS = 900.0  # how long a restarted pod waits for every rank (a replaced one is scheduled and started)
RETRY_SECONDS = 2.0  # between calls that found no operator
STOP_CHECK_SECONDS = 0.2  # how soon a wait ends after a stop signal
START_ERROR_EXIT_CODE = 128  # a workload command that cannot be started, as the container runtime reports one
LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048  # the end of a log the kubelet's FallbackToLogsOnError keeps
LOG_DRAIN_SECONDS = 1.0  # how long the end of a workload's output may take to come through


@dataclass(frozen=True)
class Word:
    """The operator's answer: a verdict (wire.RUN, RESTART, END or WAIT) and the generation it is about."""

    verdict: str
    generation: int


class Channel:
    """Calls on the operator's in-place endpoint, each with the pod's current token (the kubelet renews it)."""

    def __init__(self, url: str, token_file: Path, ca_file: Path):
        self.url, self.token_file = url, token_file
        self.tls = ssl.create_default_context(cafile=str(ca_file))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Channel | None:
        """The channel the pod's env names; None where the gang is not restarted in place."""
        names = (wire.IN_PLACE_URL_ENV, wire.REPORT_TOKEN_ENV, wire.REPORT_CA_ENV)
        if not all(environ.get(name) for name in names):
            return None
        url, token, ca = (environ[name] for name in names)
        return cls(url, Path(token), Path(ca))

    def call(self, body: dict) -> Word:
        """One call, held by the endpoint until it has a word (WAIT after wire.HOLD_SECONDS). OSError (a
        urllib.error.URLError among them) when the endpoint cannot be reached or refuses the call."""
        token = self.token_file.read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        with urllib.request.urlopen(request, timeout=wire.HOLD_SECONDS + 10, context=self.tls) as answer:
            said = json.loads(answer.read())
        if not isinstance(said, dict) or not isinstance(said.get("generation"), int):
            raise OSError(f"the operator's answer is not a verdict: {said!r}")
        return Word(str(said.get("verdict")), said["generation"])

    def until(self, body: dict, seconds: float, stopped: threading.Event | None = None) -> Word | None:
        """The first word other than WAIT, calling again within `seconds`; None when none came in time, or at once
        when `stopped` is set (a call held by the endpoint is left to end on a thread of its own)."""
        words: list[Word] = []
        stopped = stopped if stopped is not None else threading.Event()
        asking = threading.Thread(
            target=self._ask, args=(body, seconds, words, stopped), name="in-place-call", daemon=True
        )
        asking.start()
        while asking.is_alive() and not stopped.is_set():
            asking.join(STOP_CHECK_SECONDS)
        return words[0] if words else None

    def _ask(self, body: dict, seconds: float, words: list[Word], stopped: threading.Event) -> None:
        """Call until a word other than WAIT, `seconds` pass, or `stopped`: no call is made after the wait ended."""
        deadline = time.monotonic() + seconds
        complained = False
        while time.monotonic() < deadline and not stopped.is_set():
            try:
                word = self.call(body)
            except (OSError, ValueError) as error:
                if not complained:
                    print(f"scaletrain agent: no word from the operator yet ({error}); asking again", file=sys.stderr)
                    complained = True
                time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
                continue
            if word.verdict != wire.WAIT:
                words.append(word)
                return


def main(argv: list[str]) -> int:
    stop_signals = StopSignals()
    command = argv[1:] if argv[:1] == ["--"] else argv
    channel = Channel.from_env(os.environ)
    state = Path(os.environ.get(wire.IN_PLACE_STATE_ENV, "/nonexistent/scaletrain-agent-state"))
    generation = int(os.environ.get(wire.GENERATION_ENV, "0"))
    if channel is not None and (last := last_generation(state)) is not None:
        word = channel.until({"state": wire.READY, "generation": last}, BARRIER_SECONDS, stop_signals.stopped)
        if stop_signals.received is not None:
            return 128 + stop_signals.received
        if word is None or word.verdict != wire.RUN:
            print(f"scaletrain agent: generation {last + 1} was not released in time; ending", file=sys.stderr)
            return EXIT_HANG
        generation = word.generation
    if stop_signals.received is not None:  # stopped at the barrier, or before the workload began
        return 128 + stop_signals.received
    if channel is not None:
        keep_generation(state, generation)
    try:
        workload = subprocess.Popen(
            command,
            env=os.environ | {wire.GENERATION_ENV: str(generation)},
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as error:  # as the container runtime says of a command it cannot start, and with its code
        said = f"exec: {command[0] if command else ''!r}: {error.strerror or error}"
        print(f"scaletrain agent: {said}", file=sys.stderr)
        write_termination_message(said)
        return verdict_on(channel, generation, START_ERROR_EXIT_CODE, said, stop_signals.stopped)
    log = LogTail(workload)
    stop_signals.forward_to(workload)
    restart = Listener(channel, generation, workload) if channel is not None else None
    code = exit_code(workload.wait())
    if restart is not None and restart.stop() is not None:
        return EXIT_RESTART_IN_PLACE
    if stop_signals.received is not None:
        return code
    return verdict_on(channel, generation, code, termination_message() or log.text(), stop_signals.stopped)


def verdict_on(channel: Channel | None, generation: int, code: int, message: str, stopped: threading.Event) -> int:
    """The pod's exit after its workload ended with `code` and `message`: EXIT_RESTART_IN_PLACE when the operator
    answers RESTART, else `code` (a success, or no word in time)."""
    if channel is None or code == 0:
        return code
    ended = {"state": wire.ENDED, "generation": generation, "exitCode": code, "message": message}
    word = channel.until(ended, VERDICT_SECONDS, stopped)
    return EXIT_RESTART_IN_PLACE if word is not None and word.verdict == wire.RESTART else code


class LogTail:
    """The workload's output, passed on to the container's as it comes, the end of each stream kept. A failed workload
    that wrote no termination message is said by the end of its stderr, where Python, torchrun and most programs say
    why they failed; or of its stdout, where it wrote nothing to stderr. (The kubelet's FallbackToLogsOnError, which
    it no longer applies once the pod restarts in place, says the end of both as they interleaved: there a script's
    progress lines may push its error out, and its own buffering may put them after it.)"""

    def __init__(self, workload: subprocess.Popen):
        self._kept = {"stderr": bytearray(), "stdout": bytearray()}  # the one said first, if it holds anything
        self._lock = threading.Lock()
        self._copies = [
            threading.Thread(target=self._copy, args=(name, source, sink), name="workload-log", daemon=True)
            for name, source, sink in (
                ("stdout", workload.stdout, sys.stdout.buffer),
                ("stderr", workload.stderr, sys.stderr.buffer),
            )
        ]
        for copy in self._copies:
            copy.start()

    def _copy(self, name: str, source: IO[bytes], sink: IO[bytes]) -> None:
        while chunk := os.read(source.fileno(), 65536):
            sink.write(chunk)
            sink.flush()
            with self._lock:
                kept = self._kept[name]
                kept += chunk
                del kept[: -LOG_TAIL_BYTES * 4]

    def text(self) -> str:
        """The end of stderr, else of stdout: its last LOG_TAIL_LINES lines, at most LOG_TAIL_BYTES (the kubelet's
        bounds)."""
        for copy in self._copies:  # what the workload wrote last; a child that outlived it may hold the pipe
            copy.join(LOG_DRAIN_SECONDS)
        with self._lock:
            kept = next((bytes(stream) for stream in self._kept.values() if stream.strip()), b"")
        lines = kept.decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        return "\n".join(lines)[-LOG_TAIL_BYTES:]


class Listener:
    """While the workload runs, the operator's word on its generation: a RESTART kills the workload's process
    group (the kubelet's restart kills whatever is left of the container, workers in sessions of their own)."""

    def __init__(self, channel: Channel, generation: int, workload: subprocess.Popen):
        self.channel, self.generation, self.workload = channel, generation, workload
        self.word: Word | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="in-place-listener", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        running = {"state": wire.RUNNING, "generation": self.generation}
        while not self._done.is_set():
            word = self.channel.until(running, BARRIER_SECONDS, self._done)
            if word is not None and word.verdict == wire.RESTART and not self._done.is_set():
                self.word = word
                try:
                    os.killpg(self.workload.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return

    def stop(self) -> Word | None:
        """The RESTART that ended the workload, if one did."""
        self._done.set()
        return self.word


def last_generation(state: Path) -> int | None:
    """The generation this pod ran before an in-place restart; None on its first start."""
    try:
        text = state.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() else None


def keep_generation(state: Path, generation: int) -> None:
    try:
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(str(generation))
    except OSError as error:  # then a restart in place finds no state, and runs the env's generation
        print(f"scaletrain agent: cannot keep the generation in {state}: {error}", file=sys.stderr)


def write_termination_message(text: str) -> None:
    try:
        wire.termination_message_path().write_text(text[-wire.TERMINATION_MESSAGE_LIMIT :])
    except OSError:  # nowhere to write it: the log has it
        pass


def termination_message() -> str:
    """The workload's termination message, within what the kubelet would keep of it."""
    try:
        text = wire.termination_message_path().read_bytes()[-wire.TERMINATION_MESSAGE_LIMIT :]
    except OSError:
        return ""
    return text.decode(errors="ignore")


def exit_code(returncode: int) -> int:
    """A child's exit as a container runtime reports it: a signal N as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
