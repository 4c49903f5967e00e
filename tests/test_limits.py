"""Limits under load: per-principal rate limits, the request timeout, the caps on connections and
requests in progress, slow-client protection, and JSON errors from the connection layer."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC, bearer

from catalog.app import create_app
from catalog.settings import Settings, SettingsError
from catalog.web.limits import RateLimiter


def test_the_rate_limiter_allows_a_burst_then_the_rate():
    limiter = RateLimiter(rate=2.0, burst=3)
    assert [limiter.take("a", now=10.0) for _ in range(3)] == [None, None, None]
    wait = limiter.take("a", now=10.0)
    assert wait == pytest.approx(0.5)
    assert limiter.take("b", now=10.0) is None  # buckets are per principal
    assert limiter.take("a", now=10.5) is None  # one token back after 1/rate seconds
    assert limiter.take("a", now=10.5) is not None


def test_the_rate_limiter_forgets_the_least_recent_principals():
    limiter = RateLimiter(rate=1.0, burst=1, max_principals=2)
    for name in ("a", "b", "c"):
        assert limiter.take(name, now=0.0) is None
    assert limiter.take("a", now=0.0) is None  # forgotten, so full again
    assert limiter.take("c", now=0.0) is not None


def test_limits_are_validated_and_read_from_the_environment():
    settings = Settings.from_env({"CATALOG_RATE_LIMIT": "5", "CATALOG_REQUEST_TIMEOUT": "2.5"})
    assert (settings.rate_limit, settings.burst, settings.request_timeout) == (5.0, 10, 2.5)
    with pytest.raises(SettingsError, match="CATALOG_RATE_LIMIT must be a number"):
        Settings.from_env({"CATALOG_RATE_LIMIT": "fast"})
    with pytest.raises(SettingsError, match="CATALOG_MAX_CONNECTIONS must not be negative"):
        Settings.from_env({"CATALOG_MAX_CONNECTIONS": "-1"})


@pytest.fixture(scope="module")
def limited(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, Settings]]:
    """An app with a tiny rate limit (a burst of 3, then one request every 1,000 s) and a short
    request timeout."""
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("limited"),
        database_url=database_url,
        rate_limit=0.001,
        rate_burst=3,
        request_timeout=0.5,
    )
    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as client:
        yield client, settings


def test_a_principal_over_its_rate_is_429_with_retry_after_and_audited(limited):
    client, settings = limited
    alice = bearer(settings, "rate-alice")
    answers = [client.get(f"{UC}/catalogs", headers=alice) for _ in range(4)]
    assert [r.status_code for r in answers[:3]] == [200, 200, 200]
    refused = answers[3]
    assert refused.status_code == 429
    assert refused.json()["error_code"] == "REQUEST_LIMIT_EXCEEDED"
    assert int(refused.headers["retry-after"]) >= 1
    # another principal has its own bucket
    assert client.get(f"{UC}/catalogs", headers=bearer(settings, "rate-bob")).status_code == 200
    admin = bearer(settings, "admin")
    events = client.get(
        f"{UC}/system/audit", headers=admin, params={"principal": "rate-alice", "status_code": 429}
    ).json()["events"]
    assert [e["request_id"] for e in events] == [refused.headers["x-request-id"]]


def test_a_request_over_the_timeout_is_504(limited, monkeypatch):
    client, settings = limited
    from catalog.governance.namespace import service

    async def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        await asyncio.sleep(5)

    monkeypatch.setattr(service, "metastore_summary", slow)
    r = client.get(f"{UC}/metastore_summary", headers=bearer(settings, "timeout-carol"))
    assert r.status_code == 504
    assert r.json()["error_code"] == "DEADLINE_EXCEEDED" and "0.5 s" in r.json()["message"]


def test_repeated_single_valued_parameters_are_refused(client, token):
    r = client.get(
        f"{UC}/memory-stores/main.default.x/entries:get",
        headers=token(),
        params=[("scope", "bob"), ("scope", "alice"), ("path", "/a.md")],
    )
    assert r.status_code == 400 and "`scope` may be given only once" in r.json()["message"]
    r = client.get(f"{UC}/catalogs", headers=token(), params=[("max_results", "1"), ("max_results", "2")])
    assert r.status_code == 400


def test_multi_valued_parameters_are_audited_with_every_value(client, token):
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": "multi", "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text
    r = client.get(
        f"{UC}/memory-stores/main.default.multi/entries",
        headers=token(),
        params=[("scopes", "team"), ("scopes", "alice")],
    )
    assert r.status_code == 200
    events = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 20}).json()["events"]
    event = next(e for e in events if e["request_id"] == r.headers["x-request-id"])
    # every value is kept, each as its pseudonym (found again by scope)
    kept = event["request_params"]["scopes"]
    assert len(kept) == 2 and kept[0] != kept[1] and all(v.startswith("ps_") for v in kept)
    for scope in ("team", "alice"):
        found = client.get(f"{UC}/system/audit", headers=token(), params={"scope": scope}).json()["events"]
        assert r.headers["x-request-id"] in [e["request_id"] for e in found]


def test_options_needs_a_token_and_answers_200_json(client, token):
    r = client.options(f"{UC}/catalogs")
    assert r.status_code == 401 and r.json()["error_code"] == "UNAUTHENTICATED"
    r = client.options(f"{UC}/catalogs", headers=token())
    assert (r.status_code, r.json()) == (200, {})  # success is always 200 with a JSON body
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST", "OPTIONS"}


# --- the connection layer, on a real server ---------------------------------------------------


def _exchange(port: int, data: bytes, *, pause: float = 0.0) -> bytes:
    """Send raw bytes, then read until the server closes (or 15 s pass)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data)
        if pause:
            time.sleep(pause)
        sock.settimeout(15)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return out


