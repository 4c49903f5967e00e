"""Start-up and shut-down: the database (embedded or external), migrations, bootstrap, the pool.

Order matters: migrations create the `vector` extension before the pool registers its codec.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg

from catalog import llm
from catalog.access import Access, Authorizer, Node, SecurableType
from catalog.auth import TokenVerifier
from catalog.context import Context
from catalog.db import DatabaseMonitor, EmbeddedPostgres, apply_migrations, create_pool
from catalog.db.databases import create_database
from catalog.dialects.pipelines import PipelineWorker
from catalog.entries.expiry import ExpirySweeper
from catalog.governance.namespace import bootstrap, get_metastore
from catalog.governance.principals import SeenPrincipals
from catalog.recorder.writer import AuditWriter, early_unlock_supported, record_system_events
from catalog.search import SearchEngine
from catalog.search.embedder import (
    DIMENSIONS,
    Embedder,
    Encoder,
    ModelError,
    ModelFiles,
    OnnxEncoder,
    default_lanes,
)
from catalog.settings import Settings
from catalog.web.limits import RateLimiter

log = logging.getLogger("catalog.runtime")

# what an operator reads when the database has no connection left for a starting server: several
# `catalog serve` processes on one machine each reckon the connections of their own workers only
NO_CONNECTION_LEFT = (
    "the database refused this server a connection: it has none left (its max_connections). "
    "Several servers on one machine share that limit: serve them as one `catalog serve --workers N`, "
    "whose connections are reckoned together (an embedded PostgreSQL is made room for them), or "
    "raise max_connections for every worker of every server, or put pgbouncer in front "
    "(docs: operations/cluster.md)"
)

EMBEDDED_DATABASE = "catalog"


async def ensure_database(server_url: str, database: str) -> str:
    """Create `database` on the embedded server if needed; returns its URL."""
    await create_database(server_url, database)
    return with_database(server_url, database)


def with_database(url: str, database: str) -> str:
    """Swap the database of a URL (the embedded server's: `postgresql://user:@/db?host=...`)."""
    head, _, query = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{database}" + (f"?{query}" if query else "")


async def prepare_database(url: str, admin: str) -> list[dict[str, object]]:
    """Migrate and bootstrap; returns the system events to audit."""
    events: list[dict[str, object]] = []
    conn = await asyncpg.connect(url)
    try:
        applied = await apply_migrations(conn)
        for migration in applied:
            log.info("migration applied", extra={"version": migration.version, "migration": migration.name})
            events.append(
                {
                    "action_name": "system.migrate",
                    "request_params": {"version": migration.version, "name": migration.name},
                }
            )
        if await bootstrap(conn, admin):
            log.info("bootstrap: metastore, main and main.default created", extra={"admin": admin})
            events.append({"action_name": "system.bootstrap", "request_params": {"admin": admin}})
    finally:
        await conn.close()
    return events


def load_encoder(settings: Settings) -> Encoder:
    if settings.embedding_model is not None and settings.embedding_tokenizer is not None:
        files = ModelFiles(settings.embedding_model, settings.embedding_tokenizer, None, None)
    else:
        files = ModelFiles.default()
    encoder = OnnxEncoder(files)
    if encoder.dimensions != DIMENSIONS:
        raise ModelError(
            f"the embedding model gives {encoder.dimensions} dimensions; the catalog stores {DIMENSIONS}"
        )
    return encoder


@dataclass(frozen=True)
class Worker:
    """This process is worker `number` of `workers` of one `catalog serve --workers N`
    (catalog.cli.workers): they share the full-text index slot `index_slot` (one writes it, the
    others read it: catalog.search.sharing) and the machine's cores (the model's lanes are
    shared out among them)."""

    number: int
    workers: int
    index_slot: int


async def start_search(
    settings: Settings, pool: asyncpg.Pool, encoder: Encoder | None, worker: Worker | None = None
) -> SearchEngine:
    if encoder is None:
        encoder = await asyncio.to_thread(load_encoder, settings)
    engine = SearchEngine.create(
        pool,
        Embedder(encoder, lanes=default_lanes(worker.workers) if worker is not None else None),
        settings.index_dir,
        scope_index_min=settings.scope_index_min,
        scope_index_interval=settings.scope_index_interval,
        shared_slot=worker.index_slot if worker is not None else None,
    )
    await engine.start()
    return engine


async def database_url_for_tools(settings: Settings) -> tuple[str, Callable[[], Awaitable[None]]]:
    """The database URL for a command-line tool, and how to let go of it afterwards: the server's
    PostgreSQL when one runs on the data dir (never a second one), else the embedded one started
    for the tool and stopped after."""
    from catalog.db import running_url

    async def nothing() -> None:
        return None

    if settings.database_url:
        return settings.database_url, nothing
    url = running_url(settings.postgres_dir, EMBEDDED_DATABASE)
    if url is not None:
        return url, nothing
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    embedded = EmbeddedPostgres(settings.postgres_dir)
    url = await ensure_database(await asyncio.to_thread(embedded.start), EMBEDDED_DATABASE)

    async def stop() -> None:
        await asyncio.to_thread(embedded.stop)

    return url, stop


@dataclass
class Runtime:
    settings: Settings
    context: Context
    verifier: TokenVerifier
    embedded: EmbeddedPostgres | None
    audit: AuditWriter
    db: DatabaseMonitor
    limiter: RateLimiter | None = None
    principals: SeenPrincipals | None = None  # records token subjects (the auth middleware tells it)
    pipelines: PipelineWorker | None = None  # does memory pipelines' runs (catalog.dialects.pipelines.worker)
    expiry: ExpirySweeper | None = None  # deletes expired entries in the background

    @classmethod
    async def start(
        cls, settings: Settings, encoder: Encoder | None = None, place: Worker | None = None
    ) -> Runtime:
        """Start everything; `place`: this process is one of the workers of `catalog serve
        --workers N`."""
        began = mark = time.monotonic()
        phases: dict[str, float] = {}  # seconds each start-up step took, for the "started" line

        def phase(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            phases[f"{name}_s"], mark = round(now - mark, 2), now

        embedded = None
        url = settings.database_url
        try:
            if url is None:
                embedded = EmbeddedPostgres(settings.postgres_dir)
                server_url = await asyncio.to_thread(embedded.start)
                url = await ensure_database(server_url, EMBEDDED_DATABASE)
            phase("postgres")
            verifier = TokenVerifier(settings)
            system_events = await prepare_database(url, settings.admin)
            pool = await create_pool(url)
            audit = AuditWriter(await create_pool(url, min_size=1, max_size=1))  # its own connection
            async with audit.pool.acquire() as conn:
                audit.early_unlock = await early_unlock_supported(conn)
            await record_system_events(audit.pool, system_events)
            audit.start()
            monitor = DatabaseMonitor(url, [pool, audit.pool], embedded)
            phase("migrations")
            row = await get_metastore(pool)
            metastore = Node(SecurableType.METASTORE, str(row["id"]), str(row["id"]), row["admin"])
            authorizer = Authorizer(row["admin"], metastore, pool)
            await authorizer.load()
            phase("policy")
            search = await start_search(settings, pool, encoder, place)
            phase("search")
        except BaseException as exc:
            if isinstance(exc, asyncpg.TooManyConnectionsError):
                log.error(NO_CONNECTION_LEFT, extra={"error": str(exc)})
            if embedded is not None:
                await asyncio.to_thread(embedded.stop)
            raise
        context = Context(
            settings=settings,
            pool=pool,
            access=Access(pool, authorizer, metastore),
            search=search,
            llm=llm.configured(settings),
            expiry_wake=(expiry := ExpirySweeper(pool)).wake,
        )
        monitor.start()
        expiry.start()
        limiter = RateLimiter(settings.rate_limit, settings.burst) if settings.rate_limit > 0 else None
        worker = PipelineWorker(context, audit, interval=settings.pipeline_interval)
        worker.start()
        log.info("started", extra={"seconds": round(time.monotonic() - began, 2), **phases})
        return cls(
            settings,
            context,
            verifier,
            embedded,
            audit,
            monitor,
            limiter,
            SeenPrincipals(pool),
            worker,
            expiry,
        )

    async def close(self) -> None:
        """Stop the background work, then let go of the database: the pipeline worker first (it
        lets its runs' leases go, and audits through the writer), the expiry sweeper, search (a
        last full-text index commit, the embedding claims let go), the audit writer (it appends
        what is waiting), the pools, and the embedded PostgreSQL if this process started it
        (another process using it keeps it running). A step that fails is logged and the next
        ones still run."""
        began = time.monotonic()
        steps: list[tuple[str, Callable[[], Awaitable[None]] | None]] = [
            ("pipelines", self.pipelines.close if self.pipelines is not None else None),
            ("expiry", self.expiry.close if self.expiry is not None else None),
            ("search", self.context.search.close if self.context.search is not None else None),
            ("database monitor", self.db.close),
            ("audit", self.audit.close),
            ("llm", self.context.llm.close if self.context.llm is not None else None),
            ("pool", self.context.pool.close),
        ]
        if self.embedded is not None:
            embedded = self.embedded

            async def stop_embedded() -> None:
                await asyncio.to_thread(embedded.stop)

            steps.append(("embedded postgres", stop_embedded))
        failed = []
        phases: dict[str, float] = {}  # seconds each step took, for the "stopped" line
        for name, step in steps:
            if step is None:
                continue
            mark = time.monotonic()
            try:
                await step()
            except Exception:
                failed.append(name)
                log.exception("stopping %s failed", name, extra={"step": name})
            phases[f"{name.replace(' ', '_')}_s"] = round(time.monotonic() - mark, 2)
        extra: dict[str, object] = {"seconds": round(time.monotonic() - began, 2), **phases}
        if failed:
            extra["failed"] = failed
        log.info("stopped", extra=extra)
