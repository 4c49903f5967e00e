"""The HTTP/1.1 connection layer under the application (uvicorn's httptools protocol, extended).

What it adds, because it happens before a request reaches the application:
- errors are JSON like every other (`{"error_code","message","details"}`): a malformed request
  (bad bytes) is 400 `INVALID_PARAMETER_VALUE`; a request line and headers longer than 16 KiB
  together are 431 `REQUEST_HEADER_FIELDS_TOO_LARGE`, however many reads they arrive in;
- a cap on open connections (`CATALOG_MAX_CONNECTIONS`) and on open connections from one client
  address (`CATALOG_MAX_CONNECTIONS_PER_CLIENT`, so that one client cannot take the whole
  budget): a connection over either is answered 503 `TEMPORARILY_UNAVAILABLE` with `Retry-After`
  and closed at once;
- slow-client protection: a new connection that sends nothing within `CATALOG_FIRST_BYTE_TIMEOUT`
  is closed quietly; a client that has not sent a complete request line and headers within
  `CATALOG_HEADER_TIMEOUT` (counted from their first byte) gets 408 `REQUEST_TIMEOUT` and is
  disconnected; idle keep-alive connections are closed quietly by uvicorn's keep-alive timeout.
  (A slow body is the application's `CATALOG_BODY_TIMEOUT`: see catalog.web.middleware.)
These connection-level refusals carry no principal and are not audit events; each is a log line,
at most one a second for each kind of refusal (then a count of those not logged).

What a connection writes in one turn of the event loop goes out in one system call
(`Coalescing`): uvicorn writes a response's status line and headers, then its body, which would
otherwise be two packets, each a system call that wakes the client.

And the drain before a shut-down (`Drain`, `Draining`; `catalog serve` runs them): from the first
SIGTERM or SIGINT, `/healthz` answers 503 `draining` (catalog.web.health) so that a load balancer
takes the server out of rotation, while requests are still accepted and served, each answer
carrying `Connection: close` so that its client reconnects (elsewhere, once the balancer has
moved); after `CATALOG_DRAIN_SECONDS` (at once when nothing has asked `/healthz`, or on a second
signal) the listening socket closes and the shut-down proper begins (catalog.cli's server).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from catalog.errors import error_body
from catalog.wire.inputs import MAX_HEAD_BYTES

log = logging.getLogger("catalog.request")

DRAIN_STATE_KEY = "catalog.drain"  # where a request's ASGI state holds the server's `Drain`


class Drain:
    """Whether the server is draining before it stops, and until when.

    The wait is for a health checker to notice the 503 of `/healthz`: a server whose `/healthz`
    nobody has asked since it started (`watched`) has no balancer to wait for, and stops at once.
    The workers of one `catalog serve --workers N` share whether it was asked (`shared`: one
    byte of memory every worker maps), since a balancer's checks reach whichever worker accepts
    them, and they all drain alike.
    """

    def __init__(self, seconds: float, shared: Any = None) -> None:
        self.seconds = seconds  # CATALOG_DRAIN_SECONDS
        self.shared = shared  # a writable buffer of one byte shared with the other workers, or None
        self._watched = False
        self.began: float | None = None  # time.monotonic() of the signal
        self.deadline: float | None = None

    @property
    def watched(self) -> bool:
        """Whether a /healthz request has come (catalog.web.health sets it)."""
        return self._watched or (self.shared is not None and self.shared[0] != 0)

    @watched.setter
    def watched(self, value: bool) -> None:
        self._watched = value
        if self.shared is not None:
            self.shared[0] = 1 if value else 0

    @property
    def draining(self) -> bool:
        return self.began is not None

    def begin(self) -> None:
        """Start draining (a signal came); a second call ends the wait at once."""
        now = time.monotonic()
        if self.began is None:
            self.began = now
            self.deadline = now + (self.seconds if self.watched else 0.0)
        else:
            self.deadline = min(self.deadline or now, now)

    def seconds_left(self) -> float:
        if self.deadline is None:
            return self.seconds
        return max(0.0, self.deadline - time.monotonic())

    def over(self) -> bool:
        """Whether the wait is over: time to close the listening socket."""
        return self.deadline is not None and time.monotonic() >= self.deadline


def drain_of(scope: Any) -> Drain | None:
    """The server's `Drain`, from a request's ASGI scope; None when not run by `Draining`."""
    state = scope.get("state") or {}
    drain = state.get(DRAIN_STATE_KEY)
    return drain if isinstance(drain, Drain) else None


WORKER_HEADER = b"x-catalog-worker"  # which worker of `catalog serve --workers N` answered


class Draining:
    """The ASGI application as `catalog serve` runs it: each request's state holds the `Drain`,
    and while the server drains every answer carries `Connection: close` (the connection closes
    once it is written, so keep-alive clients reconnect). A worker of `catalog serve --workers N`
    also names itself in each answer (`X-Catalog-Worker: <number>`)."""

    def __init__(self, app: Any, drain: Drain, worker: int | None = None) -> None:
        self.app = app
        self.drain = drain
        self.worker = None if worker is None else (WORKER_HEADER, str(worker).encode())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        drain = self.drain
        worker = self.worker
        scope.setdefault("state", {})[DRAIN_STATE_KEY] = drain

        async def send_closing(message: Any) -> None:
            if message["type"] == "http.response.start" and (drain.draining or worker is not None):
                headers = list(message.get("headers", []))
                if drain.draining:
                    headers = [(k, v) for k, v in headers if k.lower() != b"connection"]
                    headers.append((b"connection", b"close"))
                if worker is not None:
                    headers.append(worker)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_closing)


class _Throttled:
    """One log line a second for a kind of refusal, then how many were not logged."""

    def __init__(self) -> None:
        self.last = float("-inf")
        self.unlogged = 0

    def warn(self, message: str, **extra: Any) -> None:
        now = time.monotonic()
        if now - self.last < 1.0:
            self.unlogged += 1
            return
        if self.unlogged:
            extra["not_logged_since"] = self.unlogged
        self.last, self.unlogged = now, 0
        log.warning(message, extra=extra)


_REFUSALS: dict[str, _Throttled] = {}


def _warn(kind: str, message: str, **extra: Any) -> None:
    _REFUSALS.setdefault(kind, _Throttled()).warn(message, **extra)


class Coalescing:
    """A connection's transport whose writes of one turn of the event loop go out together, at the
    end of the turn (or before a close); everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self.pending is None:
            self.pending = [bytes(data)]
            self.loop.call_soon(self.flush)
        else:
            self.pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        pending, self.pending = self.pending, None
        if pending and not self.transport.is_closing():
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self.pending = None
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class CatalogProtocol(HttpToolsProtocol):
    def __init__(
        self,
        *args: Any,
        max_connections: int = 0,
        max_connections_per_client: int = 0,
        first_byte_timeout: float = 0.0,
        header_timeout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client
        self.first_byte_timeout = first_byte_timeout
        self.header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self._silent = True  # nothing received yet on this connection
        # where the parser is: a request's line and headers begun and not complete (`_head_open`),
        # or its body being read; the bytes of that incomplete head received so far (what the
        # next read's check adds to); how many heads began and whether a request ended, counted
        # during each read
        self._head_open = False
        self._reading_body = False
        self._pending = b""
        self._began = 0
        self._ended = False

    # --- the connection caps -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(Coalescing(transport, self.loop))  # type: ignore[arg-type]
        if self.max_connections and len(self.connections) > self.max_connections:
            _warn("total", "connection refused: too many open connections", limit=self.max_connections)
            self.refuse(
                503,
                "TEMPORARILY_UNAVAILABLE",
                f"the server has {self.max_connections} open connections; retry shortly",
                retry_after=1,
            )
            return
        if self.max_connections_per_client and self._from_this_client() > self.max_connections_per_client:
            _warn(
                "client",
                "connection refused: too many open connections from one client",
                limit=self.max_connections_per_client,
                client=self.client[0] if self.client else None,
            )
            self.refuse(
                503,
                "TEMPORARILY_UNAVAILABLE",
                f"this client has {self.max_connections_per_client} open connections; close some or "
                "retry shortly",
                retry_after=1,
            )
            return
        # the first byte is waited for no longer than a whole head would be
        timeouts = [t for t in (self.first_byte_timeout, self.header_timeout) if t > 0]
        self._arm_header_timer(min(timeouts, default=0.0))

    def _from_this_client(self) -> int:
        """Open connections from this connection's address (this one included)."""
        if not self.client:
            return 0
        address = self.client[0]
        count = 0
        for connection in self.connections:
            client: tuple[str, int] | None = getattr(connection, "client", None)
            count += client is not None and client[0] == address
        return count

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    # --- where the parser is -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open = True
        self._began += 1

    def on_headers_complete(self) -> None:
        hosts = sum(name == b"host" for name, _ in self.headers)
        if hosts > 1 or (hosts == 0 and self.parser.get_http_version() == "1.1"):
            # RFC 9112 3.2: an HTTP/1.1 request names its host once (the parser does not check it)
            raise ValueError("an HTTP/1.1 request needs one Host header")  # answered 400 (send_400_response)
        self._head_open = False
        self._reading_body = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading_body = False
        self._ended = True
        super().on_message_complete()

    # --- large heads and slow clients ----------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if not self._reading_body and self._head_too_large(data):
            _warn("head", "request refused: request line and headers too large", limit=MAX_HEAD_BYTES)
            self.refuse(
                431,
                "REQUEST_HEADER_FIELDS_TOO_LARGE",
                f"the request line and headers must be at most {MAX_HEAD_BYTES // 1024} KiB together",
            )
            return
        first = self._silent and bool(data)
        self._silent = self._silent and not data
        began, self._ended = self._began, False
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._head_open:
            if self._ended:  # a request ended in this read and the next one's head began after it
                end = data.rfind(b"\r\n\r\n")
                self._pending = data[end + 4 :] if end >= 0 else data
            else:
                self._pending += data
        else:
            self._pending = b""
        if self._head_open or not self._busy():
            if first or self._began != began or self._header_timer is None:
                self._arm_header_timer()  # the first bytes of a new request
        else:
            self._cancel_header_timer()  # the request line and headers are complete

    def _busy(self) -> bool:
        """Whether a request is being read or answered."""
        return self._reading_body or (self.cycle is not None and not self.cycle.response_complete)

    def _head_too_large(self, data: bytes) -> bool:
        """Whether the request whose head is arriving (what came of it before, then `data`) has
        more than MAX_HEAD_BYTES before the blank line that ends its headers, however many reads
        it arrives in (the parser itself sets no limit). A head that follows, in one read, a
        request with a body is counted with that body's last bytes (never less than it is)."""
        pending = self._pending
        if len(pending) + len(data) <= MAX_HEAD_BYTES:
            return False
        head = (pending + data).lstrip(b"\r\n")  # blank lines between requests are allowed
        end = head.find(b"\r\n\r\n")
        return (end + 4 if end >= 0 else len(head)) > MAX_HEAD_BYTES

    def _arm_header_timer(self, timeout: float | None = None) -> None:
        self._cancel_header_timer()
        timeout = self.header_timeout if timeout is None else timeout
        if timeout > 0:
            self._header_timer = self.loop.call_later(timeout, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self._busy():
            return  # a request is being read or answered (pipelining): not the client's fault
        if not self._head_open:
            self.transport.close()  # an idle connection: close quietly
            return
        _warn("slow", "connection closed: request headers too slow", timeout=self.header_timeout)
        self.refuse(
            408,
            "REQUEST_TIMEOUT",
            f"the request line and headers did not arrive within {self.header_timeout:g} s",
        )

    # --- JSON for uvicorn's own errors ---------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        self.refuse(400, "INVALID_PARAMETER_VALUE", "malformed HTTP request")

    def refuse(self, status: int, error_code: str, message: str, retry_after: int | None = None) -> None:
        """Answer an error on the raw connection and close it (whatever state the parser is in)."""
        self._cancel_header_timer()
        body = json.dumps(error_body(error_code, message)).encode()
        head = [
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            "connection: close",
        ]
        if retry_after is not None:
            head.append(f"retry-after: {retry_after}")
        if not self.transport.is_closing():
            self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            self.transport.close()
