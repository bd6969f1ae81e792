"""One address in front of several servers, as a Service in front of an operator's replicas: each connection
goes to the first server in `order` that takes it (a TCP relay; TLS passes through). The test sets the order
(the active replica first), and a server that is gone, refusing connections, is passed over, as endpoints drop a
dead pod.

    with FrontDoor(host, [active_port, standby_port]) as door:
        ...  # clients connect to (host, door.port)
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence

CONNECT_S = 2.0  # a backend on this machine takes a connection at once, or is gone
IDLE_S = 30.0  # a relayed connection with nothing to say for this long is closed


class FrontDoor:
    def __init__(self, host: str, order: Sequence[int]):
        self.host, self.order = host, list(order)
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.5)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="front-door", daemon=True)

    def __enter__(self) -> FrontDoor:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        for port in list(self.order):
            try:
                backend = socket.create_connection((self.host, port), timeout=CONNECT_S)
                break
            except OSError:  # gone: the next one
                continue
        else:
            client.close()
            return
        for one in (client, backend):
            one.settimeout(IDLE_S)
        threading.Thread(target=_pipe, args=(backend, client), daemon=True).start()
        _pipe(client, backend)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from `source` to `sink` until either side ends; then both are closed."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for one in (source, sink):
            one.close()
