"""A /progress endpoint as a hostile or broken pod might serve it, one shape per server:

    with HostileServer("trickle") as server:
        read_progress(f"http://127.0.0.1:{server.port}/progress", timeout_seconds=2)

Each shape is an answer that once stalled or broke the operator's housekeeping pass (SHAPES). The
server speaks raw TCP, so it can send what no HTTP library would, and counts the bytes it managed to
send (`sent`): a reader that stops early keeps that small.

The other way round, `Slowloris` is a hostile client of a server: connections that trickle a request or
send nothing, held as long as the server lets them.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

HEADERS = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"


def _answer(body: bytes, extra: str = "") -> bytes:
    return (HEADERS + f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


Send = Callable[[bytes], None]


def _json(body: str) -> Callable[[Send, threading.Event], None]:
    return lambda send, stop: send(_answer(body.encode()))


def _short(send: Send, stop: threading.Event) -> None:
    """Promises 1000 bytes, sends 10, and closes."""
    send((HEADERS + "Content-Length: 1000\r\n\r\n").encode() + b'{"step": 1')


def _trickle(send: Send, stop: threading.Event) -> None:
    """A valid beginning, then one byte every 50 ms, for as long as the reader waits."""
    send((HEADERS + "Content-Length: 100000\r\n\r\n").encode())
    while not stop.wait(0.05):
        send(b" ")


def _huge(send: Send, stop: threading.Event) -> None:
    """A 400 MB body, for as long as the reader takes it."""
    send((HEADERS + f"Content-Length: {400 * 2**20}\r\n\r\n").encode() + b'{"step": 1, "x": "')
    chunk = b"x" * 65536
    for _ in range(400 * 2**20 // len(chunk)):
        if stop.is_set():
            return
        send(chunk)


def _silent(send: Send, stop: threading.Event) -> None:
    """Accepts, then says nothing."""
    stop.wait(30)


SHAPES: dict[str, Callable[[Send, threading.Event], None]] = {
    "list": _json("[]"),
    "string": _json('"progress"'),
    "short": _short,
    "not-http": lambda send, stop: send(b"SSH-2.0-OpenSSH_9.6\r\n"),
    "http-error": lambda send, stop: send(b"HTTP/1.0 500 Oops\r\nContent-Length: 2\r\n\r\n{}"),
    "trickle": _trickle,
    "huge": _huge,
    "silent": _silent,
    "deep": _json("[" * 100_000 + "]" * 100_000),
    "nan": _json('{"step": 9, "maxSteps": 30, "loss": NaN, "updatedAt": "2026-12-01T00:00:00+00:00"}'),
    "wrong-types": _json(
        '{"step": -1, "maxSteps": "30", "loss": "1.5", "samplesPerSecond": -3, "etaSeconds": 1e999,'
        ' "tokensPerSecond": -1, "tflopsPerDevice": "12", "mfu": 1.5,'
        ' "updatedAt": "yesterday", "staleAfter": 12, "checkpointsSetAside": ["../../etc/passwd"], "extra": {"a": 1}}'
    ),
    "long-set-aside": _json('{"step": 3, "checkpointsSetAside": [' + ", ".join(['"step-1.corrupt"'] * 17) + "]}"),
}


class HostileServer:
    def __init__(self, shape: str):
        self.shape = SHAPES[shape]
        self.sent = 0  # bytes the reader took
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # accept() wakes up to notice the server stopping
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"hostile-{shape}", daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        def send(data: bytes) -> None:
            connection.sendall(data)
            with self._lock:
                self.sent += len(data)

        with connection:
            try:
                connection.recv(4096)  # the request
                self.shape(send, self._stop)
                time.sleep(0.05)  # let the reader see the whole answer before the close
            except OSError:  # the reader hung up
                pass


class Slowloris:
    """Hostile clients of the HTTP server at 127.0.0.1:`port`: `trickling` connections that send a request
    one byte per `tick` seconds, never finishing it, and `idle` ones that send nothing. Each one the server
    closes is noted, with how long it was open (`lifetimes`, by kind), and replaced at the next tick, as an
    attacker would, so that the load holds for as long as the context lasts."""

    TRICKLED = b"GET /progress HTTP/1.1\r\nHost: victim\r\nX-Padding: " + b"a" * 4096

    def __init__(self, port: int, trickling: int = 0, idle: int = 0, tick: float = 1.0):
        self.port, self.tick = port, tick
        self.wanted = {"trickling": trickling, "idle": idle}
        self.lifetimes: dict[str, list[float]] = {"trickling": [], "idle": []}
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._attack, name="slowloris", daemon=True)

    def __enter__(self) -> Slowloris:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()

    def _held(self) -> dict[str, int]:
        """The connections held open, by kind."""
        kinds = [key.data.kind for key in self._selector.get_map().values()]
        return {kind: kinds.count(kind) for kind in self.wanted}

    def _attack(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() >= next_tick:
                self._refill()
                self._trickle()
                next_tick += self.tick
            for key, _ in self._selector.select(timeout=max(0.0, next_tick - time.monotonic())):
                self._note_if_closed(key.fileobj, key.data)

    def _refill(self) -> None:
        held = self._held()
        for kind, wanted in self.wanted.items():
            for _ in range(wanted - held[kind]):
                try:
                    connection = socket.create_connection(("127.0.0.1", self.port), timeout=1)
                except OSError:  # refused or backlogged: tried again at the next tick
                    break
                connection.setblocking(False)
                self._selector.register(connection, selectors.EVENT_READ, _Held(kind, time.monotonic()))

    def _trickle(self) -> None:
        for key in list(self._selector.get_map().values()):
            held: _Held = key.data
            if held.kind != "trickling":
                continue
            try:
                key.fileobj.send(self.TRICKLED[held.sent : held.sent + 1])
                held.sent += 1
            except OSError:  # closed by the server: noted as such
                self._note_if_closed(key.fileobj, held)

    def _note_if_closed(self, connection: socket.socket, held: _Held) -> None:
        try:
            if connection.recv(4096):
                return  # an answer (none is expected before the request is complete): still open
        except BlockingIOError:
            return
        except OSError:  # reset
            pass
        self.lifetimes[held.kind].append(time.monotonic() - held.opened)
        self._selector.unregister(connection)
        connection.close()


@dataclass
class _Held:
    kind: str
    opened: float
    sent: int = 0
