"""Keeps this process's Tantivy index of a corpus (`catalog.search.corpus`) in step with
PostgreSQL by tailing the corpus's change log (`entry_changes`, `transcript_changes`).

Rules:
- PostgreSQL is the truth; the index is derived. Each pass reads the change rows past the
  watermark, fetches the current state of the entries they name, applies it (upsert or delete
  by entry id, so replaying a row is harmless), commits, and only then moves the watermark, which
  is saved beside the index. A crash anywhere loses nothing: the rows past the saved watermark are
  replayed at the next start.
- Sequence numbers are drawn before commit, so a row can become visible after a higher one (a
  gap). The watermark never passes a gap younger than `gap_timeout` (a transaction still in
  flight); older gaps are rolled-back writes. Rows past a gap are applied at once and remembered.
- Every process has its own index directory (`<data dir>/index/slot-N`, the first whose writer
  lock it can take), so several processes on one database each keep their own index current;
  except the workers of one `catalog serve --workers N`, which share one slot (`shared_slot`):
  the one holding its writer lock indexes, the others read what it commits and ask it for a pass
  when a search must hold every earlier write (`catalog.search.sharing`); when the writer dies, a
  reader takes its lock and carries on from the watermark file.
- A missing or unreadable index is rebuilt from PostgreSQL at start. When the index cannot be
  brought up to date at start (a full disk), the server starts degraded and the loop retries.
- Read-your-writes: `wait_fresh()` returns once a pass that started after the call has
  committed, so everything committed before the call is searchable; given the change log's head
  read when the request began, as soon as a pass (the one in progress, perhaps) ends with the
  watermark at or past it. A pass answers before it writes its watermark file.
- Failures (a full disk, an I/O error, a commit that lost documents) never move the watermark,
  in memory or on disk: the index rolls back what it did not commit (`FullTextIndex.apply`), and
  the same rows are retried with backoff until they are applied, so the index catches up by
  itself once the cause is gone. Meanwhile `status()` reports the lag and the reason, and
  searches use what the index holds instead of waiting for passes that cannot succeed.
- The watermark file may lag the in-memory watermark (it could not be written): harmless, the
  rows past it are replayed at the next start; it is written again at every pass until it is.
- At shut-down the loop makes a last pass once it is asked to stop (after the server's last
  requests), so the index and its watermark file hold every change committed before it: the next
  start has none of them to replay.
- A commit has a cost of its own, whatever it holds (a new segment: its files, their flush, a
  new searcher; some 10 ms of CPU here, where indexing a short entry costs a tenth of a
  millisecond: docs, benchmarks, "A write's cost by its rate"), so writes gather for one: a pass
  woken only by writes (this process's, the change feed's, a reader's `poke`) starts at most
  `commit_interval` after the last commit. A pass that a search waits for (`wait_fresh`, a
  reader's `wake`), or that has more rows waiting, starts at once: no search waits for the
  interval, and read-your-writes holds as before.
- No polling while idle: with the change feed listening (`catalog.search.passes.ChangeFeed`),
  the loop sleeps until a commit anywhere, a local write or a search wakes it, or until the
  oldest young gap expires; without the feed (not yet connected, or lost) it polls every
  `poll_interval`.
- The change log is pruned: after its passes, at most every `prune_interval`, a process deletes
  the rows older than `retention` (far older than any gap) and records in `change_log_pruned`
  the highest seq it deleted. Every process may have its own index and watermark, and one may be
  down while another prunes; so an index whose watermark is below that mark (it may have missed
  pruned rows: an index stopped for longer than the retention) is rebuilt from the tables,
  checked at start and at every pass. A rebuild rewinds its watermark no lower than the mark
  (those rows are older than the retention, so in the rebuild's snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import fcntl
import functools
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg

from catalog.search import change_log_repo as change_log
from catalog.search.corpus import ENTRIES, Corpus
from catalog.search.fulltext import FullTextIndex, IndexedEntry, WriterLocked, writer_held
from catalog.search.health import Health, WorkerStatus, describe
from catalog.search.passes import ChangeFeed, Passes
from catalog.search.sharing import Announcer, Follower, NoWriter

log = logging.getLogger("catalog.search")

WATERMARK_FILE = "catalog-watermark.json"
MAX_SLOTS = 16
BATCH = 2000
REBUILD_REWIND = 10_000  # after a rebuild, replay this many change rows (in-flight writers)
RETENTION = datetime.timedelta(hours=24)  # change rows older than this are pruned
PRUNE_INTERVAL = 600.0  # seconds between a process's prunings of a change log
PRUNE_BATCH = 10_000  # rows deleted in one transaction
# seconds after a commit before a pass that no search waits for commits again (see the rules)
COMMIT_INTERVAL = 1.0


OPEN_LOCK_FILE = ".catalog-open.lock"  # under an index root: held while a process opens a slot
SHARED_OPEN_PATIENCE = 30.0  # seconds a reader of a shared slot retries opening it


@contextlib.contextmanager
def _opening(root: Path) -> Iterator[None]:
    """Hold the index root's open lock (flock: let go by the kernel if the process dies), so
    that two processes opening slots at once do not both move aside or rebuild the same one."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / OPEN_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def open_directory(directory: Path) -> FullTextIndex:
    """The index in `directory` with its writer (`WriterLocked` when another process holds it); an
    index of older fields, or unreadable, is moved aside and rebuilt."""
    try:
        return FullTextIndex(directory)
    except ValueError as exc:
        if describe(exc)[1]:  # an I/O failure (a full disk) says nothing of the index: no rebuild
            raise
        if "schema does not match" in str(exc):
            # built by a server whose index had other fields: derived state, rebuilt from
            # PostgreSQL (no watermark in the new directory)
            log.info("index %s has the fields of an older version; rebuilding it", directory)
            shutil.rmtree(directory)
            return FullTextIndex(directory)
        log.warning("index %s is unreadable (%s); rebuilding it", directory, exc)
        shutil.move(str(directory), str(directory.with_name(f"{directory.name}.corrupt-{int(time.time())}")))
        return FullTextIndex(directory)


