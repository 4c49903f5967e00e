"""Lean HTTP/1.1 transports for the clients over a plain-HTTP URL (a server on this machine or in
the same network): keep-alive connections, on asyncio's streams for `AsyncClient`
(`LeanTransport`) and on sockets for `Client` (`LeanSyncTransport`). httpx's default transports
pass every request through httpcore's connection pool (anyio's primitives for asyncio) and h11's
state machine; the clients build each request themselves and hand it to these directly
(`catalog.client._core.direct_request`). A search then costs `AsyncClient` 0.23 ms of CPU
against 0.66-0.69 on httpx's client and transport, and `Client` 0.20-0.23 against 0.43-0.46
(a 2-core machine: `bench/client_overhead.py`).

They carry what the clients send and the server answers: a request whose body is bytes (httpx
built its head: method, target, headers, `Content-Length`; a body httpx streams is read first
and sent as one chunk), and an answer read whole (`Answer`: framed by `Content-Length`, chunked,
or by the connection's end; interim 1xx answers skipped; `Connection: close`, or HTTP/1.0's
default, ends the connection). A header holding a line break is refused before anything is
sent. Timeouts are httpx's (connect, read (each read), write, pool); at most `max_connections`
connections are open at once and `max_keepalive` of them kept idle. An HTTPS URL, or one that a
proxy from the environment applies to, goes through httpx's own transport instead
(`lean_transport`, `lean_sync_transport` decide); so does every request of a client given an
httpx client, and a backup's streamed download and upload (`Client.download`, `Client.upload`).

A connection kept idle is not reused once the server has closed it or sent anything on it (a
`408` before closing is no answer to the next request). When a reused connection fails before
any answer came (its end had not yet arrived), the request is sent again on a new one only if
its method may safely run twice (`SAFE_TO_RESEND`): a create may have reached the server, and
fails instead. A server that answers before it has read the whole request (a `413`) and closes
is read: the blocking transport returns that answer; asyncio's stream raises the reset before
what it read, so the async one reports the failed write (as httpx's own transport does).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import Literal

import httpx

SAFE_TO_RESEND = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
READ_SIZE = 65536
HEAD_LIMIT = 65536  # the longest head of an answer
MAX_HEADERS = 200
NO_BODY = frozenset({204, 304})


def _plain(url: str) -> bool:
    """Whether a lean transport may serve `url`: plain HTTP (an HTTPS URL keeps httpx's
    certificate settings), with no proxy from the environment for it."""
    parsed = httpx.URL(url)
    if parsed.scheme != "http" or not parsed.host:
        return False
    proxies = urllib.request.getproxies()
    return not (proxies.get("http") or proxies.get("all")) or bool(urllib.request.proxy_bypass(parsed.host))


def lean_transport(url: str) -> LeanTransport | None:
    """`AsyncClient`'s transport for `url`, or None where httpx's own must serve it."""
    return LeanTransport() if _plain(url) else None


def lean_sync_transport(url: str) -> LeanSyncTransport | None:
    """`Client`'s transport for `url`, or None where httpx's own must serve it."""
    return LeanSyncTransport() if _plain(url) else None


# --- the messages (no I/O) ----------------------------------------------------------------------


def request_bytes(request: httpx.Request, content: bytes) -> bytes:
    """The request as sent: its head as httpx built it (line breaks refused), then its body (as
    it is under `Content-Length`, else, read from a stream httpx announced as chunked, as one
    chunk)."""
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
    for name, value in request.headers.raw:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name or b":" in name:
            raise httpx.LocalProtocolError(
                f"header {name.decode('latin-1')!r} holds a line break (or its name a colon)", request=request
            )
        lines.append(b"%s: %s\r\n" % (name, value))
    lines.append(b"\r\n")
    if "transfer-encoding" in request.headers and "content-length" not in request.headers:
        content = (b"%x\r\n%s\r\n" % (len(content), content) if content else b"") + b"0\r\n\r\n"
    lines.append(content)
    return b"".join(lines)


class Malformed(Exception):
    """The answer is not HTTP/1.1 as these transports read it."""


class Incomplete(Exception):
    """The connection ended before the answer did."""


State = Literal["head", "length", "size", "chunk", "trailer", "until-end", "done"]


@dataclass(eq=False)
class Answer:
    """An answer read from the bytes as they arrive, without I/O of its own: `feed` what was
    read until it returns True (whole); `end()` when the connection ended first."""

    method: str
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    keep: bool = True  # the connection may carry another request after it
    state: State = "head"
    _buffer: bytearray = field(default_factory=bytearray)
    _at: int = 0  # how much of the buffer was read
    _left: int = 0  # the body's or the chunk's bytes still to come
    _parts: list[bytes] = field(default_factory=list)

    @property
    def body(self) -> bytes:
        return b"".join(self._parts)

    @property
    def begun(self) -> bool:
        """Any byte of an answer came."""
        return bool(self._buffer) or self.state != "head"

    def feed(self, data: bytes) -> bool:
        self._buffer += data
        while True:
            if self.state == "head":
                end = self._buffer.find(b"\r\n\r\n", self._at)
                if end < 0:
                    if len(self._buffer) - self._at > HEAD_LIMIT:
                        raise Malformed("an answer's head longer than 64 KiB")
                    return False
                head, self._at = bytes(self._buffer[self._at : end]), end + 4
                self._head(head)
            elif self.state == "length":
                if len(self._buffer) - self._at < self._left:
                    return False
                self._take(self._left)
                self.state = "done"
            elif self.state == "size":
                end = self._buffer.find(b"\r\n", self._at)
                if end < 0:
                    return False
                line, self._at = bytes(self._buffer[self._at : end]), end + 2
                size = line.split(b";", 1)[0].strip()
                if not size or any(c not in b"0123456789abcdefABCDEF" for c in size):
                    raise Malformed(f"chunk size {line[:40]!r}")
                self._left = int(size, 16)
                self.state = "chunk" if self._left else "trailer"
            elif self.state == "chunk":
                if len(self._buffer) - self._at < self._left + 2:
                    return False
                self._take(self._left)
                if self._buffer[self._at : self._at + 2] != b"\r\n":
                    raise Malformed("a chunk without its line end")
                self._at += 2
                self.state = "size"
            elif self.state == "trailer":
                end = self._buffer.find(b"\r\n", self._at)
                if end < 0:
                    return False
                empty, self._at = end == self._at, end + 2
                if empty:
                    self.state = "done"
            elif self.state == "until-end":
                return False
            if self.state == "done":
                if self._at < len(self._buffer):
                    self.keep = False  # bytes past the answer: the connection is not reused
                return True

    def end(self) -> None:
        """The connection ended: the answer framed by it is whole; any other is not."""
        if self.state != "until-end":
            raise Incomplete
        self._take(len(self._buffer) - self._at)
        self.state = "done"

    def _take(self, count: int) -> None:
        self._parts.append(bytes(self._buffer[self._at : self._at + count]))
        self._at += count
        if self._at == len(self._buffer):
            self._buffer.clear()
            self._at = 0

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise Malformed(f"status line {lines[0][:80]!r}")
        if len(lines) > MAX_HEADERS + 1:
            raise Malformed(f"more than {MAX_HEADERS} headers")
        headers = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise Malformed(f"header line {line[:80]!r}")
            headers.append((name, value.strip()))
        status = int(code)
        if 100 <= status < 200 and status != 101:
            return  # an interim answer: the final one follows
        self.status, self.headers = status, headers
        keep = version == b"HTTP/1.1"
        length: int | None = None
        chunked = False
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"connection":
                tokens = {t.strip() for t in value.lower().split(b",")}
                keep = b"close" not in tokens and (keep or b"keep-alive" in tokens)
            elif lowered == b"transfer-encoding":
                chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
                if not chunked:
                    raise Malformed(f"transfer-encoding {value[:40]!r}")
            elif lowered == b"content-length":
                if not value.isdigit() or (length is not None and int(value) != length):
                    raise Malformed(f"content-length {value[:40]!r}")
                length = int(value)
        self.keep = keep
        if self.method == "HEAD" or status in NO_BODY or status == 101:
            self.state = "done"
        elif chunked:
            self.state = "size"
        elif length is not None:
            self.state, self._left = "length", length
        else:
            self.state, self.keep = "until-end", False

    def response(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            self.status,
            headers=self.headers,
            content=self.body,
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )


def _lost(exc: BaseException, unsent: OSError | None, resendable: bool, request: httpx.Request) -> Exception:
    """What an exchange that got no answer raises: `_Resend` where a reused connection failed
    before any answer and the request may run again; else the write's failure, if it failed
    (and no answer came), or the read's."""
    if resendable and not isinstance(exc, Malformed):
        return _Resend()
    if unsent is not None:
        return httpx.WriteError(str(unsent) or type(unsent).__name__, request=request)
    if isinstance(exc, Incomplete):
        return httpx.RemoteProtocolError(
            "the server closed the connection before its answer ended", request=request
        )
    if isinstance(exc, Malformed):
        return httpx.RemoteProtocolError(f"unreadable answer: {exc}", request=request)
    return httpx.ReadError(str(exc) or type(exc).__name__, request=request)