def _status_and_json(raw: bytes) -> tuple[int, dict]:  # type: ignore[type-arg]
    import json

    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.fixture(scope="module")
def small_server(live_server) -> Iterator:  # type: ignore[no-untyped-def]
    root = Path(tempfile.mkdtemp(prefix="lim"))
    server = live_server(
        root / "d",
        env={
            "CATALOG_HEADER_TIMEOUT": "1",
            "CATALOG_BODY_TIMEOUT": "1",
            "CATALOG_MAX_CONNECTIONS": "4",
            "CATALOG_MAX_CONCURRENT_REQUESTS": "1",
        },
    )
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_malformed_requests_get_json_400(small_server):
    for request in (
        b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n\r\n",  # HTTP/1.1 without its Host header
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
        # a length and a chunked body at once: how requests are smuggled past a proxy
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n",
    ):
        status, body = _status_and_json(_exchange(small_server.port, request))
        assert status == 400 and body["error_code"] == "INVALID_PARAMETER_VALUE"


def _sent_in_pieces(port: int, data: bytes, piece: int) -> bytes:
    """Send the bytes a piece at a time (each its own read on the server), then read the answer."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for start in range(0, len(data), piece):
                sock.sendall(data[start : start + piece])
                time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the last piece: the answer is waiting
        sock.settimeout(15)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return out


def test_a_request_head_over_16_kib_is_431_however_it_arrives(small_server):
    """The documented limit holds for a head that arrives in one read too (h11's own limit only
    counts what is still incomplete after a read), and for a long request line."""
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    long_line = b"GET /" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    for raw in (
        _exchange(small_server.port, big),
        _sent_in_pieces(small_server.port, big, 4096),
        _exchange(small_server.port, long_line),
    ):
        status, body = _status_and_json(raw)
        assert status == 431 and body["error_code"] == "REQUEST_HEADER_FIELDS_TOO_LARGE", raw[:300]
        assert "16 KiB" in body["message"]
    # just under the limit is served
    fits = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * 16_000 + b"\r\n\r\n"
    for raw in (_exchange(small_server.port, fits), _sent_in_pieces(small_server.port, fits, 4096)):
        status, body = _status_and_json(raw)
        assert status == 200 and body == {"status": "ok"}


def _answers(raw: bytes) -> list[tuple[int, dict]]:  # type: ignore[type-arg]
    """The (status, JSON body) of each answer on a connection, in order."""
    import json

    answers = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answers.append((int(head.split()[1]), json.loads(rest[:length])))
        raw = rest[length:]
    return answers


def test_pipelined_requests_are_answered_in_order_and_each_head_is_held_to_the_limit(small_server):
    """Requests sent together on one connection are each answered; a head that follows a request
    and its body in one read, and ends in a later read, is measured from its own first byte:
    just under the limit it is served, over it 431."""
    healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    closing = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    raw = _exchange(small_server.port, healthz + healthz + closing)
    assert _answers(raw) == [(200, {"status": "ok"})] * 3

    with_body = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789"
    for size, expected in ((15_900, 200), (20_000, 431)):
        second = (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
        )
        # the first request and the start of the second's head in one read, the rest in more
        out = _sent_in_pieces(small_server.port, with_body + second, 8000)
        answers = _answers(out)
        assert [status for status, _ in answers] == [200, expected], out[:500]
        if expected == 431:
            assert answers[1][1]["error_code"] == "REQUEST_HEADER_FIELDS_TOO_LARGE"


def test_a_page_token_at_its_documented_maximum_is_431_as_the_document_says(small_server):
    """A page token may be as long as the request head the server takes: a schema-valid token
    that long is answered 431, and every route taking one says so in /openapi.json."""
    import re

    document = httpx.get(f"{small_server.url}/openapi.json").json()
    checked = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            token = next((p for p in operation.get("parameters", []) if p["name"] == "page_token"), None)
            if token is None:
                continue
            longest = token["schema"]["maxLength"]
            value = "a" * (longest - 44) + "." + "b" * 43  # a payload and a MAC, as the server issues
            assert re.fullmatch(token["schema"]["pattern"], value) and len(value) == longest
            url = small_server.url + re.sub(r"\{\w+\}", "x", path)
            r = httpx.request(method.upper(), url, params={"page_token": value}, timeout=15)
            assert r.status_code == 431, (method, path, r.status_code, r.text[:200])
            assert r.json()["error_code"] == "REQUEST_HEADER_FIELDS_TOO_LARGE"
            assert "431" in operation["responses"], (method, path)
            checked.append(operation["operationId"])
    assert {"listCatalogs", "listEntries", "agentsListSessionItems", "listAuditEvents"} <= set(checked)


def test_a_client_too_slow_with_its_headers_is_cut_off_with_408(small_server):
    raw = _exchange(small_server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    status, body = _status_and_json(raw)
    assert status == 408 and body["error_code"] == "REQUEST_TIMEOUT"


def test_a_client_too_slow_with_its_body_gets_408_and_the_connection_closes(small_server):
    token = small_server.cli("token", "--sub", "admin").stdout.strip()
    request = (
        f"POST {UC}/catalogs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":'
    ).encode()
    raw = _exchange(small_server.port, request)
    status, body = _status_and_json(raw)
    assert status == 408 and body["error_code"] == "REQUEST_TIMEOUT"
    assert b"connection: close" in raw.split(b"\r\n\r\n")[0].lower()


def test_connections_over_the_cap_get_503_and_are_closed(small_server):
    idle = [socket.create_connection(("127.0.0.1", small_server.port)) for _ in range(4)]
    try:
        raw = _exchange(small_server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, body = _status_and_json(raw)
        assert status == 503 and body["error_code"] == "TEMPORARILY_UNAVAILABLE"
        assert b"retry-after: 1" in raw.lower()
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 10
    while True:  # the server notices the closed sockets: room again
        r = httpx.get(f"{small_server.url}/healthz", timeout=10)
        if r.status_code == 200:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_requests_over_the_concurrency_cap_get_503(small_server):
    token = small_server.cli("token", "--sub", "admin").stdout.strip()
    headers = {"Authorization": f"Bearer {token}"}
    answers = []
    for _ in range(5):  # the slow request holds its slot for the 1 s body timeout; try again if missed
        with socket.create_connection(("127.0.0.1", small_server.port)) as slow:
            slow.sendall(
                (
                    f"POST {UC}/catalogs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    "Content-Length: 50\r\n\r\n{"
                ).encode()
            )
            time.sleep(0.1)
            answers.append(httpx.get(f"{small_server.url}{UC}/catalogs", headers=headers))
        if answers[-1].status_code == 503:
            break
    r = answers[-1]
    assert r.status_code == 503, [a.status_code for a in answers]
    assert r.json()["error_code"] == "TEMPORARILY_UNAVAILABLE" and "busy" in r.json()["message"]
    assert int(r.headers["retry-after"]) >= 1


@pytest.fixture(scope="module")
def per_client_server(live_server) -> Iterator:  # type: ignore[no-untyped-def]
    root = Path(tempfile.mkdtemp(prefix="lim"))
    server = live_server(
        root / "d",
        env={
            "CATALOG_MAX_CONNECTIONS": "10",
            "CATALOG_MAX_CONNECTIONS_PER_CLIENT": "3",
            "CATALOG_FIRST_BYTE_TIMEOUT": "1",
            "CATALOG_HEADER_TIMEOUT": "8",
        },
    )
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _connect_from(source: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _healthz_from(source: str, port: int) -> tuple[int, dict]:  # type: ignore[type-arg]
    with _connect_from(source, port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        sock.settimeout(15)
        out = b""
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := sock.recv(65536):
                out += chunk
    return _status_and_json(out)


def test_one_client_cannot_take_the_connection_budget(per_client_server):
    """A client (one address) holding its share of idle connections is refused more (503, JSON,
    Retry-After); another address is still served."""
    port = per_client_server.port
    hog = [_connect_from("127.0.0.2", port) for _ in range(3)]
    try:
        status, body = _healthz_from("127.0.0.2", port)
        assert status == 503 and body["error_code"] == "TEMPORARILY_UNAVAILABLE", body
        assert "this client" in body["message"]
        assert _healthz_from("127.0.0.3", port) == (200, {"status": "ok"})
        assert httpx.get(f"{per_client_server.url}/healthz", timeout=10).status_code == 200
    finally:
        for sock in hog:
            sock.close()


def test_a_connection_that_sends_nothing_is_closed_before_a_slow_header_is(per_client_server):
    """A silent connection goes after CATALOG_FIRST_BYTE_TIMEOUT, quietly; one that has begun its
    headers keeps the longer CATALOG_HEADER_TIMEOUT (then 408)."""
    port = per_client_server.port
    with _connect_from("127.0.0.4", port) as silent, _connect_from("127.0.0.4", port) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        silent.settimeout(30)
        assert silent.recv(1024) == b""  # closed, with no answer
        slow.setblocking(False)
        with pytest.raises(BlockingIOError):  # still open, nothing answered yet
            slow.recv(1024)
        slow.setblocking(True)
        slow.settimeout(30)
        raw = b""
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := slow.recv(65536):
                raw += chunk
    status, body = _status_and_json(raw)
    assert status == 408 and body["error_code"] == "REQUEST_TIMEOUT"
