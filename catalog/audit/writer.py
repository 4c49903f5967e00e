"""Appending audit events: batched, chained, durable before the request is answered.

`record()` returns once the event is committed. Events of concurrent requests are gathered into
one transaction; the transaction takes the audit advisory lock, reads the chain's head and
appends the batch with the next sequence numbers, so processes sharing a database extend one
chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from catalog.audit.chain import GENESIS, HASHED_COLUMNS, chain_hash

log = logging.getLogger("catalog.audit")

AUDIT_LOCK = 0x61756474  # "audt"
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

    async def record(self, **event: Any) -> None:
        if not self.enabled:
            return
        complete(event)
        if self._task is None:  # not started (start-up events): append directly
            await append(self.pool, [event])
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, future))
        await future

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < self.max_batch:
                batch.append(self._queue.get_nowait())
            try:
                await append(self.pool, [event for event, _ in batch])
            except Exception as exc:
                log.exception("audit append failed")
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
            else:
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)
            for _ in batch:
                self._queue.task_done()


async def append(pool: asyncpg.Pool, events: list[dict[str, Any]]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await append_on(conn, events)


def complete(event: dict[str, Any]) -> dict[str, Any]:
    event.setdefault("event_id", uuid.uuid4())
    event.setdefault("event_time", datetime.now(UTC))
    event.setdefault("service_name", SERVICE_NAME)
    event.setdefault("request_params", {})
    return event


async def append_on(conn: asyncpg.Connection, events: list[dict[str, Any]]) -> None:
    """Append events inside the caller's transaction (the chain's lock is held until it ends)."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", AUDIT_LOCK)
    head = await conn.fetchrow("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
    seq, prev = (head["seq"], head["hash"]) if head else (0, GENESIS)
    records = []
    for event in events:
        seq += 1
        row = {column: event.get(column) for column in COLUMNS}
        row["seq"] = seq
        row["prev_hash"] = prev
        row["hash"] = prev = chain_hash(prev, row)
        row["request_params"] = row["request_params"] or {}
        records.append(tuple(row[column] for column in COLUMNS))
    placeholders = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
    await conn.executemany(
        f"INSERT INTO audit_events ({', '.join(COLUMNS)}) VALUES ({placeholders})", records
    )


@asynccontextmanager
async def audited(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A transaction for a change: the request's audit event commits in it, or neither does.
    (If the change fails, the request's error is audited the usual way.)"""
    context = current.get()
    describe = context.describe if context is not None and context.enabled and not context.committed else None
    async with pool.acquire() as conn:
        async with conn.transaction():
            yield conn
            if describe is not None:
                await append_on(conn, [complete(describe(200))])
        if context is not None and describe is not None:
            context.committed = True