class _Resend(Exception):
    """A reused connection failed before any answer, and the request may safely run again."""


# --- asyncio ------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Stream:
    origin: tuple[str, int]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    used: bool = False  # answered a request before (a reused connection)

    def usable(self) -> bool:
        """Open, nothing read while idle (the server's end, or bytes no request asked for, such
        as a `408` sent before closing: the stream reads them as they come), and of the running
        event loop (a client used under one `asyncio.run` and then another opens new ones)."""
        return (
            self.loop is asyncio.get_running_loop()
            and not self.reader.at_eof()
            and not getattr(self.reader, "_buffer", b"")  # asyncio's buffer of what was read
            and not self.writer.is_closing()
        )

    def close(self) -> None:
        if not self.loop.is_closed():
            self.writer.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """See the module's docstring."""

    def __init__(self, *, max_connections: int = 100, max_keepalive: int = 20) -> None:
        self._idle: list[_Stream] = []
        self._max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._loop: asyncio.AbstractEventLoop | None = None  # the slots' (a semaphore waits on one loop)
        self._max_keepalive = max_keepalive
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise httpx.ConnectError("the client is closed", request=request)
        timeouts = request.extensions.get("timeout", {})
        message = request_bytes(request, await request.aread())
        origin = (request.url.host, request.url.port or 80)
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a client used under one `asyncio.run`, then under another
            self._loop, self._slots = loop, asyncio.Semaphore(self._max_connections)
        if self._slots.locked():  # every connection busy: wait for one, at most the pool timeout
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await self._slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("no connection came free in time", request=request) from None
        else:
            await self._slots.acquire()
        try:
            for _ in range(3):  # a reused connection found closed is replaced (twice at most)
                stream = self._take(origin) or await self._connect(origin, timeouts.get("connect"), request)
                try:
                    return await self._exchange(stream, request, message, timeouts)
                except _Resend:
                    stream.close()
                except BaseException:  # cancelled in the middle of an exchange: the connection is spent
                    stream.close()
                    raise
            raise httpx.RemoteProtocolError(
                "the server closed each connection before answering", request=request
            )
        finally:
            self._slots.release()

    def _take(self, origin: tuple[str, int]) -> _Stream | None:
        for i in range(len(self._idle) - 1, -1, -1):
            if self._idle[i].origin == origin:
                stream = self._idle.pop(i)
                if stream.usable():
                    return stream
                stream.close()
        return None

    async def _connect(
        self, origin: tuple[str, int], within: float | None, request: httpx.Request
    ) -> _Stream:
        host, port = origin
        try:
            async with asyncio.timeout(within):
                reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None
        return _Stream(origin, reader, writer)

    async def _exchange(
        self, stream: _Stream, request: httpx.Request, message: bytes, timeouts: dict[str, float | None]
    ) -> httpx.Response:
        reused, stream.used = stream.used, True
        resendable = reused and request.method in SAFE_TO_RESEND
        unsent: OSError | None = None
        try:
            stream.writer.write(message)
            async with asyncio.timeout(timeouts.get("write")):
                await stream.writer.drain()
        except TimeoutError:
            stream.close()
            raise httpx.WriteTimeout("sending the request timed out", request=request) from None
        except OSError as exc:  # the server may have answered (a 413) before reading it all
            unsent = exc
        answer = Answer(request.method)
        within = timeouts.get("read")
        try:
            while True:
                async with asyncio.timeout(within):
                    data = await stream.reader.read(READ_SIZE)
                if not data:
                    answer.end()
                    break
                if answer.feed(data):
                    break
        except TimeoutError:
            stream.close()
            raise httpx.ReadTimeout("no answer in time", request=request) from None
        except (OSError, Incomplete, Malformed) as exc:
            stream.close()
            raise _lost(exc, unsent, resendable and not answer.begun, request) from None
        if answer.keep and unsent is None and not self._closed and len(self._idle) < self._max_keepalive:
            self._idle.append(stream)
        else:
            stream.close()
        return answer.response(request)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for stream in idle:
            stream.close()
            with contextlib.suppress(OSError):
                await stream.writer.wait_closed()


