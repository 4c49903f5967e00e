"""SQL of the audit log's recorder: appending events through `audit_append()` (migrations 0009, 0042),
the transaction of an audited change, and the subjects' pseudonym keys (`subject_keys`). The only
module of `catalog.recorder` that talks to PostgreSQL.

Values are bound, except in the statement that appends a change's event and commits it in one
message (`append(commit=True)`): a message of several statements takes no parameters, so the
events are spliced in as hex digits (`decode('<hex>', 'hex')`) and nothing else is."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

# After a change committed with `synchronous_commit = off`: a transaction that writes a WAL record
# and commits synchronously, so that its flush (which covers every earlier record) completes
# before the server answers.
FLUSH_TAIL = (
    "BEGIN; SET LOCAL synchronous_commit = on; "
    "SELECT pg_logical_emit_message(true, 'memory-catalog', 'flush'); COMMIT"
)

# the subject's keyed hash, in SQL: `{subject}` is the SQL text of the subject (a column or a
# parameter of the statements below, never input)
_SUBJECT_ID = "sha256((SELECT pepper FROM audit_pepper) || convert_to({subject}, 'UTF8'))"


class _Probed(Exception):
    """Rolls the probe's transaction back."""


# --- appending -------------------------------------------------------------------------------------


async def probe_flush_marker(conn: asyncpg.Connection) -> None:
    """Write the flush marker of FLUSH_TAIL in a transaction rolled back at once; raises the
    database's error when it refuses it (managed services may)."""
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_logical_emit_message(true, 'memory-catalog', 'probe')")
            raise _Probed
    except _Probed:
        pass


async def appended_ids(conn: asyncpg.Connection, event_ids: Sequence[str]) -> set[str]:
    """Which of these events the chain holds."""
    rows = await conn.fetch("SELECT event_id FROM audit_events WHERE event_id = ANY($1::uuid[])", event_ids)
    return {str(row[0]) for row in rows}


def _hex(data: bytes) -> str:
    return f"decode('{data.hex()}', 'hex')"


def append_statement(
    rows: list[dict[str, Any]], heads: list[bytes], tails: list[bytes], *, key_epoch: int | None = None
) -> str:
    """`SELECT audit_append(...)` with the events spliced in as hex digits (and nothing else but
    `key_epoch`, an int), for a message of several statements, which takes no parameters."""
    epoch = "" if key_epoch is None else f", key_epoch => {int(key_epoch)}"
    return (
        f"SELECT audit_append(convert_from({_hex(json.dumps(rows).encode())}, 'UTF8')::jsonb, "
        f"ARRAY[{', '.join(map(_hex, heads))}], ARRAY[{', '.join(map(_hex, tails))}]{epoch}); "
    )


# the epoch of the subjects' keys (migration 0040): one row, a missing one read as 0
_KEY_EPOCH = "coalesce((SELECT epoch FROM audit_key_epoch), 0)"


async def append(
    conn: asyncpg.Connection,
    rows: list[dict[str, Any]],
    heads: list[bytes],
    tails: list[bytes],
    *,
    commit: bool = False,
    early_unlock: bool = True,
) -> None:
    """`audit_append(rows, heads, tails)` in the connection's transaction (or as its own when there
    is none): PostgreSQL numbers and hashes the events under the chain's lock, held until the
    transaction ends. `commit=True` ends the caller's transaction in the same message, so that no
    other work of this process runs while the lock is held."""
    if not commit:
        await conn.execute("SELECT audit_append($1, $2, $3)", rows, heads, tails)
        return
    append_sql = append_statement(rows, heads, tails)
    if not early_unlock:
        await conn.execute("SET LOCAL synchronous_commit = on; " + append_sql + "COMMIT")
        return
    # The commit itself does not wait for its WAL flush, so the chain's lock is let go before the
    # disk is reached and concurrent changes share their flushes; FLUSH_TAIL then waits for a
    # flush that covers the change too: nothing is answered before it is durable.
    await conn.execute("SET LOCAL synchronous_commit = off; " + append_sql + "COMMIT; " + FLUSH_TAIL)


# `audit_append()` (migration 0042) found that a subject's key was erased since the events were
# keyed (their `key_epoch` is not the database's): nothing was appended
KEYS_ERASED = "CAK01"


async def append_batch(
    conn: asyncpg.Connection,
    rows: list[dict[str, Any]],
    heads: list[bytes],
    tails: list[bytes],
    key_epoch: int | None,
    *,
    wait: bool = True,
) -> bool | None:
    """A batch of events in a transaction of its own: one statement, committed synchronously (the
    chain's lock held through its flush). `key_epoch`: the epoch of `audit_key_epoch` the events
    were keyed at (None: they needed no key); when a key has been erased since (the epoch moved
    on), nothing is appended: False. With `wait=False`, the lock is asked for without waiting:
    None, and nothing appended, when another transaction holds it."""
    if key_epoch is None:
        row = await conn.fetchrow("SELECT audit_append($1, $2, $3, $4) AS last", rows, heads, tails, wait)
    else:
        sql = f"SELECT audit_append($1, $2, $3, $4) AS last WHERE {_KEY_EPOCH} = $5"
        row = await conn.fetchrow(sql, rows, heads, tails, wait, key_epoch)
    if row is None:
        return False
    return None if row["last"] is None else True


