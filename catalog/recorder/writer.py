"""Appending audit events: batched, chained, durable before the request is answered.

`record()` returns once the event is committed. Events of concurrent requests are gathered into
one statement, `audit_append()`, which takes the chain's advisory lock, reads the head and
appends the batch with the next sequence numbers and hashes, so processes sharing a database
extend one chain. A change appends its request's event in its own transaction (`audited`).

Durability: nothing is answered before its WAL is flushed. A change commits without waiting for
its flush (so the chain's lock is let go early), then a second transaction that writes one WAL
record of its own (a transactional logical message) commits synchronously: its flush covers the
change's commit record too. (A transaction that writes no WAL, e.g. `SELECT pg_current_xact_id()`,
commits without any flush, so it cannot serve.) Where the database does not allow that message,
changes commit synchronously while holding the lock.

Reads' events (a search, a store's details: requests that change nothing) are appended by the
writer in batches, one statement each, committed synchronously: with the chain's lock free, that
is the cheapest way and nobody waits for it. The statement asks for the lock without waiting; when
another transaction holds it (other processes appending: workers, nodes), that batch and the
writer's batches of the next `CONTENDED_SECONDS` go as a change's event does instead, the lock let
go before their flush (`Contention`).

Outages: the event of a request refused because the database is unreachable cannot be appended
then; `defer()` keeps it (in memory, at most `MAX_DEFERRED`) and the writer appends it once the
database answers again.

What a request learns about itself on the way is its `PendingEvent` (`current`); the statements
are `repo`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from catalog import telemetry
from catalog.errors import is_unavailable
from catalog.recorder import repo
from catalog.recorder.chain import HASHED_COLUMNS, canonical_parts, plain_body
from catalog.recorder.pseudonyms import KeyCache, mark, pseudonymize

log = logging.getLogger("catalog.audit")

SERVICE_NAME = "memory-catalog"
COLUMNS = (*HASHED_COLUMNS, "prev_hash", "hash")
MAX_DEFERRED = 20_000
RETRY_SECONDS = 1.0
KEY_ROUNDS = 3  # appends of one batch refused for a key erased since it was read, before giving up
# after finding the chain's lock held by another transaction, a writer sends its batches as a
# change's message (the lock let go before the flush) for this long before it asks again (so that
# under lasting contention nearly every batch goes so: a batch that finds the lock free between
# others' short holds would hold it through its flush again)
CONTENDED_SECONDS = 10.0


async def early_unlock_supported(conn: asyncpg.Connection) -> bool:
    """Whether this database lets us write the flush marker (managed services may refuse it)."""
    try:
        await repo.probe_flush_marker(conn)
    except asyncpg.PostgresError as exc:
        log.warning("changes will hold the audit chain's lock until flushed: %s", exc)
        return False
    return True


@dataclass(eq=False)  # one object per request or operation: what others keep for it is keyed by it
class PendingEvent:
    """What a request learns about itself on the way (filled by the authorizer and services), which
    becomes its audit event; one per request, per operation inside it, or per piece of background
    work, made current in `current`."""

    action_name: str | None = None
    securable_type: str | None = None
    securable_full_name: str | None = None
    securable_id: str | None = None
    privilege: str | None = None
    decision: str | None = None
    reason: str | None = None
    policy_revision: int | None = None
    result_count: int | None = None
    describe: Callable[[int], dict[str, Any]] | None = None  # the request's event for a status
    # the event, for a status, of any pending event of this request (`describe`: of this one), and
    # how an event is appended: what `operation()` needs to give an operation an event of its own
    event_for: Callable[[PendingEvent, int], dict[str, Any]] | None = None
    record: Callable[..., Awaitable[None]] | None = None
    params: dict[str, Any] | None = None  # what the request did beyond its query (a tool call)
    # the status and error code of an operation whose transport answered 200 anyway (an MCP tool
    # call that failed is a successful JSON-RPC answer)
    outcome: tuple[int, str] | None = None
    enabled: bool = True
    committed: bool = False  # a change already committed the request's event with itself
    # the status a change's event records when it commits with the change (`audited`): what the
    # request answers once the change is made (a web console form answers 303 See Other)
    success_status: int = 200
    early_unlock: bool = True  # see repo.FLUSH_TAIL


current: ContextVar[PendingEvent | None] = ContextVar("pending_event", default=None)


def note_decision(
    action_name: str,
    securable: Any,
    decision: Any,
    *,
    patterns: Sequence[str] = (),
    scopes: Sequence[str] = (),
) -> None:
    """Called by the authorizer: the request's action, securable and decision (first one wins the
    action; a later denial replaces an earlier allow). The scope patterns and scopes the reason
    names (the decision's own, and `patterns` and `scopes`: those of the request's grants limited
    to scopes and the scopes held to them) are marked in it, to be kept as pseudonyms
    (`pseudonyms.mark`)."""
    pending = current.get()
    if pending is None:
        return
    if pending.action_name is None or not decision.allowed:
        pending.action_name = action_name
        pending.securable_type = securable.type.value
        pending.securable_full_name = securable.full_name
        pending.securable_id = securable.node.id if securable.exists else None
        pending.privilege = decision.privilege
        pending.decision = "allow" if decision.allowed else "deny"
        named = [*decision.named, *(decision.scopes or ()), *patterns]
        pending.reason = mark(decision.reason, scopes=list(scopes), patterns=named)
        pending.policy_revision = securable.revision


def begin_operation(params: dict[str, Any]) -> None:
    """The request's transport was authorized; what follows is the operation its event records
    (a tool call: the entry operation it runs names the action and the decision)."""
    pending = current.get()
    if pending is None:
        return
    pending.action_name = pending.securable_type = pending.securable_full_name = None
    pending.securable_id = pending.privilege = pending.decision = pending.reason = None
    pending.policy_revision = pending.result_count = None
    pending.params = params


@asynccontextmanager
async def operation(params: dict[str, Any]) -> AsyncIterator[PendingEvent]:
    """An operation inside a request that gets an audit event of its own: each tool call a model
    makes while the server answers a response. Inside the block, the authorizer's decision, the
    counts and `note_outcome` go to the operation's pending event, not the request's; a change made
    inside commits the operation's event with itself (`audited`), else the event is appended when
    the block ends (with status 500 if it raised). Events share the request's id. Operations nest
    (each tool call of one session's extraction in a pipeline run): an inner one is its own event."""
    parent = current.get()
    child = PendingEvent(params=params, enabled=False)
    event_for, record = (parent.event_for, parent.record) if parent is not None else (None, None)
    if parent is not None and parent.enabled and event_for is not None and record is not None:
        child.enabled = True
        child.early_unlock = parent.early_unlock
        child.describe = lambda status: event_for(child, status)
        child.event_for, child.record = event_for, record
    token = current.set(child)
    failed = False
    try:
        yield child
    except BaseException:
        failed = True
        raise
    finally:
        current.reset(token)
        if child.enabled and not child.committed and child.describe is not None and record is not None:
            if failed and child.outcome is None:
                child.outcome = (500, "INTERNAL_ERROR")
            if failed:
                with contextlib.suppress(Exception):  # the failure itself is what propagates
                    await record(**child.describe(200))
            else:
                await record(**child.describe(200))


def note_refusal(decision: str, reason: str) -> None:
    """The request was refused before any securable was asked about (`deny`: a web console form
    without its CSRF token; `unauthenticated`: a console page without a session, redirected to
    sign-in rather than answered 401); its event records the decision and the reason."""
    pending = current.get()
    if pending is not None:
        pending.decision = decision
        pending.reason = reason


def note_success_status(status: int) -> None:
    """The status the request answers when its change succeeds (see `PendingEvent.success_status`)."""
    pending = current.get()
    if pending is not None:
        pending.success_status = status


def note_outcome(status: int, error_code: str) -> None:
    """The operation failed although its transport answers 200 (see `PendingEvent.outcome`)."""
    pending = current.get()
    if pending is not None:
        pending.outcome = (status, error_code)


def note_params(params: dict[str, Any]) -> None:
    """What the request did beyond its query (setting a legal hold), kept in its event's
    `request_params`."""
    pending = current.get()
    if pending is not None:
        pending.params = {**(pending.params or {}), **params}


def note_result(count: int) -> None:
    """How many entries the request read or wrote (request lineage)."""
    pending = current.get()
    if pending is not None:
        pending.result_count = count


class Contention:
    """Whether a writer found the chain's lock held by another transaction lately (within
    `CONTENDED_SECONDS`): its batches then go as a change's event does (`repo.append_early`)
    without first asking for the lock."""

    def __init__(self) -> None:
        self._until = float("-inf")
        self.found_held = 0  # times the lock was found held (a batch then sent as a change's)

    @property
    def lately(self) -> bool:
        return time.monotonic() < self._until

    def held(self) -> None:
        self.found_held += 1
        self._until = time.monotonic() + CONTENDED_SECONDS
        telemetry.audit_chain_held()


class AuditWriter:
    """Appends request events in batches on a pool of its own (one connection), which it closes."""

    def __init__(self, pool: asyncpg.Pool, *, max_batch: int = 500) -> None:
        self.pool = pool
        self.max_batch = max_batch
        # requests' events waiting for the writer, each with the future its request awaits
        self._pending: deque[tuple[dict[str, Any], asyncio.Future[None] | None]] = deque()
        self._wake: asyncio.Future[None] | None = None  # what the writer awaits while nothing waits
        self._deferred: deque[dict[str, Any]] = deque()
        self._retry_at = 0.0
        self._appending_since: float | None = None  # monotonic time the append in progress began
        self.dropped = 0
        self._task: asyncio.Task[None] | None = None
        self.enabled = True
        self.early_unlock = True
        self._closing = False
        # deferred events of a batch whose append failed in flight: it may have committed all the
        # same (the answer was lost), so they are looked up before they are appended again
        self._uncertain: set[str] = set()
        self.keys = KeyCache()  # the subjects' keys of its recent batches
        self.contention = Contention()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="audit-writer")

    async def close(self) -> None:
        """Append what is waiting (deferred events too, if the database answers), then stop."""
        if self._task is not None:
            self._closing = True
            self._retry_at = 0.0
            self._notify()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        if self._deferred or self.dropped:
            log.error(
                "audit events of refused requests lost at shut-down",
                extra={"events": len(self._deferred) + self.dropped},
            )
        await self.pool.close()

    async def record(self, **event: Any) -> None:
        if not self.enabled:
            return
        assert self._task is not None, "start() first (events before it: record_system_events)"
        complete(event)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((event, future))
        self._notify()
        with telemetry.audit_queued(event):
            await future

    def defer(self, **event: Any) -> None:
        """Keep the event of a request refused during an outage; it is appended once the database
        answers again (oldest dropped beyond MAX_DEFERRED, and counted)."""
        if not self.enabled:
            return
        if len(self._deferred) >= MAX_DEFERRED:
            self._deferred.popleft()
            self.dropped += 1
            if self.dropped == 1:
                log.error("audit backlog full: dropping the oldest events of refused requests")
        self._deferred.append(complete(event))
        self._notify()  # the writer may be waiting: wake it

    @property
    def backlog(self) -> int:
        return len(self._deferred)

    @property
    def waiting_seconds(self) -> float:
        """How long the append in progress has waited (0 when none is): a database that does not
        confirm commits (a synchronous standby away) keeps every audited request waiting."""
        since = self._appending_since
        return 0.0 if since is None else time.monotonic() - since

    def _notify(self) -> None:
        """Wake the writer if it waits for work."""
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _wait(self, seconds: float | None) -> None:
        """Until a request's event (or a wake-up) comes, or `seconds` pass."""
        loop = asyncio.get_running_loop()
        wake = self._wake = loop.create_future()
        timer = None if seconds is None else loop.call_later(seconds, self._notify)
        try:
            await wake
        finally:
            self._wake = None
            if timer is not None:
                timer.cancel()

    async def _next_batch(self) -> list[tuple[dict[str, Any], asyncio.Future[None] | None]]:
        """Waiting requests' events, preceded by deferred ones when it is time to retry them."""
        if not self._pending and not self._closing:
            timeout = None
            if self._deferred:
                timeout = max(0.0, self._retry_at - time.monotonic())
            left = self.keys.left()  # wake to forget the keys held when their time is up
            if left is not None:
                timeout = left if timeout is None else min(timeout, left)
            await self._wait(timeout)
        await asyncio.sleep(0)  # let requests that are ready finish and join this batch
        pending = self._pending
        batch = [pending.popleft() for _ in range(min(len(pending), self.max_batch))]
        if self._deferred and time.monotonic() >= self._retry_at:
            take = min(len(self._deferred), self.max_batch)
            batch[:0] = [(self._deferred.popleft(), None) for _ in range(take)]
        return batch

    async def _run(self) -> None:
        """One batch at a time, on a connection of its own (acquired again after a failure)."""
        conn: asyncpg.Connection | None = None
        try:
            while True:
                if self._closing and not self._pending and (not self._deferred or self._retry_at):
                    return  # everything appended (or the database is away: reported by close)
                batch = await self._next_batch()
                self.keys.expire()
                if not batch:
                    continue
                try:
                    if conn is None:
                        conn = await self.pool.acquire()
                    if self._uncertain:
                        batch = await self._without_appended(conn, batch)
                    if batch:
                        self._appending_since = time.monotonic()
                        try:
                            await append_on(
                                conn,
                                [event for event, _ in batch],
                                keys=self.keys,
                                contention=self.contention if self.early_unlock else None,
                            )
                        finally:
                            self._appending_since = None
                except Exception as exc:
                    await self._let_go(conn)
                    conn = None
                    self._retry_at = time.monotonic() + RETRY_SECONDS
                    deferred = [event for event, future in batch if future is None]
                    if is_unavailable(exc):  # kept for when the database is back
                        self._deferred.extendleft(reversed(deferred))
                        self._uncertain.update(str(event["event_id"]) for event in deferred)
                    else:
                        log.exception("audit append failed", extra={"deferred_events_lost": len(deferred)})
                        self.dropped += len(deferred)
                    for _, future in batch:
                        if future is not None and not future.done():
                            future.set_exception(exc)
                else:
                    self._retry_at = 0.0
                    for _, future in batch:
                        if future is not None and not future.done():
                            future.set_result(None)
        finally:
            await self._let_go(conn)

    async def _without_appended(
        self, conn: asyncpg.Connection, batch: list[tuple[dict[str, Any], asyncio.Future[None] | None]]
    ) -> list[tuple[dict[str, Any], asyncio.Future[None] | None]]:
        """Drop the events an earlier, seemingly failed, append did commit (never twice)."""
        ids = [str(event["event_id"]) for event, _ in batch if str(event["event_id"]) in self._uncertain]
        if not ids:
            return batch
        found = await repo.appended_ids(conn, ids)
        self._uncertain.difference_update(ids)
        return [(event, future) for event, future in batch if str(event["event_id"]) not in found]

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


