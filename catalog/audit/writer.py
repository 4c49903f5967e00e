"""Appending audit events: batched, chained, durable before the request is answered.

`record()` returns once the event is committed. Events of concurrent requests are gathered into
one statement, `audit_append()`, which takes the chain's advisory lock, reads the head and
appends the batch with the next sequence numbers and hashes, so processes sharing a database
extend one chain. A change appends its request's event in its own transaction (`audited`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from catalog.audit.chain import HASHED_COLUMNS, canonical_parts, plain_body

log = logging.getLogger("catalog.audit")

SERVICE_NAME = "memory-catalog"
COLUMNS = (*HASHED_COLUMNS, "prev_hash", "hash")


@dataclass
class AuditContext:
    """What a request learns about itself on the way (filled by the authorizer and services)."""

    action_name: str | None = None
    securable_type: str | None = None
    securable_full_name: str | None = None
    securable_id: str | None = None
    privilege: str | None = None
    decision: str | None = None
    reason: str | None = None
    policy_revision: int | None = None
    result_count: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    describe: Callable[[int], dict[str, Any]] | None = None  # the request's event for a status
    enabled: bool = True
    committed: bool = False  # a change already committed the request's event with itself


current: ContextVar[AuditContext | None] = ContextVar("audit_context", default=None)


def note_decision(action_name: str, securable: Any, decision: Any) -> None:
    """Called by the authorizer: the request's action, securable and decision (first one wins the
    action; a later denial replaces an earlier allow)."""
    context = current.get()
    if context is None:
        return
    if context.action_name is None or not decision.allowed:
        context.action_name = action_name
        context.securable_type = securable.type.value
        context.securable_full_name = securable.full_name
        context.securable_id = securable.node.id if securable.exists else None
        context.privilege = decision.privilege
        context.decision = "allow" if decision.allowed else "deny"
        context.reason = decision.reason
        context.policy_revision = securable.revision


def note_result(count: int) -> None:
    """How many entries the request read or wrote (request lineage)."""
    context = current.get()
    if context is not None:
        context.result_count = count


class AuditWriter:
    """Appends request events in batches on a pool of its own (one connection), which it closes."""

    def __init__(self, pool: asyncpg.Pool, *, max_batch: int = 500) -> None:
        self.pool = pool
        self.max_batch = max_batch
        self._queue: asyncio.Queue[tuple[dict[str, Any], asyncio.Future[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.enabled = True

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="audit-writer")

    async def close(self) -> None:
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), 10)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.pool.close()

    async def record(self, **event: Any) -> None:
        if not self.enabled:
            return
        assert self._task is not None, "start() first (events before it: record_system_events)"
        complete(event)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, future))
        await future

    async def _run(self) -> None:
        """One batch at a time, on a connection of its own (acquired again after a failure)."""
        conn: asyncpg.Connection | None = None
        try:
            while True:
                batch = [await self._queue.get()]
                await asyncio.sleep(0)  # let requests that are ready finish and join this batch
                while not self._queue.empty() and len(batch) < self.max_batch:
                    batch.append(self._queue.get_nowait())
                try:
                    if conn is None:
                        conn = await self.pool.acquire()
                    await append_on(conn, [event for event, _ in batch])
                except Exception as exc:
                    log.exception("audit append failed")
                    await self._let_go(conn)
                    conn = None
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                else:
                    for _, future in batch:
                        if not future.done():
                            future.set_result(None)
                for _ in batch:
                    self._queue.task_done()
        finally:
            await self._let_go(conn)

    async def _let_go(self, conn: asyncpg.Connection | None) -> None:
        if conn is not None:
            with contextlib.suppress(Exception):
                await self.pool.release(conn)


async def append(pool: asyncpg.Pool, events: list[dict[str, Any]]) -> None:
    """Append and commit events: one statement, its own transaction."""
    async with pool.acquire() as conn:
        await append_on(conn, events)


async def record_system_events(pool: asyncpg.Pool, events: list[dict[str, Any]]) -> None:
    """Events of the server or a command rather than of a request (migrations, bootstrap, reindex)."""
    if events:
        await append(
            pool,
            [
                complete({"request_id": f"system-{uuid.uuid4().hex}", "decision": "system", **e})
                for e in events
            ],
        )


def complete(event: dict[str, Any]) -> dict[str, Any]:
    event.setdefault("event_id", uuid.uuid4())
    event.setdefault("event_time", datetime.now(UTC))
    event.setdefault("service_name", SERVICE_NAME)
    event.setdefault("request_params", {})
    return event


def _append_arguments(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[bytes], list[bytes]]:
    """`audit_append()`'s arguments: the rows, and each one's canonical encoding cut around its seq."""
    rows, heads, tails = [], [], []
    for event in events:
        row = plain_body(event)
        row["request_params"] = row["request_params"] or {}
        head, tail = canonical_parts(row)
        rows.append(row)
        heads.append(head)
        tails.append(tail)
    return rows, heads, tails


def _hex(data: bytes) -> str:
    return f"decode('{data.hex()}', 'hex')"


async def append_on(conn: asyncpg.Connection, events: list[dict[str, Any]], *, commit: bool = False) -> None:
    """Append events in the connection's transaction (or as their own when there is none);
    PostgreSQL numbers and hashes them under the chain's lock, held until the transaction ends.
    `commit=True` ends the caller's transaction in the same message, so that no other work of
    this process runs while the lock is held (only hex digits are spliced into that statement)."""
    rows, heads, tails = _append_arguments(events)
    if not commit:
        await conn.execute("SELECT audit_append($1, $2, $3)", rows, heads, tails)
        return
    # The commit itself does not wait for its WAL flush, so the chain's lock is let go before the
    # disk is reached and concurrent changes share their flushes; the last statement (a
    # transaction of its own that commits synchronously) then waits for the flush, which covers
    # the change too: nothing is answered before it is durable.
    await conn.execute(
        "SET LOCAL synchronous_commit = off; "
        f"SELECT audit_append(convert_from({_hex(json.dumps(rows).encode())}, 'UTF8')::jsonb, "
        f"ARRAY[{', '.join(map(_hex, heads))}], ARRAY[{', '.join(map(_hex, tails))}]); "
        "COMMIT; SELECT pg_current_xact_id()"
    )


@asynccontextmanager
async def audited(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A transaction for a change: the request's audit event commits in it, or neither does.
    (If the change fails, the request's error is audited the usual way.) Code inside must not
    open `conn.transaction()` itself: see `catalog.db.atomic`."""
    context = current.get()
    describe = context.describe if context is not None and context.enabled and not context.committed else None
    async with pool.acquire() as conn:
        await conn.execute("BEGIN")
        try:
            yield conn
            if describe is not None:
                await append_on(conn, [complete(describe(200))], commit=True)
            else:
                await conn.execute("COMMIT")
        except BaseException:
            if not conn.is_closed():
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK")
            raise
    if context is not None and describe is not None:
        context.committed = True
