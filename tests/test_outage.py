"""While the database is away: 503 JSON with Retry-After, /healthz says why, the refused requests'
audit events are kept and appended when it is back; logs stay one line per event. A slow health
probe is no outage: requests that can get a connection are served."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from pg_gate import PgGate
from rest import UC

from catalog import errors
from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.errors import TemporarilyUnavailable, is_unavailable
from catalog.settings import Settings
from catalog.web.errors import to_catalog_error
from catalog.web.middleware import JsonFormatter, PlainFormatter, configure_logging


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connection refused"),
        FileNotFoundError(2, "No such file or directory"),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.InterfaceError(
            "cannot call Connection.execute(): connection has been released back to the pool"
        ),
        TimeoutError(),
        asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
        # a SQLSTATE of those classes that asyncpg has no class for is told by its code
        asyncpg.PostgresError.new({"C": "08P99", "M": "a later server's connection failure"}),
        asyncpg.PostgresError.new({"C": "57P99", "M": "a later server's shutdown"}),
    ],
)
def test_an_unreachable_database_is_503_temporarily_unavailable(exc):
    assert is_unavailable(exc)
    err = to_catalog_error(exc)
    assert isinstance(err, TemporarilyUnavailable) and (err.status_code, err.retry_after) == (503, 2.0)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
        asyncpg.OperatorInterventionError("an operator's intervention that ends no session"),
        asyncpg.UniqueViolationError("duplicate key"),
        RuntimeError("a bug"),
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        # an InterfaceError's subclass says what went wrong, whatever its message holds
        asyncpg.ClientConfigurationError("invalid sslmode 'closed'"),
    ],
)
def test_other_errors_are_not_outages(exc):
    assert not is_unavailable(exc)


def appended_event(client, token, request_id: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """The audit event of `request_id`, once the writer has appended it. (An empty backlog is not
    enough: the writer takes deferred events out of it before their append commits.)"""
    deadline = time.monotonic() + 30
    while True:
        r = client.get(f"{UC}/system/audit", headers=token(), params={"status_code": 503, "page_size": 100})
        assert r.status_code == 200, r.text
        found = [e for e in r.json()["events"] if e["request_id"] == request_id]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"the event of request {request_id} was never appended"
        time.sleep(0.05)


@contextmanager
def _gated_app(database_url: str, data_dir: Path) -> Iterator[tuple[TestClient, Callable[..., dict], PgGate]]:
    """An app of its own whose every connection to PostgreSQL goes through a gate: (client, token
    maker, gate)."""
    with PgGate(database_url) as gate:
        settings = Settings(data_dir=data_dir, database_url=gate.url, admin="admin")
        with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as app:

            def token(sub: str = "admin") -> dict[str, str]:
                return {"Authorization": f"Bearer {mint_dev_token(settings, sub)}"}

            yield app, token, gate


def _until(condition: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds  # a bound for the test, not a speed claim
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_while_the_database_is_down_requests_are_503_and_their_events_kept(fresh_database_url, tmp_path):
    """PostgreSQL stops answering this server (connections refused, the open ones closed): its
    requests are 503 JSON with Retry-After and /healthz says why; their audit events are kept
    and appended once it answers again, and the server serves again by itself."""
    with _gated_app(fresh_database_url, tmp_path / "data") as (client, token, gate):
        runtime = client.app.state.runtime
        assert client.get(f"{UC}/catalogs/main", headers=token()).status_code == 200
        gate.refuse()
        runtime.db.suspect()
        _until(lambda: not runtime.db.up, "a refused database was not taken for down")
        r = client.get(f"{UC}/catalogs/main", headers=token())
        assert r.status_code == 503
        assert r.json() == {
            "error_code": "TEMPORARILY_UNAVAILABLE",
            "message": "the database is unavailable; retry shortly",
            "details": [],
        }
        assert r.headers["retry-after"] == "2" and len(r.headers["x-request-id"]) == 32
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json()["status"] == "unavailable" and health.json()["database"] == "unavailable"
        assert "Refused" in health.json()["reason"], health.json()
        # the writer keeps retrying it: it is out of the backlog only briefly
        _until(lambda: runtime.audit.backlog >= 1, "the refused request's event was not kept", 10)
        gate.open()  # the database answers again: the monitor sees it and the backlog drains
        _until(lambda: runtime.db.up and not runtime.audit.backlog, "the server did not recover")
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get(f"{UC}/catalogs/main", headers=token()).status_code == 200
        event = appended_event(client, token, r.headers["x-request-id"])
        assert event["error_code"] == "TEMPORARILY_UNAVAILABLE" and event["principal"] is None
        assert client.get(f"{UC}/system/audit:verify", headers=token()).json()["ok"] is True


def test_a_slow_health_probe_does_not_refuse_requests(client, token, database_url, monkeypatch):
    """The monitor's probes get no answer (their connections are accepted and held, as on a
    starved machine) while the requests' own connections work: no request is refused, /healthz
    says the database is slow, not away. Even once silence is taken for an outage, a request whose
    own attempt finds a healthy connection is served (and the verdict is up again)."""
    runtime = client.app.state.runtime
    with PgGate(database_url) as gate:
        gate.hold()
        monkeypatch.setattr(runtime.db, "url", gate.url)  # where the probes connect; the pool is as it was
        for probes in (1, 2):
            runtime.db.suspect()
            # the probe gave up waiting for an answer
            _until(lambda n=probes: gate.abandoned() >= n, f"probe {probes} did not time out")
            r = client.get(f"{UC}/catalogs/main", headers=token())
            assert r.status_code == 200, r.text
            assert runtime.db.up, runtime.db.status()
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "degraded", health.text
        assert any("unanswered" in reason for reason in health.json()["reasons"]), health.text

        # silence long enough to be taken for an outage: the verdict is down ...
        monkeypatch.setattr(runtime.db, "silent_probes_needed", 1)
        monkeypatch.setattr(runtime.db, "silence_seconds", 0.0)
        runtime.db.suspect()
        _until(lambda: not runtime.db.up, "lasting silence was not taken for an outage")
        # ... and a request that can get a connection is served all the same
        r = client.get(f"{UC}/catalogs/main", headers=token())
        assert r.status_code == 200, r.text
        assert runtime.db.outages >= 1
        monkeypatch.undo()  # probes go to the database again; one still held is answered late
        gate.open()
        _until(gate.idle, "a probe still uses the gate")
    runtime.db.suspect()
    _until(lambda: runtime.db.up, "the monitor did not settle")


def test_a_response_whose_event_cannot_be_written_is_replaced_by_503(client, token, monkeypatch):
    runtime = client.app.state.runtime

    async def unreachable(**event):  # type: ignore[no-untyped-def]
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(runtime.audit, "record", unreachable)
    r = client.get(f"{UC}/catalogs/main", headers=token())
    assert r.status_code == 503 and r.json()["error_code"] == "TEMPORARILY_UNAVAILABLE"
    assert "catalog_id" not in r.text  # nothing of the answer that lacked its event
    monkeypatch.undo()
    deadline = time.monotonic() + 30
    while runtime.audit.backlog:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    event = appended_event(client, token, r.headers["x-request-id"])
    assert (event["status_code"], event["error_code"]) == (503, "TEMPORARILY_UNAVAILABLE")


def test_a_query_that_meets_a_dead_connection_is_503_and_probes_at_once(client, token, monkeypatch):
    runtime = client.app.state.runtime
    probed = []
    monkeypatch.setattr(runtime.db, "suspect", lambda: probed.append(True))
    from catalog.governance.namespace import service

    async def dead(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")

    monkeypatch.setattr(service, "get_catalog", dead)
    r = client.get(f"{UC}/catalogs/main", headers=token())
    assert r.status_code == 503 and r.json()["error_code"] == "TEMPORARILY_UNAVAILABLE"
    assert probed == [True]


def test_unexpected_errors_log_their_trace_once_a_minute(caplog, monkeypatch):
    monkeypatch.setattr(errors, "_TRACED", {})
    caplog.set_level(logging.ERROR, logger="catalog.errors")
    for _ in range(3):
        try:
            raise RuntimeError("boom")
        except RuntimeError as exc:
            errors.log_unexpected(exc, request_id="r", route="/x")
    assert [bool(r.exc_info) for r in caplog.records] == [True, False, False]
    monkeypatch.setattr(errors, "TRACE_EVERY", 0.0)
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        errors.log_unexpected(exc, request_id="r", route="/x")
    assert caplog.records[-1].exc_info


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_logs_are_plain_on_a_terminal_and_json_otherwise(monkeypatch):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    # what configure_logging turns off for every logger of the process, put back afterwards
    for flag in ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, flag, getattr(logging, flag))
    try:
        monkeypatch.setattr("sys.stderr", _Terminal())
        configure_logging()
        assert isinstance(root.handlers[0].formatter, PlainFormatter)
        monkeypatch.setattr("sys.stderr", io.StringIO())
        configure_logging()
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        configure_logging(log_format="plain")
        assert isinstance(root.handlers[0].formatter, PlainFormatter)
        assert logging.getLogger("casbin.policy").getEffectiveLevel() >= logging.WARNING
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_the_plain_format_is_one_readable_line():
    record = logging.LogRecord("catalog.db", logging.ERROR, __file__, 1, "database unreachable", (), None)
    record.reason = "ConnectionRefusedError: refused"
    line = PlainFormatter().format(record)
    assert "\n" not in line and line.endswith("reason=ConnectionRefusedError: refused")
    assert " error   catalog.db: database unreachable" in line
    assert json.loads(JsonFormatter().format(record))["reason"] == "ConnectionRefusedError: refused"


def test_a_deferred_event_whose_append_committed_unseen_is_not_appended_twice(client, token, monkeypatch):
    import catalog.recorder.writer as writer

    runtime = client.app.state.runtime
    original = writer.append_on
    lost: list[int] = []

    async def commit_then_lose_the_answer(conn, events, **kwargs):  # type: ignore[no-untyped-def]
        await original(conn, events, **kwargs)
        if not lost:
            lost.append(len(events))
            raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(writer, "append_on", commit_then_lose_the_answer)
    runtime.audit.defer(request_id="lost-answer", action_name="test.lost_answer", decision="allow")
    deadline = time.monotonic() + 30
    while not lost or runtime.audit.backlog or runtime.audit._uncertain:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    events = client.get(
        f"{UC}/system/audit", headers=token(), params={"action_name": "test.lost_answer"}
    ).json()["events"]
    assert [e["request_id"] for e in events] == ["lost-answer"]
    assert client.get(f"{UC}/system/audit:verify", headers=token()).json()["ok"] is True
