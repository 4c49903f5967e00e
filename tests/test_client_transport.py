"""The clients' lean HTTP/1.1 transports (`catalog.client._transport`), each scenario for both
`AsyncClient` and `Client`, against a server that answers each request as the test scripts it,
byte for byte: framing, keep-alive, connections the server closes, timeouts, malformed answers;
and when httpx's own transport serves instead."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from catalog.client import AsyncClient, CatalogError, Client
from catalog.client._transport import (
    Answer,
    LeanSyncTransport,
    LeanTransport,
    Malformed,
    lean_sync_transport,
    lean_transport,
)

SUMMARY = b'{"metastore_id": "m-1", "name": "metastore"}'
CLOSE = b"<close>"  # an answer: close the connection without answering
HANG = b"<hang>"  # an answer: never answer
KINDS = ["async", "sync"]

Script = Callable[[int], tuple[bytes, bool]]


def ok(body: bytes = SUMMARY, extra: bytes = b"") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % len(body)
    return head + extra + b"\r\n" + body


@dataclass
class Raw:
    """A server (on an event loop in a thread of its own) that reads each request whole and
    answers `script(n)` for the n-th (from 1): the bytes as they are, then `close` to end the
    connection after them; or CLOSE, or HANG."""

    script: Script
    port: int = 0
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    delay: float = 0.0  # before each answer, so that requests on several connections overlap
    busy: int = 0
    most_busy: int = 0  # requests read and not yet answered at once, at most
    idle: bytes = b""  # sent on a connection the script closes, 50 ms after its answer
    head_only: bool = False  # answer after the request's head, its body unread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length, chunked = 0, b"\r\ntransfer-encoding: chunked\r\n" in head.lower()
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                if self.head_only:
                    body = b""
                else:
                    body = await (reader.readuntil(b"0\r\n\r\n") if chunked else reader.readexactly(length))
                self.requests.append(head + body)
                answer, close = self.script(len(self.requests))
                if answer == CLOSE:
                    break
                if answer == HANG:
                    await asyncio.sleep(30)
                self.busy += 1
                self.most_busy = max(self.most_busy, self.busy)
                await asyncio.sleep(self.delay)
                writer.write(answer)
                self.busy -= 1  # (no await between: a client's next request comes after this)
                await writer.drain()
                if close:
                    if self.idle:
                        await asyncio.sleep(0.05)
                        writer.write(self.idle)
                        await writer.drain()
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@pytest.fixture
def raw() -> Iterator[Callable[[Script], Raw]]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[asyncio.Server] = []

    def start(script: Script) -> Raw:
        server = Raw(script)
        servers.append(
            asyncio.run_coroutine_threadsafe(
                asyncio.start_server(server.handle, "127.0.0.1", 0), loop
            ).result()
        )
        server.port = servers[-1].sockets[0].getsockname()[1]
        return server

    yield start

    async def shut() -> None:
        for server in servers:
            server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(shut(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


class Either:
    """A client of the kind, its calls made blocking (the async one's on a loop of its own)."""

    def __init__(self, kind: str, url: str, token: str = "t", **options: Any) -> None:
        self.loop = asyncio.new_event_loop() if kind == "async" else None
        self.client: Client | AsyncClient = (AsyncClient if self.loop else Client)(url, token, **options)

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, name)(*args, **kwargs)
        return self.loop.run_until_complete(result) if self.loop else result

    @property
    def transport(self) -> Any:
        return self.client.http._transport

    def __enter__(self) -> Either:
        return self

    def __exit__(self, *exc: object) -> None:
        self("close")
        if self.loop:
            self.loop.close()


def pause(client: Either, seconds: float) -> None:
    """Let the client's connections see what the server sent (on its loop, for the async one)."""
    if client.loop:
        client.loop.run_until_complete(asyncio.sleep(seconds))
    else:
        threading.Event().wait(seconds)