def open_slot(root: Path) -> FullTextIndex:
    """The first index slot whose writer lock is free; a corrupt slot is moved aside and rebuilt."""
    last_error: Exception | None = None
    with _opening(root):
        for n in range(MAX_SLOTS):
            try:
                return open_directory(root / f"slot-{n}")
            except WriterLocked as exc:  # another process's slot
                last_error = exc
    raise RuntimeError(f"every index slot under {root} is locked by another process: {last_error}")


def open_shared(directory: Path) -> FullTextIndex:
    """A slot shared by several processes: with its writer when no other process holds it, else
    read only."""
    with _opening(directory.parent):
        try:
            return open_directory(directory)
        except WriterLocked:
            return FullTextIndex(directory, write=False)


def free_slot(roots: list[Path]) -> int:
    """The first slot number whose writer lock no process holds under any of `roots` (the index
    roots of the corpora): what the workers of one `catalog serve` are told to share."""
    for n in range(MAX_SLOTS):
        if not any(writer_held(root / f"slot-{n}") for root in roots):
            return n
    raise RuntimeError(f"every index slot under {', '.join(map(str, roots))} is locked by another process")


@dataclasses.dataclass(frozen=True)
class IndexPosition:
    """How far the index is behind its change log (what `/healthz` reports)."""

    watermark: int  # every change row up to here is committed in the index
    latest: int  # the change log's highest seq
    behind: int  # change rows up to `latest` not yet committed in the index (`Indexer.lag`)