# --- blocking -----------------------------------------------------------------------------------


@dataclass(eq=False)
class _Socket:
    origin: tuple[str, int]
    sock: socket.socket
    used: bool = False

    def usable(self) -> bool:
        """Open, and nothing to read while idle (the server's end, or bytes no request asked
        for, such as a `408` sent before closing)."""
        if self.sock.fileno() < 0:
            return False
        self.sock.setblocking(False)  # each exchange sets its own timeouts again
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True  # nothing waiting
        except OSError:
            return False
        return False  # the end, or bytes: either way not an answer to the next request

    def close(self) -> None:
        self.sock.close()


class LeanSyncTransport(httpx.BaseTransport):
    """See the module's docstring. Safe to share between threads (each request holds its
    connection alone)."""

    def __init__(self, *, max_connections: int = 100, max_keepalive: int = 20) -> None:
        self._idle: list[_Socket] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_keepalive = max_keepalive
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise httpx.ConnectError("the client is closed", request=request)
        timeouts = request.extensions.get("timeout", {})
        message = request_bytes(request, request.read())
        origin = (request.url.host, request.url.port or 80)
        pool = timeouts.get("pool")
        if not self._slots.acquire(timeout=pool if pool is not None else -1):
            raise httpx.PoolTimeout("no connection came free in time", request=request)
        try:
            for _ in range(3):  # a reused connection found closed is replaced (twice at most)
                conn = self._take(origin) or self._connect(origin, timeouts.get("connect"), request)
                try:
                    return self._exchange(conn, request, message, timeouts)
                except _Resend:
                    conn.close()
                except BaseException:
                    conn.close()
                    raise
            raise httpx.RemoteProtocolError(
                "the server closed each connection before answering", request=request
            )
        finally:
            self._slots.release()

    def _take(self, origin: tuple[str, int]) -> _Socket | None:
        while True:
            with self._lock:
                found = next(
                    (i for i in range(len(self._idle) - 1, -1, -1) if self._idle[i].origin == origin), None
                )
                if found is None:
                    return None
                conn = self._idle.pop(found)
            if conn.usable():
                return conn
            conn.close()

    @staticmethod
    def _connect(origin: tuple[str, int], within: float | None, request: httpx.Request) -> _Socket:
        try:
            sock = socket.create_connection(origin, timeout=within)
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"connecting to {origin[0]}:{origin[1]} timed out", request=request
            ) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Socket(origin, sock)

    def _exchange(
        self, conn: _Socket, request: httpx.Request, message: bytes, timeouts: dict[str, float | None]
    ) -> httpx.Response:
        reused, conn.used = conn.used, True
        resendable = reused and request.method in SAFE_TO_RESEND
        unsent: OSError | None = None
        try:
            conn.sock.settimeout(timeouts.get("write"))
            conn.sock.sendall(message)
        except TimeoutError:
            conn.close()
            raise httpx.WriteTimeout("sending the request timed out", request=request) from None
        except OSError as exc:  # the server may have answered (a 413) before reading it all
            unsent = exc
        answer = Answer(request.method)
        try:
            conn.sock.settimeout(timeouts.get("read"))
            while True:
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    answer.end()
                    break
                if answer.feed(data):
                    break
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout("no answer in time", request=request) from None
        except (OSError, Incomplete, Malformed) as exc:
            conn.close()
            raise _lost(exc, unsent, resendable and not answer.begun, request) from None
        with self._lock:
            kept = (
                answer.keep and unsent is None and not self._closed and len(self._idle) < self._max_keepalive
            )
            if kept:
                self._idle.append(conn)
        if not kept:
            conn.close()
        return answer.response(request)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
