"""The asyncpg pool: JSON codecs for json/jsonb and pgvector's codec on every connection.

`register_vector` needs the `vector` type to exist, so migrations (which create the extension
first of all) must have run before the pool opens.
"""

from __future__ import annotations

import contextlib
import json
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg
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


async def create_pool(url: str, *, min_size: int = 2, max_size: int = 10) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        reset=_keep_session,
        timeout=CONNECT_TIMEOUT,
    )
    assert pool is not None
    return pool


def atomic(conn: asyncpg.Connection) -> AbstractAsyncContextManager[Any]:
    """A transaction, unless the connection is already in one (e.g. an audited change), whose
    all-or-nothing then covers the block."""
    if conn.is_in_transaction():
        return contextlib.nullcontext()
    return conn.transaction()
