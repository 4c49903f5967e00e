"""SQL for reading the audit log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg

from catalog.event_params import Kept, keys_of
from catalog.recorder.writer import COLUMNS

# an event names a scope where a parameter holding one (catalog.event_params) is it or lists it
_NAMING_SCOPE = " OR ".join(
    [f"request_params ->> '{key}' = $10" for key in keys_of(Kept.SCOPE)]
    + [f"request_params -> '{key}' ? $10" for key in keys_of(Kept.SCOPES)]
)


async def rows_in_order(conn: asyncpg.Connection, batch: int = 5000) -> AsyncIterator[asyncpg.Record]:
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        async for row in conn.cursor(
            f"SELECT {', '.join(COLUMNS)} FROM audit_events ORDER BY seq", prefetch=batch
        ):
            yield row


async def list_events(
    pool: asyncpg.Pool,
    *,
    start: datetime | None,
    end: datetime | None,
    principal: str | None,
    action_name: str | None,
    securable_full_name: str | None,
    decision: str | None,
    status_code: int | None,
    after_seq: int | None,
    ascending: bool,
    limit: int,
    scope_pseudonym: str | None = None,
) -> list[asyncpg.Record]:
    """A page of events; `scope_pseudonym`: only events naming that scope (as a parameter, in a
    list of scopes, or as the end user)."""
    order, compare = ("ASC", ">") if ascending else ("DESC", "<")
    return await pool.fetch(
        f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE "
        "($1::timestamptz IS NULL OR event_time >= $1) AND ($2::timestamptz IS NULL OR event_time < $2) "
        "AND ($3::text IS NULL OR principal = $3) AND ($4::text IS NULL OR action_name = $4) "
        "AND ($5::text IS NULL OR securable_full_name = $5) AND ($6::text IS NULL OR decision = $6) "
        "AND ($7::int IS NULL OR status_code = $7) "
        f"AND ($8::bigint IS NULL OR seq {compare} $8) "
        f"AND ($10::text IS NULL OR {_NAMING_SCOPE} OR on_behalf_of = $10) "
        f"ORDER BY seq {order} LIMIT $9",
        start,
        end,
        principal,
        action_name,
        securable_full_name,
        decision,
        status_code,
        after_seq,
        limit,
        scope_pseudonym,
    )


_FILTERS = (
    "($1::text IS NULL OR principal = $1) AND ($2::text IS NULL OR action_name = $2) "
    "AND ($3::text IS NULL OR securable_full_name = $3) AND ($4::text IS NULL OR decision = $4)"
)


async def time_bounds(
    pool: asyncpg.Pool,
    *,
    principal: str | None,
    action_name: str | None,
    securable_full_name: str | None,
    decision: str | None,
    start: datetime | None,
    end: datetime | None,
) -> tuple[datetime | None, datetime | None]:
    """The first and last event time among the matching events within [start, end)."""
    row = await pool.fetchrow(
        f"SELECT min(event_time), max(event_time) FROM audit_events WHERE {_FILTERS} "
        "AND ($5::timestamptz IS NULL OR event_time >= $5) AND ($6::timestamptz IS NULL OR event_time < $6)",
        principal,
        action_name,
        securable_full_name,
        decision,
        start,
        end,
    )
    assert row is not None
    return row[0], row[1]


async def timeline(
    pool: asyncpg.Pool,
    *,
    principal: str | None,
    action_name: str | None,
    securable_full_name: str | None,
    decision: str | None,
    start: datetime,
    end: datetime,
    buckets: int,
) -> list[asyncpg.Record]:
    """How many matching events of each decision fell into each of `buckets` equal parts of
    [start, end): rows (bucket, decision, events), empty buckets left out."""
    return await pool.fetch(
        "SELECT least(floor(extract(epoch FROM event_time - $5) * $7 "
        "                   / extract(epoch FROM $6::timestamptz - $5))::int, $7 - 1) AS bucket, "
        "       decision, count(*) AS events "
        f"FROM audit_events WHERE {_FILTERS} AND event_time >= $5 AND event_time < $6 "
        "GROUP BY 1, 2",
        principal,
        action_name,
        securable_full_name,
        decision,
        start,
        end,
        buckets,
    )


async def provenance(
    pool: asyncpg.Pool,
    store_id: str,
    *,
    scope: str | None,
    session_id: str | None,
    path: str | None,
    via: str | None,
    source_class: str | None,
    principal: str | None,
    state: str | None,
    after_seq: int | None,
    limit: int,
) -> list[asyncpg.Record]:
    """A page of the store's kept versions' provenance (no text), newest first; each filter None
    matches every version (a version written before provenance was kept has class `unknown`, and
    its author as its principal)."""
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT seq, entry_id::text AS entry_id, scope, session_id, path, version, operation, "
        "(extract(epoch FROM changed_at) * 1000)::bigint AS changed_at, changed_by, state, provenance "
        "FROM entry_versions WHERE store_id = $1 "
        "AND ($2::text IS NULL OR scope = $2) AND ($3::text IS NULL OR session_id = $3) "
        "AND ($4::text IS NULL OR path = $4) AND ($5::text IS NULL OR provenance ->> 'via' = $5) "
        "AND ($6::text IS NULL OR coalesce(provenance ->> 'class', 'unknown') = $6) "
        "AND ($7::text IS NULL OR coalesce(provenance ->> 'principal', changed_by) = $7) "
        "AND ($8::text IS NULL OR state = $8) AND ($9::bigint IS NULL OR seq < $9) "
        "ORDER BY seq DESC LIMIT $10",
        store_id,
        scope,
        session_id,
        path,
        via,
        source_class,
        principal,
        state,
        after_seq,
        limit,
    )
    return rows