async def append_early(
    conn: asyncpg.Connection,
    rows: list[dict[str, Any]],
    heads: list[bytes],
    tails: list[bytes],
    key_epoch: int | None,
) -> bool:
    """`append_batch` sent as a change's event is (one message: committed with synchronous_commit
    off, so that the chain's lock is let go before the disk is reached, then FLUSH_TAIL, which
    waits for a flush covering it): for a batch while other transactions append. False, and
    nothing appended, when a key was erased since `key_epoch` (checked under the lock)."""
    append_sql = append_statement(rows, heads, tails, key_epoch=key_epoch)
    try:
        await conn.execute(f"BEGIN; SET LOCAL synchronous_commit = off; {append_sql}COMMIT; {FLUSH_TAIL}")
    except asyncpg.PostgresError as exc:
        if not conn.is_closed() and conn.is_in_transaction():
            await conn.execute("ROLLBACK")  # the message stopped at the error, inside its transaction
        if exc.sqlstate == KEYS_ERASED:
            return False
        raise
    return True


# --- the transaction of an audited change ------------------------------------------------------------
# Opened and ended by statements rather than `conn.transaction()`: `append(commit=True)` ends it.


async def begin(conn: asyncpg.Connection) -> None:
    await conn.execute("BEGIN")


async def commit(conn: asyncpg.Connection) -> None:
    await conn.execute("COMMIT")


async def rollback(conn: asyncpg.Connection) -> None:
    await conn.execute("ROLLBACK")


# --- the subjects' pseudonym keys ------------------------------------------------------------------


async def existing_keys(conn: asyncpg.Connection | asyncpg.Pool, subjects: Sequence[str]) -> dict[str, bytes]:
    """The keys these subjects have (none is created)."""
    rows = await conn.fetch(
        "SELECT t.subject, k.key FROM unnest($1::text[]) AS t(subject) "
        f"JOIN subject_keys k ON k.subject_id = {_SUBJECT_ID.format(subject='t.subject')}",
        subjects,
    )
    return {row["subject"]: bytes(row["key"]) for row in rows}


async def create_keys(
    conn: asyncpg.Connection | asyncpg.Pool, subjects: Sequence[str], fresh: Sequence[bytes]
) -> tuple[dict[str, bytes], int]:
    """Each subject's key: the one it has, else `fresh[i]`, stored for it; and the keys' epoch,
    read in the same statement (an erasure after it moves the epoch on). A subject whose first
    key a concurrent transaction is storing is missing from the answer (its key is not yet
    visible): the caller asks again."""
    rows = await conn.fetch(
        "WITH wanted AS ("
        f"  SELECT t.subject, {_SUBJECT_ID.format(subject='t.subject')} AS subject_id, t.key "
        "  FROM unnest($1::text[], $2::bytea[]) AS t(subject, key)), "
        "new AS (INSERT INTO subject_keys (subject_id, key) SELECT subject_id, key FROM wanted "
        "  ON CONFLICT (subject_id) DO NOTHING RETURNING subject_id, key), "
        "found AS (SELECT subject_id, key FROM new UNION ALL "
        "  SELECT k.subject_id, k.key FROM subject_keys k JOIN wanted w USING (subject_id)) "
        f"SELECT w.subject, f.key, {_KEY_EPOCH} AS epoch FROM wanted w JOIN found f USING (subject_id)",
        subjects,
        fresh,
    )
    return {row["subject"]: bytes(row["key"]) for row in rows}, (rows[0]["epoch"] if rows else 0)


async def subject_key(conn: asyncpg.Connection | asyncpg.Pool, subject: str) -> bytes | None:
    key = await conn.fetchval(
        f"SELECT key FROM subject_keys WHERE subject_id = {_SUBJECT_ID.format(subject='$1::text')}", subject
    )
    return None if key is None else bytes(key)


async def delete_subject_key(conn: asyncpg.Connection, subject: str) -> bool:
    """Whether the subject had a key. Deleting it moves the keys' epoch on, in the same
    transaction: a writer holding the key in memory can no longer append with it."""
    deleted: int = await conn.fetchval(
        "WITH gone AS (DELETE FROM subject_keys "
        f"  WHERE subject_id = {_SUBJECT_ID.format(subject='$1::text')} RETURNING 1), "
        "moved AS (INSERT INTO audit_key_epoch (epoch) SELECT 1 WHERE EXISTS (SELECT 1 FROM gone) "
        "  ON CONFLICT (only_row) DO UPDATE SET epoch = audit_key_epoch.epoch + 1 RETURNING 1) "
        "SELECT count(*) FROM gone",
        subject,
    )
    return deleted == 1
