"""The embedding worker: gives every row of each corpus whose vector is missing or older than
its text a vector of the local model, in large batches, in the background (`EmbeddingWorker`);
and, for a search, the few rows of its scopes still without one, at once (`embed_pending`).

Neither path ever marks as done what it did not do. A pass claims its rows inside a transaction
with a lease (`repo.claim_unembedded`: several processes and lanes share the work, no write
waits for the model) and writes their vectors in it: a model or database error rolls it back and
the rows stay stale, to be retried with backoff (`Health`); a vector is stored only if its row is
still at the version it was computed from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import asyncpg
import numpy as np

from catalog.search import repo
from catalog.search.corpus import ENTRIES, Corpus
from catalog.search.embedder import Embedder
from catalog.search.embedding import embed_rows, row_vector, submit_rows
from catalog.search.health import Health
from catalog.search.passes import ChangeFeed, Passes

log = logging.getLogger("catalog.search")


EMBED_BATCH = 256


# two passes at once: while one writes its vectors (PostgreSQL maintains the HNSW graph), the
# other keeps the model busy
EMBED_LANES = 2


# rows of the searched scopes still without their vector that a search embeds itself, at most
# (past it the semantic leg is `degraded`)
ON_DEMAND = 64


# how long a stopping server lets an embedding pass finish before abandoning it (a pass of 256
# long entries can take many seconds on a small machine; an abandoned one is redone later)
EMBED_STOP_GRACE = 2.0


# how often the worker looks for work while the change feed is not listening (while it listens,
# the worker sleeps until a change commits, a local write or a search wakes it)
EMBED_POLL = 1.0


# how long an idle worker waits once woken before its pass: a write wakes it twice (its own
# process at once, then the change feed's notification of its commit), and the second wake would
# be a pass that finds nothing to claim (a claim statement per lane and corpus, for nothing);
# waiting this long makes them one pass. A worker woken while it works (more writes came) goes
# on at once. No search waits for the worker (it embeds the rows it needs itself)
EMBED_GATHER = 0.01


# how long an embedding pass's claim on its rows lasts: a process that dies mid-pass leaves them
# to the others after this (a pass of 256 long texts takes seconds)
EMBED_LEASE = 60.0


# how long a process counts a scope it found large enough for the whole table's HNSW graph as
# known (`LargeScopes`); its name is then dropped by a later vector pass (of the worker or a search)
LARGE_SCOPE_KEPT = 600.0


class LargeScopes:
    """The scopes this process found holding at least `repo.GRAPH_MIN` entries as it stored their
    vectors, (store id, scope), for LARGE_SCOPE_KEPT seconds (the names past that are dropped by
    the first `add`, made after every vector pass, a tenth of that or more after the last drop):
    the vectors' statement counts only the other scopes of its batch, and counts a scope again
    once it is no longer known. A scope that shrinks meanwhile still puts its vectors in the
    graph (which costs writes, never a result). Bounded: emptied when full."""

    MAX_KEPT = 100_000

    def __init__(self, kept: float = LARGE_SCOPE_KEPT) -> None:
        self.kept = kept
        self._found: dict[tuple[str, str], float] = {}
        self._pruned = time.monotonic()

    def of(self, rows: Sequence[asyncpg.Record]) -> list[tuple[str, str]]:
        """The scopes of these rows (each with `store_id` and `scope`) known large."""
        now = time.monotonic()
        scopes = {(row["store_id"], row["scope"]) for row in rows}
        return sorted(key for key in scopes if now - self._found.get(key, -math.inf) < self.kept)

    def add(self, found: Sequence[tuple[str, str]]) -> None:
        now = time.monotonic()
        if now - self._pruned > self.kept / 10:  # forget the names kept too long, now and then
            self._found = {key: at for key, at in self._found.items() if now - at < self.kept}
            self._pruned = now
        if len(self._found) + len(found) > self.MAX_KEPT:
            self._found.clear()
        for key in found:
            self._found[key] = now


@dataclass
class EmbeddingWorker:
    pool: asyncpg.Pool
    embedder: Embedder
    corpora: tuple[Corpus, ...]
    passes: Passes = field(default_factory=Passes)
    health: Health = field(default_factory=lambda: Health("embeddings", log))
    embedded_total: int = 0  # vectors this process's passes have written
    embedded_on_demand: int = 0  # vectors searches have computed and stored themselves
    feed: ChangeFeed | None = None  # while it listens, no polling
    _task: asyncio.Task[None] | None = None
    # the rows each corpus's passes have claimed and not yet let go (released at stop if a
    # pass cut short could not: else they wait for this process's sessions to end)
    _claimed: dict[Corpus, set[str]] = field(default_factory=dict)
    _stopping: bool = False
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    # rows a search is embedding now, by (corpus, id, version): concurrent searches share the work
    _embedding_now: dict[tuple[str, str, int], asyncio.Future[bool]] = field(default_factory=dict)
    # rows this process's passes have given the model, by (corpus, id, version): the futures of
    # their passages' vectors, which a search needing one of those rows waits for instead of
    # running the model on the row again (`embed_pending`)
    _queued: dict[tuple[str, str, int], list[asyncio.Future[np.ndarray]]] = field(default_factory=dict)
    # the corpora the wakes since the last pass began named: that pass claims in those only
    _due: set[Corpus] = field(default_factory=set)
    # when the claims other processes hold on a corpus's stale rows run out (the loop's time)
    _claims_end: dict[Corpus, float] = field(default_factory=dict)
    # the scopes found large enough for the whole table's HNSW graph (counted no more)
    _large: LargeScopes = field(default_factory=LargeScopes)

    def start(self, feed: ChangeFeed | None) -> None:
        self.feed = feed
        self._task = asyncio.create_task(self._loop(), name="embedding-worker")
        self.wake()

    def wake(self, corpus: Corpus | None = None) -> None:
        """A write to `corpus` committed (None: to any of them, or look at every corpus): the
        next pass claims rows in the corpora named since the last one began."""
        self._due.update(self.corpora if corpus is None else [c for c in self.corpora if c is corpus])
        self.passes.wake.set()

    @property
    def stopped(self) -> bool:
        """The worker ended while it was not asked to (a fault: `/healthz` says so)."""
        return self._task is not None and self._task.done() and not self._stopping

    def request_stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self.passes.wake.set()

    async def stop(self) -> None:
        """Let the pass under way finish (at most EMBED_STOP_GRACE), then let go of the claims."""
        self.request_stop()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, EMBED_STOP_GRACE)
            except TimeoutError:  # cancelled mid-pass: its transaction rolls back, the rows stay stale
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self._release_claims()

    async def embed_pass(
        self, limit: int = EMBED_BATCH, corpus: Corpus = ENTRIES, claimed: Callable[[int], None] | None = None
    ) -> int:
        """Embed up to `limit` rows of the corpus whose vector is missing or older than their
        text; how many (`claimed` is told how many it claimed, before the model runs)."""
        held = self._claimed.setdefault(corpus, set())
        async with self.pool.acquire() as conn:
            rows = await repo.claim_unembedded(conn, limit, corpus, EMBED_LEASE)
            if claimed is not None:
                claimed(len(rows))
            if not rows:
                return 0
            ids = [r["id"] for r in rows]
            held.update(ids)
            try:
                # a model error raises here: nothing is stored, the rows stay stale
                vectors = await self._embed_claimed(rows, corpus)
                made = [(r["id"], r["version"], v, n) for r, (v, n) in zip(rows, vectors, strict=True)]
                # the rows changed meanwhile are left stale, their claims let go in the same statement
                large = await repo.set_embeddings(
                    conn, made, corpus, self.embedder.model_id, release=ids, large=self._large.of(rows)
                )
                self._large.add(large)
            except BaseException:
                # the model or the statement failed: the rows are free again; if this process
                # dies first, they are free once its session is gone
                await repo.release_claims(conn, ids, corpus)
                raise
            finally:
                held.difference_update(ids)
        self.embedded_total += len(rows)
        return len(rows)

    async def _embed_claimed(
        self, rows: Sequence[asyncpg.Record], corpus: Corpus
    ) -> list[tuple[np.ndarray, int]]:
        """The vectors of a pass's rows, in the model's background queue; meanwhile each row's
        futures are kept (`_queued`), so that a search needing one of them shares its run."""
        texts = [(r["contents"], r["description"]) for r in rows]
        if not self.embedder.started:  # a command-line tool's
            return await embed_rows(self.embedder, texts, background=True)
        shared = submit_rows(self.embedder, texts, background=True)
        keys = [(corpus.name, r["id"], r["version"]) for r in rows]
        self._queued.update(zip(keys, shared, strict=True))
        try:
            await asyncio.gather(*(future for futures in shared for future in futures))
        finally:
            for key in keys:
                self._queued.pop(key, None)
        return [row_vector([future.result() for future in futures]) for futures in shared]

    async def _release_claims(self) -> None:
        """At stop, once no pass runs: let go of the claims a pass cut short left (its release
        failed with the connection it was cancelled on), so another process embeds those rows
        at once rather than when this one's sessions end."""
        for corpus, ids in self._claimed.items():
            if not ids:
                continue
            try:
                await repo.release_claims(self.pool, list(ids), corpus)
            except Exception as exc:  # they are free anyway once the pool's sessions close
                log.warning("embedding claims not released at shut-down: %s", exc)
            else:
                ids.clear()

    async def _look_at_claims(self, corpora: Sequence[Corpus]) -> None:
        """Note when the claims other processes hold (or held when they died) on these corpora's
        stale rows run out: the worker looks at them again then."""
        now = asyncio.get_running_loop().time()
        for corpus in corpora:
            left = await repo.next_claim_expiry(self.pool, corpus)
            if left is None:
                self._claims_end.pop(corpus, None)
            else:
                self._claims_end[corpus] = now + left

    async def _loop(self) -> None:
        delay = 0.0
        loop = asyncio.get_running_loop()
        while not self._stopping:
            retrying = bool(delay)
            if delay:
                # backing off: a write or a search must not bring the retry forward
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
            else:
                idle = None if self.feed is not None and self.feed.listening else EMBED_POLL
                if self._claims_end:  # look again when those claims run out
                    idle = min(idle or math.inf, max(min(self._claims_end.values()) - loop.time(), 0.0) + 0.1)
                if not self.passes.wake.is_set():  # idle: a wake that comes has a twin (EMBED_GATHER)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.passes.wake.wait(), idle)
                    if self.passes.wake.is_set() and not self._stopping:
                        await asyncio.sleep(EMBED_GATHER)
            named, self._due = self._due, set()
            self.passes.wake.clear()
            if self._stopping:
                return
            # a write's pass claims in its own corpus; a poll, a retry, claims run out: in all
            due = self.corpora if retrying or not named else tuple(c for c in self.corpora if c in named)
            number = self.passes.begin()
            try:
                # every lane runs to its end before the next pass (none is left behind running)
                drains = (self._drain(corpus) for corpus in due)
                outcomes = await asyncio.gather(*drains, return_exceptions=True)
                failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
                if isinstance(failure, asyncio.CancelledError):
                    raise failure
                if failure is not None:
                    delay = self.health.failed(failure, "embedding entries")
                else:
                    delay = 0.0
                    self.health.succeeded()
                    try:
                        await self._look_at_claims(due)
                    except Exception as exc:  # a failed pass like any other: back off
                        delay = self.health.failed(exc, "embedding entries")
            finally:
                await self.passes.end(number)

    async def _drain(self, corpus: Corpus) -> None:
        """Embed the corpus's stale rows until a claim takes less than a full batch. One lane
        claims first; a second (up to EMBED_LANES) starts only when a claim took a full batch (a
        backlog), so a write's pass is one claim, not one per lane. Raises a lane's failure once
        every lane has ended."""
        lanes: list[asyncio.Future[None]] = []

        def claimed(count: int) -> None:
            if count >= EMBED_BATCH and len(lanes) < EMBED_LANES and not self._stopping:
                lanes.append(asyncio.ensure_future(self._lane(corpus, claimed)))

        lanes.append(asyncio.ensure_future(self._lane(corpus, claimed)))
        try:
            while not all(lane.done() for lane in lanes):  # a lane started meanwhile is waited for too
                await asyncio.wait(lanes)
        finally:
            for lane in lanes:
                lane.cancel()
            outcomes = await asyncio.gather(*lanes, return_exceptions=True)
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:
            raise failure

    async def _lane(self, corpus: Corpus, claimed: Callable[[int], None]) -> None:
        while True:
            done = await self.embed_pass(EMBED_BATCH, corpus, claimed)
            if done:  # healthy again once a batch is stored, not only once a long backlog is drained
                self.health.succeeded()
            if done < EMBED_BATCH or self._stopping:
                return

    async def embed_pending(self, store_id: str, scopes: Sequence[str], corpus: Corpus, wait: float) -> bool:
        """Give the rows of these scopes committed before the call that lack their vector one
        now, ahead of the worker's backlog, and store it (True once none is missing). False when
        more than `ON_DEMAND` are missing (the newest writes of a bulk load: the passes embed
        them in their batches), when the model fails, or when it took longer than `wait`
        seconds: the search then ranks the vectors there are. A row another search is embedding
        is waited for, not embedded twice."""
        rows = await repo.unembedded_in(self.pool, store_id, scopes, ON_DEMAND + 1, corpus)
        if not rows:
            return True
        mine: list[asyncpg.Record] = []
        waits: list[asyncio.Future[bool]] = []
        queued: dict[int, list[asyncio.Future[np.ndarray]]] = {}  # mine's index → a pass's futures
        loop = asyncio.get_running_loop()
        for row in rows[:ON_DEMAND]:
            key = (corpus.name, row["id"], row["version"])
            if key in self._embedding_now:
                waits.append(self._embedding_now[key])
                continue
            if key in self._queued:  # a pass gave the model this row: its run is shared, sooner
                queued[len(mine)] = self._queued[key]
            mine.append(row)
        self.embedder.promote(future for futures in queued.values() for future in futures)
        done: asyncio.Future[bool] = loop.create_future()
        keys = [(corpus.name, r["id"], r["version"]) for r in mine]
        for key in keys:
            self._embedding_now[key] = done
        stored = False
        try:
            stored = await asyncio.wait_for(self._embed_rows(mine, corpus, queued), wait) if mine else True
        except Exception as exc:  # a model or database failure, or too slow: rank what there is
            log.warning("rows without vectors could not be embedded by the search: %s", exc)
        finally:
            for key in keys:
                self._embedding_now.pop(key, None)
            done.set_result(stored)
        others = True
        if waits:
            finished, _ = await asyncio.wait(set(waits), timeout=wait)
            others = len(finished) == len(set(waits)) and all(f.result() for f in finished)
        return stored and others and len(rows) <= ON_DEMAND

    async def _embed_rows(
        self,
        rows: Sequence[asyncpg.Record],
        corpus: Corpus,
        queued: Mapping[int, list[asyncio.Future[np.ndarray]]],
    ) -> bool:
        """Give these rows their vectors and store them: those a pass gave the model (`queued`,
        by index) from its run, the others (and those whose run failed or was cut short) as
        urgent texts, ahead of the passes' batches."""
        texts = [(r["contents"], r["description"]) for r in rows]
        own = [i for i in range(len(rows)) if i not in queued]

        async def from_pass(futures: list[asyncio.Future[np.ndarray]]) -> tuple[np.ndarray, int] | None:
            await asyncio.wait(futures)  # never cancels them: they are the pass's
            if any(f.cancelled() or f.exception() is not None for f in futures):
                return None
            return row_vector([f.result() for f in futures])

        made_here, *shared = await asyncio.gather(
            embed_rows(self.embedder, [texts[i] for i in own]), *(from_pass(f) for f in queued.values())
        )
        vectors = dict(zip(own, made_here, strict=True))
        vectors.update((i, v) for i, v in zip(queued, shared, strict=True) if v is not None)
        failed = [i for i in range(len(rows)) if i not in vectors]
        if failed:
            again = await embed_rows(self.embedder, [texts[i] for i in failed])
            vectors.update(zip(failed, again, strict=True))
        made = [(r["id"], r["version"], *vectors[i]) for i, r in enumerate(rows)]
        large = await repo.set_embeddings(
            self.pool, made, corpus, self.embedder.model_id, large=self._large.of(rows)
        )
        self._large.add(large)
        self.embedded_on_demand += len(made)
        return True