@pytest.mark.parametrize("kind", KINDS)
def test_keep_alive_one_connection_for_many_requests(raw, kind) -> None:
    server = raw(lambda n: (ok(), False))
    with Either(kind, server.url, "secret") as client:
        assert isinstance(client.transport, LeanTransport if kind == "async" else LeanSyncTransport)
        for _ in range(5):
            assert client("metastore").metastore_id == "m-1"
    assert server.connections == 1 and len(server.requests) == 5
    first = server.requests[0]
    assert first.startswith(b"GET /api/2.1/unity-catalog/metastore_summary HTTP/1.1\r\n")
    assert b"\r\nauthorization: Bearer secret\r\n" in first
    assert b"\r\nhost: 127.0.0.1:" in first.lower()
    # handed to the transport directly, with the httpx client's own defaults
    assert b"\r\nuser-agent: memory-catalog-client\r\n" in first.lower()
    assert (
        b"\r\naccept-encoding: gzip" in first.lower() and b"\r\nconnection: keep-alive\r\n" in first.lower()
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_and_a_query_are_sent_as_given(raw, kind) -> None:
    server = raw(lambda n: (ok(b'{"a": 1}'), False))
    with Either(kind, server.url) as client:
        assert client("request", "POST", "/x", params={"q": "a b"}, json={"query": "café"}) == {"a": 1}
    request = server.requests[0]
    body = '{"query":"café"}'.encode()
    assert request.startswith(b"POST /x?q=a+b HTTP/1.1\r\n")
    assert request.endswith(b"\r\n\r\n" + body)
    assert b"\r\ncontent-length: %d\r\n" % len(body) in request.lower()


@pytest.mark.parametrize("kind", KINDS)
def test_a_compressed_answer_is_decoded(raw, kind) -> None:
    server = raw(lambda n: (ok(gzip.compress(SUMMARY), b"content-encoding: gzip\r\n"), False))
    with Either(kind, server.url) as client:
        assert client("metastore").metastore_id == "m-1"


@pytest.mark.parametrize("kind", KINDS)
def test_chunked_and_interim_answers(raw, kind) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b'5;ext=1\r\n{"a":\r\n3\r\n 1}\r\n0\r\ntrailer: x\r\n\r\n'
    )
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"b": 2}')
    server = raw(lambda n: ({1: chunked, 2: interim}.get(n, ok(b'{"c": 3}')), False))
    with Either(kind, server.url) as client:
        assert client("request", "GET", "/1") == {"a": 1}
        assert client("request", "GET", "/2") == {"b": 2}
        assert client("request", "GET", "/3") == {"c": 3}
    assert server.connections == 1  # each answer's end was found: the connection carried all three


@pytest.mark.parametrize("kind", KINDS)
def test_an_answer_framed_by_the_end_of_its_connection(raw, kind) -> None:
    until_close = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{"c": 3}'
    server = raw(lambda n: (until_close, True) if n == 1 else (ok(b'{"d": 4}'), False))
    with Either(kind, server.url) as client:
        assert client("request", "GET", "/1") == {"c": 3}
        assert client("request", "GET", "/2") == {"d": 4}
    assert server.connections == 2


@pytest.mark.parametrize("kind", KINDS)
def test_connection_close_is_honoured(raw, kind) -> None:
    server = raw(lambda n: (ok(extra=b"connection: close\r\n"), False))
    with Either(kind, server.url) as client:
        for _ in range(3):
            assert client("metastore").metastore_id == "m-1"
    assert server.connections == 3  # the client did not send on a connection the server ends


@pytest.mark.parametrize("kind", KINDS)
def test_a_kept_connection_the_server_closed_is_replaced(raw, kind) -> None:
    # the server closes after each answer without saying so: the client notices before reusing
    server = raw(lambda n: (ok(), True))
    with Either(kind, server.url) as client:
        for _ in range(3):
            assert client("metastore").metastore_id == "m-1"
            pause(client, 0.2)  # the end reaches the idle connection
        assert client("request", "POST", "/x", json={}) is not None  # not resent: never sent on a dead one
    assert server.connections == 4 and len(server.requests) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_sent_while_idle_are_no_answer(raw, kind) -> None:
    # the server says 408 on an idle connection, then closes it: that is not the next answer
    server = raw(lambda n: (ok(), True) if n == 1 else (ok(b'{"n": 2}'), False))
    server.idle = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    with Either(kind, server.url) as client:
        assert client("metastore").metastore_id == "m-1"
        pause(client, 0.3)
        assert client("request", "GET", "/2") == {"n": 2}
    assert server.connections == 2