@telemetry.audit_append
async def append_on(
    conn: asyncpg.Connection,
    events: list[dict[str, Any]],
    *,
    commit: bool = False,
    early_unlock: bool = True,
    keys: KeyCache | None = None,
    contention: Contention | None = None,
) -> None:
    """Append events in the connection's transaction (or as their own when there is none);
    PostgreSQL numbers and hashes them under the chain's lock, held until the transaction ends.
    `commit=True` ends the caller's transaction in the same message, so that no other work of
    this process runs while the lock is held (`repo.append`).
    Scopes, paths and end users are replaced by their pseudonyms first (`pseudonyms`), with the
    keys `keys` holds where it holds them (the batch writer's, outside any transaction): if a key
    was erased since it was read, nothing is appended and the events are keyed again. With
    `contention` (the batch writer's, where the database takes the flush marker), a batch found
    the chain's lock held goes as a change's event does (`_append_batch`)."""
    if keys is None:
        await pseudonymize(conn, events)
        rows, heads, tails = _append_arguments(events)
        await repo.append(conn, rows, heads, tails, commit=commit, early_unlock=early_unlock)
        return
    originals = [dict(event) for event in events]  # pseudonymize replaces values, never changes them
    try:
        for _ in range(KEY_ROUNDS):
            epoch = await pseudonymize(conn, events, keys)
            rows, heads, tails = _append_arguments(events)
            if await _append_batch(conn, rows, heads, tails, epoch, contention):
                return
            keys.forget()  # a key was erased since it was read: the events are keyed again
            _restore(events, originals)
        raise RuntimeError(
            f"the audit keys changed {KEY_ROUNDS} times while {len(events)} events were appended"
        )
    except BaseException:
        # appended again later (a deferred event), an event is keyed then, with the keys as they are
        keys.forget()
        _restore(events, originals)
        raise