class Indexer:
    def __init__(
        self,
        pool: asyncpg.Pool,
        index_root: Path,
        *,
        corpus: Corpus = ENTRIES,
        poll_interval: float = 0.25,
        gap_timeout: float = 30.0,
        retry_delay: float = 0.5,
        max_retry_delay: float = 10.0,
        feed: ChangeFeed | None = None,
        retention: datetime.timedelta = RETENTION,
        prune_interval: float = PRUNE_INTERVAL,
        shared_slot: int | None = None,
        commit_interval: float = COMMIT_INTERVAL,
    ) -> None:
        self.pool = pool
        self.corpus = corpus
        self.index_root = index_root / corpus.directory if corpus.directory else index_root
        self.poll_interval = poll_interval
        self.commit_interval = commit_interval
        self._committed_at = float("-inf")  # monotonic time of this process's last commit
        self.gap_timeout = gap_timeout
        self.retention = retention
        self.prune_interval = prune_interval
        self._pruned_at = float("-inf")
        self.pruned_total = 0  # change rows this process has deleted
        self.feed: ChangeFeed | None = None
        self.index: FullTextIndex | None = None
        self.watermark = 0  # every change row up to here is committed in the index
        self._saved: int | None = None  # the watermark the file holds
        self._needs_rebuild = False
        self._done_above: set[int] = set()
        self._gaps: dict[int, float] = {}
        self.passes = Passes()
        name = "full-text index" if corpus is ENTRIES else f"full-text index of {corpus.name}"
        self.health = Health(
            name, log, first_delay=retry_delay, max_delay=max_retry_delay, where=str(self.index_root)
        )
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._stopping = False
        self._stop = asyncio.Event()
        # a slot shared with other processes (catalog.search.sharing): None, this process's own
        self.shared_slot = shared_slot
        self.commits = 0  # commits this process made to the index (readers reload when it moves)
        self.announcer: Announcer | None = None  # while writing: answers the slot's readers
        self.follower: Follower | None = None  # while reading a slot another process writes
        self._pass_started = 0.0  # monotonic time the pass in progress (or the last one) began
        self._follow_task: asyncio.Task[None] | None = None
        self._take_over = asyncio.Event()  # a search found no writer: try to become it now
        if feed is not None:
            self.listen(feed)

    def listen(self, feed: ChangeFeed) -> None:
        """Sleep while idle, woken by the feed's notifications of this corpus's change log."""
        self.feed = feed
        feed.subscribe(self.passes.wake.set, self.corpus.changes)

    @property
    def directory(self) -> Path:
        assert self.index is not None
        return self.index.directory

    @property
    def reading(self) -> bool:
        """Whether this process only reads its slot (another process writes it)."""
        return self.follower is not None

    async def start(self, *, run: bool = True) -> None:
        """Open an index slot and bring it up to date. With `run`, a failure to do so (a full
        disk) leaves the server up and degraded, the loop retrying; without, it is raised. A
        shared slot another process writes is only read (`reading`)."""
        if self.shared_slot is None:
            self.index = await asyncio.to_thread(open_slot, self.index_root)
        else:
            self.index = await self._open_shared(self.index_root / f"slot-{self.shared_slot}")
            if not self.index.writes:
                self._follow()
                return
            self._announce()
        saved = self._read_watermark()
        if saved is None:
            self._needs_rebuild = True
        else:
            self.watermark = self._saved = saved
        delay = 0.0
        try:
            while await self._sync():
                pass
        except Exception as exc:
            if not run:
                raise
            delay = self.health.failed(exc, self._doing())
        if run:
            self._task = asyncio.create_task(self._loop(delay), name="indexer")

    async def _open_shared(self, directory: Path) -> FullTextIndex:
        """The shared slot, with its writer or read only; a reader retries while the index cannot
        be opened yet (the writer is making it afresh)."""
        deadline = time.monotonic() + SHARED_OPEN_PATIENCE
        while True:
            try:
                return await asyncio.to_thread(open_shared, directory)
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    # --- a slot shared with other processes ------------------------------------------------------

    def _announce(self) -> None:
        """Answer the slot's readers (catalog.search.sharing); the name is taken again at each pass
        while a writer that is stopping still holds it."""
        if self.announcer is None:
            self.announcer = Announcer(self.directory, self.passes.hurry, self._failing, self.passes.wake.set)
        self.announcer.listen()

    def _failing(self) -> str | None:
        """Why the index is failing now (None while it is healthy or the database is away: then
        the passes resume as soon as it is back, and readers wait for them as this process does)."""
        if self.health.healthy or self.health.outage:
            return None
        return self.health.reason or "failing"

    def _follow(self) -> None:
        """Read the slot another process writes, and watch for its writer's end."""
        assert self.index is not None
        self.follower = Follower(self.directory, self.index.reload)
        self.follower.open()
        self.watermark = self._read_watermark() or 0
        self._follow_task = asyncio.create_task(self._watch_writer(), name="index-follower")

    async def _watch_writer(self) -> None:
        """Every second (or when a search found no writer), take the slot's writer lock if no
        process holds it, and become the writer."""
        while not self._stopping and self.follower is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._take_over.wait(), 1.0)
            self._take_over.clear()
            if not self._stopping:
                await self._try_taking_over()

    async def _try_taking_over(self) -> bool:
        """Become the slot's writer if no process holds its lock; whether this process writes it."""
        async with self._lock:
            if self.follower is None:
                return True  # taken over already
            if self._stopping or writer_held(self.directory):
                return False
            assert self.index is not None
            try:
                await asyncio.to_thread(self.index.take_writer)
            except WriterLocked:
                return False
            except Exception as exc:  # tried again in a second
                log.warning("full-text index %s: taking the writer's place failed: %s", self.directory, exc)
                return False
            log.info("full-text index %s: its writer is gone; this process writes it now", self.directory)
            self._become_writer()
            return True

    def _become_writer(self) -> None:
        """Carry on where the last writer stopped: from the watermark file (or a rebuild)."""
        follower, self.follower = self.follower, None
        if follower is not None:
            follower.close()  # searches waiting on the old writer search what the index holds
        saved = self._read_watermark()
        if saved is None:
            self._needs_rebuild = True
        else:
            self.watermark = self._saved = saved
        self._done_above.clear()
        self._gaps.clear()
        self._announce()
        self.passes.hurry()
        self._task = asyncio.create_task(self._loop(), name="indexer")

    def request_stop(self) -> None:
        """Ask the loop to stop after the pass in progress and a last one (`close()` waits)."""
        self._stopping = True
        self._stop.set()
        self._take_over.set()
        self.passes.hurry()

    async def close(self) -> None:
        """Stop after the pass in progress and a last one that commits what is left (a pass's
        thread cannot be interrupted; both get 30 s), then let the writer finish its merges and
        release its lock."""
        self.request_stop()
        if self._follow_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow_task
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 30)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        if self.follower is not None:
            self.follower.close()
            self.follower = None
        if self.announcer is not None:  # before the lock goes: a reader may take it at once
            self.announcer.close()
        async with self._lock:
            if self.index is not None:
                await asyncio.to_thread(self.index.close)
                self.index = None

    # --- the watermark file ----------------------------------------------------------------------

    def _read_watermark(self) -> int | None:
        path = self.directory / WATERMARK_FILE
        try:
            value = json.loads(path.read_text())["seq"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return int(value) if isinstance(value, int) and value >= 0 else None

    def _write_watermark(self, seq: int) -> None:
        path = self.directory / WATERMARK_FILE
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps({"seq": seq, "written_at": time.time()}))
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):  # a partly written file must not fill the disk further
                tmp.unlink()
            raise

    async def _save_watermark(self) -> None:
        """Write the watermark file if it lags; the watermark itself is already committed."""
        seq = self.watermark
        if seq != self._saved:
            await asyncio.to_thread(self._write_watermark, seq)
            self._saved = seq

    # --- status ----------------------------------------------------------------------------------

    def lag(self, head: int) -> int:
        """Change rows up to `head` not yet applied to the index."""
        if self._needs_rebuild:
            return head
        applied = sum(1 for seq in self._done_above if self.watermark < seq <= head)
        return max(0, head - self.watermark - applied)

    def _followed(self) -> None:
        """A reader's watermark: the writer's, from its file (the last known while unreadable)."""
        if self.follower is not None:
            self.watermark = self._read_watermark() or self.watermark

    async def position(self) -> IndexPosition:
        head = await change_log.head(self.pool, self.corpus)
        self._followed()
        return IndexPosition(self.watermark, head, self.lag(head))

    async def status(self) -> WorkerStatus:
        head = await change_log.head(self.pool, self.corpus)
        self._followed()
        status = self.health.status(self.lag(head))
        if self.follower is not None and self.follower.failing is not None:
            # the writer said it is failing: its reason, as its own /healthz gives it
            return dataclasses.replace(status, healthy=False, reason=self.follower.failing)
        if self._task is not None and self._task.done() and not self._stopping:
            # the loop ended on something it does not catch: nothing will catch the index up
            status = dataclasses.replace(status, healthy=False, reason="the indexer has stopped")
        return status

    def _doing(self) -> str:
        return "rebuilding the index" if self._needs_rebuild else "indexing changes"

    # --- passes ----------------------------------------------------------------------------------

    async def rebuild(self) -> int:
        """Index every entry afresh from PostgreSQL in one commit; returns how many. On failure
        the index keeps its last commit and a rebuild is still owed."""
        async with self._lock:
            count = await self._rebuild()
        assert self.index is not None
        log.info(
            "full-text index rebuilt",
            extra={"corpus": self.corpus.name, "documents": count, "index": str(self.index.directory)},
        )
        return count

    async def _rebuild(self) -> int:
        """`rebuild()` with the lock held."""
        assert self.index is not None
        index = self.index
        self._needs_rebuild = True
        head = await change_log.head(self.pool, self.corpus)
        # the log may hold no row at or above the prune mark
        pruned = await change_log.pruned_up_to(self.pool, self.corpus)
        count = 0
        try:
            await asyncio.to_thread(index.clear)
            async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
                batch: list[IndexedEntry] = []
                async for entry in change_log.every_row(conn, self.corpus, BATCH):
                    batch.append(entry)
                    if len(batch) >= BATCH:
                        await asyncio.to_thread(index.upsert, batch)
                        count += len(batch)
                        batch = []
                if batch:
                    await asyncio.to_thread(index.upsert, batch)
                    count += len(batch)
            await asyncio.to_thread(index.commit)
            self.commits += 1
            await asyncio.to_thread(index.verify_count, count)
        except BaseException:
            await asyncio.to_thread(index.rollback)
            raise
        # the rows up to the prune mark are gone, and older than the retention: in the snapshot
        self.watermark = max(0, head - REBUILD_REWIND, pruned)
        self._needs_rebuild = False
        self._done_above.clear()
        self._gaps.clear()
        await self._save_watermark()
        return count

    async def catch_up(self) -> int:
        """Run passes until nothing is left; returns how many change rows were applied."""
        total = 0
        while True:
            if self._needs_rebuild:
                await self.rebuild()
            applied, more = await self._pass()
            total += applied
            if not more:
                return total

    async def wait_fresh(self, timeout: float = 5.0, head: int | None = None) -> bool:  # noqa: ASYNC109
        """Return once everything committed before this call is in the index (True), or at once
        when the indexer is failing (False: the index holds what it holds, and `/healthz` says
        so; waiting for a pass that cannot succeed would only make every search slow). With
        `head` (the change log's head read when the request began, as `holds` takes it), the
        pass in progress suffices when it ends holding it: no need for one more."""
        if self.follower is not None:
            started = time.monotonic()
            try:
                return await self.follower.wait_fresh(timeout, head)
            except NoWriter:  # none lives: take its place, or search what the index holds
                if not await self._try_taking_over():
                    return False
                timeout = max(0.0, timeout - (time.monotonic() - started))
        if not self.health.healthy and not self.health.outage:
            return False
        await self.passes.wait_next(timeout, None if head is None else functools.partial(self.holds, head))
        return True

    def holds(self, head: int) -> bool:
        """Whether the index already holds every change-log row up to `head` (the log's head
        read when a request began: then it holds every change committed before the request, and
        the search need not wait for a pass, `wait_fresh`). False while it is failing or owes a
        rebuild, and past the watermark: a gap below it may be a transaction still committing."""
        if self.follower is not None:
            return self.follower.holds(head)
        return (
            self.index is not None
            and self.health.healthy
            and not self._needs_rebuild
            and self.watermark >= head
        )

    def notify(self) -> None:
        """A local write committed: index it soon."""
        if self.follower is not None:
            self.follower.poke()
        self.passes.wake.set()

    async def _sync(self) -> bool:
        """One step: the rebuild still owed, or one pass. Returns whether more is waiting."""
        if self._needs_rebuild:
            await self.rebuild()
            return True
        _, more = await self._pass()
        return more

    def _idle_timeout(self) -> float | None:
        """How long the loop may sleep unless woken: until the oldest young gap expires while
        the feed listens (None: no gap, sleep until woken), else the poll interval."""
        if self.feed is None or not self.feed.listening:
            return self.poll_interval
        if not self._gaps:
            return None
        expires = min(self._gaps.values()) + self.gap_timeout
        return max(0.01, expires - time.monotonic() + 0.01)

    async def _loop(self, delay: float = 0.0) -> None:
        await self._passes(delay)
        await self._last_pass()

    async def _last_pass(self) -> None:
        """At shut-down (the server's requests are finished by then): apply and commit what
        committed since the last pass, and save the watermark, so the next start has nothing of
        it to replay. Not while failing or owing a rebuild (the next start does that)."""
        if not self.health.healthy or self._needs_rebuild or self.index is None:
            return
        try:
            while await self._sync():
                pass
        except Exception as exc:  # replayed at the next start, as after a crash
            log.warning("full-text index: the last pass at shut-down failed: %s", describe(exc)[0])

    async def _passes(self, delay: float) -> None:
        while not self._stopping:
            if delay:
                # backing off: a write or a search must not bring the retry forward
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.passes.wake.wait(), self._idle_timeout())
                await self._gather_writes()
            self.passes.wake.clear()
            self.passes.urgent.clear()
            if self._stopping:
                return
            try:
                more = await self._sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self.health.failed(exc, self._doing())
                if self.announcer is not None:
                    self.announcer.failed(self.health.reason or "failing")
                continue
            delay = 0.0
            self.health.succeeded()
            if more:
                self.passes.hurry()
            elif time.monotonic() - self._pruned_at >= self.prune_interval:
                self._pruned_at = time.monotonic()
                try:
                    self.pruned_total += await self.prune()
                except Exception as exc:  # the log only grows meanwhile: not the index's failure
                    log.warning("pruning %s failed: %s", self.corpus.changes, exc)

    async def _gather_writes(self) -> None:
        """Put a pass off until `commit_interval` after the last commit, unless it is urgent (a
        search waits for it, more rows are waiting) or the loop is stopping: the writes
        committed meanwhile go into one commit (see the rules)."""
        wait = self._committed_at + self.commit_interval - time.monotonic()
        if wait <= 0 or self.passes.urgent.is_set() or self._stopping:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.passes.urgent.wait(), wait)

    # --- pruning the change log ---------------------------------------------------------------------

    async def prune(self) -> int:
        """Delete the change rows older than the retention (oldest first, in batches), raising the
        prune mark in the same transaction; returns how many were deleted."""
        total = 0
        while True:
            async with self.pool.acquire() as conn, conn.transaction():
                # the oldest rows by seq, up to (not including) the first one young enough to keep
                top, deleted = await change_log.prune_oldest(conn, self.corpus, PRUNE_BATCH, self.retention)
            if top is None:
                return total
            total += deleted
            if deleted < PRUNE_BATCH:
                if total:
                    log.info(
                        "change log pruned",
                        extra={"changes": self.corpus.changes, "rows": total, "up_to": top},
                    )
                return total

    async def _pass(self) -> tuple[int, bool]:
        assert self.index is not None
        index = self.index
        async with self._lock:
            started = self.passes.begin()
            self._pass_started = time.monotonic()
            try:
                # the prune mark comes with the rows
                pruned, rows = await change_log.changes_past(self.pool, self.corpus, self.watermark, BATCH)
                if pruned > self.watermark:
                    # rows past the watermark may have been pruned: only a rebuild is complete.
                    # It reads a snapshot taken within this pass, so the pass still holds
                    # everything committed before it began (read-your-writes).
                    log.warning(
                        "the change log was pruned past this index's watermark; rebuilding it",
                        extra={"corpus": self.corpus.name, "watermark": self.watermark},
                    )
                    await self._rebuild()
                    self._announce_done()
                    return 0, True
                fresh = [row for row in rows if row.seq not in self._done_above]
                if fresh:
                    ids = list({row.entry_id for row in fresh})
                    upserts = await change_log.current(self.pool, self.corpus, ids)
                    present = {entry.entry_id for entry in upserts}
                    deletes = [entry_id for entry_id in ids if entry_id not in present]
                    # raises (rolled back) unless the index now holds exactly this
                    await asyncio.to_thread(index.apply, deletes, upserts)
                    self.commits += 1
                    self._committed_at = time.monotonic()
                # only now, with the rows committed in the index, may the watermark pass them
                self._advance([row.seq for row in rows])
                self._announce_done()
            finally:
                await self.passes.end(started)
            # its file once the searches waiting for the pass are answered: a file that lags only
            # replays rows at the next start (see the rules)
            await self._save_watermark()
            return len(fresh), len(rows) == BATCH

    def _announce_done(self) -> None:
        """Tell the slot's readers that the pass begun at `_pass_started` is committed."""
        if self.announcer is None:
            return
        if not self.announcer.open:
            self.announcer.listen()  # the last writer was still letting go of the name
        self.announcer.done(self._pass_started, f"{os.getpid()}.{self.commits}", self.watermark)

    def _advance(self, seen: list[int]) -> bool:
        """Move the watermark over the contiguous applied rows and expired gaps."""
        now = time.monotonic()
        self._done_above.update(seen)
        top = max(seen, default=self.watermark)
        for seq in range(self.watermark + 1, top):
            if seq not in self._done_above:
                self._gaps.setdefault(seq, now)
        before = self.watermark
        while True:
            nxt = self.watermark + 1
            if nxt in self._done_above:
                self._done_above.discard(nxt)
            elif nxt in self._gaps and now - self._gaps[nxt] > self.gap_timeout:
                del self._gaps[nxt]
            else:
                break
            self.watermark = nxt
        for seq in [s for s in self._gaps if s <= self.watermark]:
            del self._gaps[seq]
        return self.watermark != before