def test_an_answer_before_the_request_was_all_sent(raw) -> None:
    # the server refuses a large body after its head and closes without reading the rest (the
    # blocking client reads the answer; asyncio's stream raises the reset before the bytes it
    # read, as it does under httpx's transport too: the async client reports a failed write)
    too_large = b"HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
    body = b'{"error_code": "RESOURCE_EXHAUSTED", "message": "too large"}'
    server = raw(lambda n: (too_large + b"content-length: %d\r\n\r\n" % len(body) + body, True))
    server.head_only = True
    with Either("sync", server.url) as client, pytest.raises(CatalogError) as failure:
        client("request", "POST", "/x", json={"contents": "x" * 8_000_000})
    assert (failure.value.status, failure.value.error_code) == (413, "RESOURCE_EXHAUSTED")


@pytest.mark.parametrize("kind", KINDS)
def test_a_reused_connection_that_ends_unanswered(raw, kind) -> None:
    # the second request reaches a connection the server then closes without answering: a read
    # is sent again on a new connection; a create is not (the server may have made it)
    server = raw(lambda n: (CLOSE, False) if n == 2 else (ok(), False))
    with Either(kind, server.url) as client:
        assert client("metastore").metastore_id == "m-1"
        assert client("metastore").metastore_id == "m-1"
    assert len(server.requests) == 3 and server.connections == 2

    create = raw(lambda n: (CLOSE, False) if n == 2 else (ok(), False))
    with Either(kind, create.url) as client:
        client("request", "POST", "/x", json={})
        with pytest.raises(CatalogError) as failure:
            client("request", "POST", "/x", json={})
    assert failure.value.error_code == "CONNECTION_FAILED"
    assert "closed the connection" in failure.value.message
    assert len(create.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_timeout_and_a_refused_connection(raw, kind) -> None:
    server = raw(lambda n: (HANG, False))
    with Either(kind, server.url, timeout=0.2) as client, pytest.raises(CatalogError) as failure:
        client("metastore")
    assert failure.value.error_code == "TIMEOUT"

    with Either(kind, "http://127.0.0.1:1") as client, pytest.raises(CatalogError) as failure:
        client("metastore")
    assert failure.value.error_code == "CONNECTION_FAILED"


MALFORMED = [
    b"SMTP 220 hello\r\n\r\n",
    b"HTTP/1.1 2x0 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: ten\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 5\r\n\r\nabcd",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabcd",
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",  # ends early
    b"HTTP/1.1 200 OK\r\nx: " + b"y" * 70_000,  # a head that never ends
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("answer", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_answer_is_a_connection_failure(raw, kind, answer) -> None:
    server = raw(lambda n: (answer, True))
    with Either(kind, server.url) as client, pytest.raises(CatalogError) as failure:
        client("metastore")
    assert failure.value.status == 0 and failure.value.error_code == "CONNECTION_FAILED"
    assert len(server.requests) == 1  # not sent again


@pytest.mark.parametrize("kind", KINDS)
def test_a_header_with_a_line_break_is_refused_before_sending(raw, kind) -> None:
    server = raw(lambda n: (ok(), False))
    with Either(kind, server.url, "t\r\nx-injected: 1") as client, pytest.raises(CatalogError) as failure:
        client("metastore")
    assert "header 'authorization' holds a line break" in failure.value.message
    assert server.requests == []


def test_an_answer_read_in_pieces_of_any_size() -> None:
    whole = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n"
    )
    for size in (1, 2, 3, 7, len(whole)):
        answer = Answer("GET")
        pieces = [whole[i : i + size] for i in range(0, len(whole), size)]
        done = [answer.feed(piece) for piece in pieces]
        assert done[-1] and not any(done[:-1])
        assert (answer.status, answer.body, answer.keep) == (200, b"abc0123456789abcdef", True)
    trailing = Answer("GET")
    assert trailing.feed(ok(b"{}") + b"HTTP/1.1 200")  # bytes past the answer
    assert trailing.body == b"{}" and not trailing.keep
    with pytest.raises(Malformed):
        Answer("GET").feed(b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 201 + b"\r\n")


async def test_a_streamed_body_is_sent_as_one_chunk() -> None:
    got: list[bytes] = []

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"\r\ntransfer-encoding: chunked\r\n" in head.lower()
        got.append(await reader.readuntil(b"0\r\n\r\n"))
        writer.write(ok(b"{}", b"connection: close\r\n"))
        await writer.drain()
        writer.close()

    async def parts() -> AsyncIterator[bytes]:
        yield b'{"a": '
        yield b"1}"

    async def nothing() -> AsyncIterator[bytes]:
        for part in ():
            yield part

    server = await asyncio.start_server(chunked, "127.0.0.1", 0)
    async with httpx.AsyncClient(transport=LeanTransport()) as http:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
        assert (await http.post(url, content=parts())).json() == {}
        assert (await http.post(url, content=nothing())).json() == {}  # an empty stream ends too
    assert got == [b'8\r\n{"a": 1}\r\n0\r\n\r\n', b"0\r\n\r\n"]
    server.close()


def test_a_request_cancelled_midway_leaves_no_connection_behind(raw) -> None:
    server = raw(lambda n: (HANG, False) if n == 1 else (ok(), False))

    async def ask() -> str:
        transport = LeanTransport()
        async with (
            httpx.AsyncClient(transport=transport) as http,
            AsyncClient(server.url, "t", http=http) as client,
        ):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await client.metastore()
            assert transport._idle == []  # its answer may still come: the connection is not reused
            return (await client.metastore()).metastore_id

    assert asyncio.run(ask()) == "m-1"
    assert server.connections == 2


def test_requests_at_once_each_get_their_own_answer(raw) -> None:
    def echo(n: int) -> tuple[bytes, bool]:
        return ok(b'{"n": %d}' % n), False

    server = raw(echo)
    server.delay = 0.01

    async def together() -> list[int]:
        transport = LeanTransport(max_connections=4, max_keepalive=2)
        async with (
            httpx.AsyncClient(transport=transport) as http,
            AsyncClient(server.url, "t", http=http) as client,
        ):
            answers = await asyncio.gather(*(client.request("GET", f"/r{i}") for i in range(20)))
            assert len(transport._idle) <= 2
            return [a["n"] for a in answers]

    assert sorted(asyncio.run(together())) == list(range(1, 21))
    assert 2 <= server.most_busy <= 4

    threads = raw(echo)
    threads.delay = 0.01
    transport = LeanSyncTransport(max_connections=4, max_keepalive=2)
    with httpx.Client(transport=transport) as http, Client(threads.url, "t", http=http) as client:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: client.request("GET", f"/r{i}")["n"], range(40)))
        assert len(transport._idle) <= 2
    assert sorted(answers) == list(range(1, 41)) and 2 <= threads.most_busy <= 4


