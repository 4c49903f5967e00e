"""A TCP gate in front of the tests' PostgreSQL: how a test makes the database unreachable for
real (or slow to answer) for one server, without touching the server's code or the PostgreSQL
that other tests share.

    with PgGate(database_url) as gate:
        settings = Settings(database_url=gate.url, ...)  # the server connects through the gate
        gate.refuse()  # connections are refused and the open ones reset: an outage
        gate.open()  # it answers again, on the same address

Rules:
- `open()` (the start): every connection is forwarded both ways to PostgreSQL (its TCP address or
  its Unix socket, as the URL says);
- `refuse()`: nothing listens any more (a connection is refused) and every open connection is
  closed, as when PostgreSQL stops;
- `hold()`: new connections are accepted and not answered (a database, or a host, that has
  gone quiet; a starved one, slow to answer); the connections already open keep working.
  `abandoned()` counts the held connections whose client gave up waiting; `open()` ends it (the
  held ones are answered late);
- the gate's address stays the same throughout.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from typing import Self
from urllib.parse import parse_qsl, urlencode, urlsplit

_LINGER_RESET = struct.pack("ii", 1, 0)  # close with RST


def _close(sock: socket.socket) -> None:
    """Close a socket that another thread may be blocked on (shutting it down wakes that thread)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _upstream(url: str) -> tuple[int, object]:
    """(address family, address) of the PostgreSQL a URL names."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    host = query.get("host") or parts.hostname or "localhost"
    port = int(query.get("port") or parts.port or 5432)
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host.rstrip('/')}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


class PgGate:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._family, self._address = _upstream(database_url)
        self._lock = threading.Lock()
        self._mode = "open"
        self._listener: socket.socket | None = None
        self._port = 0
        self._open: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """The database URL through the gate."""
        parts = urlsplit(self.database_url)
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")])
        user = parts.username or "postgres"
        password = f":{parts.password}" if parts.password else ""
        return f"postgresql://{user}{password}@127.0.0.1:{self._port}{parts.path}" + (
            f"?{query}" if query else ""
        )

    def __enter__(self) -> Self:
        self._listen()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self.refuse()
        for thread in self._threads:
            thread.join(5)

    # --- modes ----------------------------------------------------------------------------------

    def refuse(self) -> None:
        with self._lock:
            self._mode = "refuse"
            listener, self._listener = self._listener, None
            pairs, self._open = self._open, []
            held, self._held = self._held, []
        if listener is not None:
            _close(listener)
        for client, upstream in pairs:
            with contextlib.suppress(OSError):
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            _close(client)
            _close(upstream)
        for client in held:
            _close(client)

    def hold(self) -> None:
        with self._lock:
            self._mode = "hold"
        if self._listener is None:
            self._listen()

    def open(self) -> None:
        with self._lock:
            self._mode = "open"
            held, self._held = self._held, []
        for client in held:  # answered late
            self._forward(client)
        if self._listener is None:
            self._listen()

    def abandoned(self) -> int:
        """How many held connections their client has given up on (closed its end)."""
        with self._lock:
            held = list(self._held)
        given_up = 0
        for client in held:
            poller = select.poll()
            poller.register(client, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
            given_up += bool(poller.poll(0))
        return given_up

    def idle(self) -> bool:
        """No connection is open (or held) through the gate."""
        with self._lock:
            return not self._open and not self._held

    # --- the work -------------------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self._port))
        listener.listen(64)
        self._port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self._spawn(self._accept, listener)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _accept(self, listener: socket.socket) -> None:
        listener.settimeout(0.2)  # to notice a refusal even where closing does not wake accept()
        while not self._stopped.is_set() and listener is self._listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed: refused from now on
            client.settimeout(None)
            with self._lock:
                mode = self._mode
                if mode == "hold":
                    self._held.append(client)
                    continue
            if mode != "open":
                client.close()
                continue
            self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        upstream = socket.socket(self._family, socket.SOCK_STREAM)
        try:
            upstream.connect(self._address)  # type: ignore[arg-type]
        except OSError:
            client.close()
            upstream.close()
            return
        pair = (client, upstream)
        directions = [2]  # the pumps still going
        with self._lock:
            self._open.append(pair)
        self._spawn(self._pump, client, upstream, directions, pair)
        self._spawn(self._pump, upstream, client, directions, pair)

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        directions: list[int],
        pair: tuple[socket.socket, socket.socket],
    ) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            directions[0] -= 1
            if directions[0]:
                return  # the other direction is still going
            if pair in self._open:  # both are over: so is the connection
                self._open.remove(pair)
        for sock in pair:
            sock.close()
