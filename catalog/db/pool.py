"""The asyncpg pool: JSON codecs for json/jsonb and pgvector's codec on every connection.

`register_vector` needs the `vector` type to exist, so migrations (which create the extension
first of all) must have run before the pool opens.

Every statement a request sends through the pool (`pool.fetchrow(...)`) acquires a connection
and gives it back. asyncpg's own acquire awaits two coroutines and a queue, and its release runs
the connection's reset in a task of its own (`asyncio.shield`) on every statement: about three
quarters of the event loop's time that the statement's own round trip takes. `LeanPool` does the
common case of each at once (a connection is free and healthy; one given back is idle, outside
any transaction, and its reset is the no-op `_keep_session`), exactly as asyncpg would, and
leaves every other case (waiting for a connection, a new or expired one, a transaction left
open, a cancelled query, a connection closed) to asyncpg. It reads asyncpg's pool internals, so
it is used only with the asyncpg releases it was checked against (`LEAN_RELEASES`); any other
runs the stock pool.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg
import asyncpg.pool
import msgspec
from pgvector.asyncpg import register_vector

from catalog import telemetry


def _json_value(text: str) -> Any:
    """A json/jsonb value: msgspec reads it (several times faster); what it cannot read (a number
    beyond a double's range, which PostgreSQL's numeric can hold) the standard library does."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return json.loads(text)


async def _init_connection(conn: asyncpg.Connection) -> None:
    # set on the session, not as a startup parameter, which poolers refuse (pgbouncer answers
    # "unsupported startup parameter") or drop (`ignore_startup_parameters`)
    await conn.execute(f"SET synchronous_commit = {SESSION_SETTINGS['synchronous_commit']}")
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(typename, encoder=json.dumps, decoder=_json_value, schema="pg_catalog")
    await register_vector(conn)
    telemetry.watch_queries(conn)  # a client span per statement, when tracing is on


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Released connections keep their session: the application sets only transaction-local
    state (SET LOCAL, transaction advisory locks, cursors in transactions) and never LISTENs, so
    the default reset's extra round trip per release buys nothing. (asyncpg still rolls back a
    transaction left open.)"""


# Every answer waits for its commit to be flushed, whatever the database's own default says
# (a change may turn this off for its own commit only: see catalog.recorder.repo.FLUSH_TAIL).
SESSION_SETTINGS = {"synchronous_commit": "on"}
CONNECT_TIMEOUT = 5.0  # an unreachable database fails a request quickly (503) rather than hang it


# the asyncpg releases whose pool internals `LeanPool` was read against (0.30.0-0.32.0: the same
# holder fields, acquire and release steps)
LEAN_RELEASES = ("0.30.", "0.31.", "0.32.")


class LeanPool(asyncpg.Pool):
    """asyncpg's pool with the common acquire and release done without awaiting (see the module's
    docstring); every other case is asyncpg's own."""

    __slots__ = ()

    def _usable(self) -> bool:
        return bool(self._initialized and not self._closing and not self._closed)  # type: ignore[attr-defined]

    async def _acquire(self, timeout: float | None) -> Any:  # noqa: ASYNC109 (asyncpg's signature)
        queue = self._queue  # type: ignore[attr-defined]
        if self._usable() and not queue.empty():
            holder = queue.get_nowait()  # the one asyncpg's acquire would take (its queue's order)
            con = holder._con
            if (
                con is not None
                and not con.is_closed()
                and holder._generation == self._generation  # type: ignore[attr-defined]
                and holder._setup is None
            ):
                # asyncpg's PoolConnectionHolder.acquire, for a connection that needs nothing done
                holder._maybe_cancel_inactive_callback()
                holder._proxy = proxy = asyncpg.pool.PoolConnectionProxy(holder, con)
                holder._in_use = self._loop.create_future()  # type: ignore[attr-defined]
                holder._timeout = timeout
                return proxy
            # back on top, and asyncpg's acquire (which takes it without waiting) connects it
            queue.put_nowait(holder)
        return await super()._acquire(timeout)  # type: ignore[misc]

    async def release(self, connection: Any, *, timeout: float | None = None) -> None:  # noqa: ASYNC109 (asyncpg's)
        holder = getattr(connection, "_holder", None)
        con = getattr(connection, "_con", None)
        if (
            type(connection) is asyncpg.pool.PoolConnectionProxy
            and holder is not None
            and holder._pool is self
            and con is not None
            and holder._in_use is not None
            and self._usable()
            and not con.is_closed()
            and holder._generation == self._generation  # type: ignore[attr-defined]
            and con._protocol.queries_count < holder._max_queries
            and not con._protocol._is_cancelling()
            and not con.is_in_transaction()
            and con._top_xact is None
            and not con._listeners
            and not con._log_listeners
        ):
            # asyncpg's Pool.release and PoolConnectionHolder.release for an idle connection:
            # its reset would clear no listener and roll back nothing, and `_keep_session` is a no-op
            con._on_release()
            holder._timeout = None
            holder._release()
            holder._setup_inactive_callback()
            return
        await super().release(connection, timeout=timeout)


async def create_pool(url: str, *, min_size: int = 2, max_size: int = 10, lean: bool = True) -> asyncpg.Pool:
    """The pool (`lean=False`: asyncpg's own pool class, as bench/round_trips.py compares them)."""
    options: dict[str, Any] = {
        "min_size": min_size,
        "max_size": max_size,
        "init": _init_connection,
        "reset": _keep_session,
        "timeout": CONNECT_TIMEOUT,
    }
    if not lean or not asyncpg.__version__.startswith(LEAN_RELEASES):
        pool = await asyncpg.create_pool(url, **options)
        assert pool is not None
        return pool
    # what asyncpg.create_pool does, with this class (its defaults for the rest)
    pool = LeanPool(
        url,
        max_queries=50_000,
        max_inactive_connection_lifetime=300.0,
        loop=None,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
        **options,
    )
    return await pool


# Ids as one parameter: asyncpg checks each element of a list parameter against two abstract base
# classes (whether it is an array itself), about 0.4 µs an id; the same ids joined by commas are one
# string. A statement reads them as `string_to_array($n, ',')::uuid[]` (no id holds a comma).
IDS = "string_to_array({}, ',')::uuid[]"


def joined_ids(ids: Iterable[str]) -> str:
    return ",".join(ids)


def atomic(conn: asyncpg.Connection) -> AbstractAsyncContextManager[Any]:
    """A transaction, unless the connection is already in one (e.g. an audited change), whose
    all-or-nothing then covers the block."""
    if conn.is_in_transaction():
        return contextlib.nullcontext()
    return conn.transaction()