def test_the_async_client_works_under_one_event_loop_then_another(raw) -> None:
    server = raw(lambda n: (ok(), False))
    transport = LeanTransport(max_connections=1)
    client = AsyncClient(server.url, "t", http=httpx.AsyncClient(transport=transport))

    async def ask() -> list[str]:
        # three at once over one connection: two wait for it (on this loop's semaphore)
        return [
            summary.metastore_id for summary in await asyncio.gather(*(client.metastore() for _ in range(3)))
        ]

    assert asyncio.run(ask()) == ["m-1"] * 3
    assert asyncio.run(ask()) == ["m-1"] * 3  # the first loop's idle connection is not reused
    assert server.connections == 2


def test_a_backup_streams_through_httpx_own_transport(raw) -> None:
    chunks = [b'{"kind": "header"}\n', b'{"kind": "manifest"}\n']
    stream = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
        + b"0\r\n\r\n"
    )
    server = raw(lambda n: (stream, False) if n == 1 else (ok(b'{"entries": 0}'), False))
    with Client(server.url, "t") as client:
        assert isinstance(client.http._transport, LeanSyncTransport)
        assert b"".join(client.memory_stores.export("c.s.x")) == b"".join(chunks)
        assert client.memory_stores.import_archive("c.s.y", iter(chunks)) == {"entries": 0}
        assert client._streaming is not None and not isinstance(
            client._streaming._transport, LeanSyncTransport
        )
    assert server.requests[1].endswith(b"0\r\n\r\n")  # the archive went out chunk after chunk


def test_which_urls_the_lean_transports_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(lean_transport("http://127.0.0.1:8080"), LeanTransport)
    assert isinstance(lean_sync_transport("http://127.0.0.1:8080"), LeanSyncTransport)
    assert lean_transport("https://catalog.example.com") is None  # httpx's certificate settings
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example.com:3128")
    assert lean_transport("http://catalog.example.com") is None  # the proxy applies
    assert lean_sync_transport("http://catalog.example.com") is None
    monkeypatch.setenv("NO_PROXY", "catalog.example.com")
    assert isinstance(lean_transport("http://catalog.example.com"), LeanTransport)
    assert not isinstance(AsyncClient("https://catalog.example.com", "t").http._transport, LeanTransport)
    assert not isinstance(Client("https://catalog.example.com", "t").http._transport, LeanSyncTransport)