async def _append_batch(
    conn: asyncpg.Connection,
    rows: list[dict[str, Any]],
    heads: list[bytes],
    tails: list[bytes],
    epoch: int | None,
    contention: Contention | None,
) -> bool:
    """A batch keyed at `epoch`, in a transaction of its own; False when a key was erased since.
    One statement committed synchronously while the chain's lock is free; while other transactions
    hold it (found so within `CONTENDED_SECONDS`), a change's message, which lets the lock go
    before its flush."""
    if contention is None:
        return bool(await repo.append_batch(conn, rows, heads, tails, epoch))
    if not contention.lately:
        appended = await repo.append_batch(conn, rows, heads, tails, epoch, wait=False)
        if appended is not None:
            return appended
        contention.held()
    return await repo.append_early(conn, rows, heads, tails, epoch)


def _restore(events: list[dict[str, Any]], originals: list[dict[str, Any]]) -> None:
    for event, original in zip(events, originals, strict=True):
        event.clear()
        event.update(original)


@asynccontextmanager
async def audited(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A transaction for a change: the request's audit event commits in it, or neither does.
    (If the change fails, the request's error is audited the usual way.) Code inside must not
    open `conn.transaction()` itself: see `catalog.db.atomic`."""
    pending = current.get()
    describe = pending.describe if pending is not None and pending.enabled and not pending.committed else None
    async with pool.acquire() as conn:
        await repo.begin(conn)
        try:
            yield conn
            if describe is not None:
                assert pending is not None
                early = pending.early_unlock
                event = complete(describe(pending.success_status))
                await append_on(conn, [event], commit=True, early_unlock=early)
            else:
                await repo.commit(conn)
        except BaseException:
            if not conn.is_closed():
                with contextlib.suppress(Exception):
                    await repo.rollback(conn)
            raise
    if pending is not None and describe is not None:
        pending.committed = True
