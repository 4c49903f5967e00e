"""The `catalog` command: serve, token, db-url, reindex, upgrade and audit verify on this machine's
data dir; catalogs, schemas, stores, grants, entries and audit events of a running server (the remote
commands, in `catalog.client.cli`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from catalog.client import cli as remote
from catalog.machine import Limits, limits
from catalog.settings import WORKER_MEMORY, Settings, SettingsError


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "host", None):
        overrides["host"] = args.host
    if getattr(args, "port", None) is not None:
        overrides["port"] = args.port
    if getattr(args, "workers", None) is not None:
        overrides["workers"] = args.workers
    return Settings.from_env(None, **overrides)


def _server_class() -> type:
    import uvicorn

    from catalog.web.serving import Drain

    log = logging.getLogger("catalog.serve")

    class Server(uvicorn.Server):
        """uvicorn's server, which drains before it stops and exits 0 (uvicorn re-raises the
        signal otherwise).

        The first SIGTERM or SIGINT starts the drain (`catalog.web.serving.Drain`): `/healthz`
        answers 503 `draining` while requests are still accepted and served (with `Connection:
        close`). Once `CATALOG_DRAIN_SECONDS` have passed (at once when nothing has asked
        `/healthz`: no balancer watches), uvicorn's shut-down: the listening socket closes, idle
        connections close, requests in progress finish (for as long as a request may take), then
        the lifespan's end stops the background work (`catalog.runtime.Runtime.close`). A second
        signal ends the drain's wait at once; a SIGINT after that is uvicorn's forced exit, which
        waits neither for the requests nor for the background work.
        """

        drain: Drain
        _drain_logged = False

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # (a signal handler: it only sets flags; on_tick logs and acts)
            if self.started and not self.should_exit:
                self.drain.begin()  # the first signal starts the drain, a second ends its wait
                return
            super().handle_exit(sig, frame)

        async def on_tick(self, counter: int) -> bool:
            drain = self.drain
            if drain.draining and not self.should_exit:
                if not self._drain_logged:
                    self._drain_logged = True
                    log.info(
                        "draining: /healthz answers 503; serving until the wait ends",
                        extra={"seconds": round(drain.seconds_left(), 1), "health_checked": drain.watched},
                    )
                if drain.over():
                    log.info("drained: closing the listening socket, finishing requests in progress")
                    self.should_exit = True
            return bool(await super().on_tick(counter))

    return Server


def _longest_request(settings: Settings) -> float | None:
    """How long a request may take (None: no limit): what the shut-down waits for those in
    progress, a second more for a 504 to be written."""
    limits = [settings.request_timeout]
    if settings.llm_base_url is not None:
        limits.append(settings.llm_request_timeout)  # the routes that wait for the model
    return None if 0 in limits else max(limits) + 1.0


def serve_app(
    app: Any,
    host: str,
    port: int,
    on_started: Callable[[], None] | None = None,
    settings: Settings | None = None,
    *,
    sockets: list[socket.socket] | None = None,
    drain: Any = None,
    worker: int | None = None,
) -> bool:
    """Serve `app` with uvicorn until SIGTERM/SIGINT (then drain and stop: see `_server_class`);
    print `listening on URL` once it accepts connections (after `on_started`). Returns whether it
    ever started. A worker of `catalog serve --workers N` serves the `sockets` its supervisor
    bound, with the `drain` the workers share, and names itself (`worker`) in each answer."""
    import functools

    import uvicorn

    from catalog.web.serving import CatalogProtocol, Drain, Draining

    settings = settings or Settings()
    drain = drain if drain is not None else Drain(settings.drain_seconds)
    config = uvicorn.Config(
        Draining(app, drain, worker),
        host=host,
        port=port,
        http=functools.partial(  # type: ignore[arg-type]
            CatalogProtocol,
            max_connections=settings.max_connections,
            max_connections_per_client=settings.max_connections_per_client,
            first_byte_timeout=settings.first_byte_timeout,
            header_timeout=settings.header_timeout,
        ),
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=_longest_request(settings),  # type: ignore[arg-type]
    )
    server = _server_class()(config)
    server.drain = drain

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.05)
        if on_started is not None:
            on_started()
        sockets = [s for srv in server.servers for s in srv.sockets]
        bound = sockets[0].getsockname()[1] if sockets else port
        print(f"listening on http://{host}:{bound}", flush=True)

    async def run() -> None:
        announcer = asyncio.create_task(announce())
        await server.serve(sockets=sockets)
        announcer.cancel()

    with asyncio.Runner(loop_factory=event_loop_factory(settings)) as runner:
        runner.run(run())
    return bool(server.started)


def event_loop_factory(settings: Settings) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a server runs on: uvloop's (libuv: the loop's own work, its sockets and
    asyncpg's protocol cost less CPU per request) unless `CATALOG_EVENT_LOOP=asyncio` asks for
    the standard library's, or uvloop is not installed (another platform)."""
    if settings.event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def workers_said(settings: Settings, found: Limits) -> list[tuple[int, str, dict[str, Any]]]:
    """What `catalog serve` logs of its workers at the start (level, message, fields): how many
    the default chose and the limits that held it; or, for a number asked for, a warning where it
    is more than the cores this process may use (more gain nothing) or than its memory limit holds
    at WORKER_MEMORY each (the kernel stops processes past the limit). `found`: the process's
    limits, as read once at the start."""
    count, cores, quota, memory = settings.workers_for(found), found.cores, found.cpu_quota, found.memory
    fields: dict[str, Any] = {"workers": count, "cores": cores, "cpu_limit": quota, "memory_limit": memory}
    gib = f"{memory / 2**30:.2f} GiB" if memory is not None else ""
    if not settings.workers:
        named = [f"CPU limit {quota:g}"] if quota is not None else []
        if memory is not None:
            named.append(f"memory limit {gib}, {WORKER_MEMORY >> 20} MiB a worker")
        held = f" ({'; '.join(named)})" if named else ""
        return [
            (logging.INFO, f"{count} worker process(es), one per CPU core this process may use{held}", fields)
        ]
    said = []
    if count > cores:
        said.append(
            (
                logging.WARNING,
                f"{count} workers on {cores} CPU core(s): more workers than cores gain nothing",
                fields,
            )
        )
    if memory is not None and count * WORKER_MEMORY > memory:
        said.append(
            (
                logging.WARNING,
                f"{count} workers may need about {count * WORKER_MEMORY / 2**30:.1f} GiB; this process's "
                f"memory limit is {gib} (a worker held 250-500 MB: see Sizing a machine)",
                fields,
            )
        )
    return said


def cmd_serve(args: argparse.Namespace) -> int:
    from catalog import telemetry
    from catalog.web.middleware import configure_logging

    settings = _settings(args)
    if settings.database_url is None:
        from catalog.db.embedded import check_data_dir

        check_data_dir(settings.postgres_dir)  # a data dir of an earlier release: what to run (main)
    configure_logging(log_format=settings.log_format)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if args.worker is not None:  # one of the processes a supervisor started (below)
        from catalog.cli.workers import run_worker

        telemetry.configure(settings)
        return run_worker(settings, args.worker)
    found = limits()  # read once: the count and what the log says of it come from the same reading
    for level, message, fields in workers_said(settings, found):
        logging.getLogger("catalog.serve").log(level, message, extra=fields)
    if (count := settings.workers_for(found)) > 1:
        from catalog.cli.workers import supervise

        return supervise(settings, count)
    from catalog.app import create_app

    telemetry.configure(settings)  # traces, when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_) is set
    return 0 if serve_app(create_app(settings), settings.host, settings.port, settings=settings) else 1


DATA_DIR_HELP = "the data directory (default $CATALOG_DATA_DIR, else ./.data)"


def cmd_token(args: argparse.Namespace) -> int:
    from catalog.auth import mint_dev_token
    from catalog.auth.signing import PRIVATE_KEY_FILE

    settings = _settings(args)
    if not settings.dev_mode:
        print(
            "catalog token: only in development mode (CATALOG_JWKS_URL / CATALOG_JWT_PUBLIC_KEY are set)",
            file=sys.stderr,
        )
        return 2
    if not args.sub.strip():
        print("catalog token: --sub must not be empty", file=sys.stderr)
        return 2
    if args.ttl <= 0:
        print("catalog token: --ttl must be positive", file=sys.stderr)
        return 2
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    new_key = not (settings.keys_dir / PRIVATE_KEY_FILE).exists()
    print(mint_dev_token(settings, args.sub, on_behalf_of=args.on_behalf_of, ttl=args.ttl))
    if new_key:  # a server makes the key at its start: none has run on this data dir
        print(
            f"catalog token: warning: no server has run on the data dir {settings.data_dir.resolve()}: "
            f"this made a new development key there, which no running server uses (a server on "
            "another data dir answers this token 'bad token signature'). Run `catalog token` where "
            "the server runs (`make run` keeps its data in the checkout's .data), or pass --data-dir "
            "(or set CATALOG_DATA_DIR).",
            file=sys.stderr,
        )
    return 0


def cmd_db_url(args: argparse.Namespace) -> int:
    from catalog.db import EmbeddedPostgres, running_url
    from catalog.runtime import EMBEDDED_DATABASE, ensure_database

    settings = _settings(args)
    if settings.database_url:
        print(with_role(settings.database_url, args.role) if args.role else settings.database_url)
        return 0
    url = running_url(settings.postgres_dir, EMBEDDED_DATABASE)
    if url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        server = EmbeddedPostgres(settings.postgres_dir, keep_running=True)
        url = asyncio.run(ensure_database(server.start(), EMBEDDED_DATABASE))
        print(
            f"started the embedded PostgreSQL in {settings.postgres_dir}; `catalog serve` will reuse it",
            file=sys.stderr,
        )
    print(with_role(url, args.role) if args.role else url)
    return 0


def with_role(url: str, role: str) -> str:
    """The same database as another user (the embedded server trusts local socket connections;
    an external one will ask for that role's password)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, parts.fragment))


def cmd_reindex(args: argparse.Namespace) -> int:
    from catalog.cli.reindex import reindex

    settings = _settings(args)
    return asyncio.run(reindex(settings, recompute_embeddings=args.embeddings))


def cmd_upgrade(args: argparse.Namespace) -> int:
    from catalog.db.embedded import bundled_major
    from catalog.db.upgrade import UpgradeError, upgrade

    settings = _settings(args)
    if settings.database_url:
        print(
            "catalog upgrade: CATALOG_DATABASE_URL is set; this command upgrades the embedded PostgreSQL "
            "of a data dir (upgrade an external server with its own tools: pg_upgrade, or pg_dump and "
            "pg_restore)",
            file=sys.stderr,
        )
        return 2
    old_bin = Path(args.old_bin) if args.old_bin else None
    try:
        report = upgrade(
            settings.postgres_dir, old_bin, say=lambda line: print(line, file=sys.stderr, flush=True)
        )
    except UpgradeError as exc:
        print(f"catalog upgrade: {exc}", file=sys.stderr)
        return 1
    if report is None:
        print(
            f"nothing to upgrade: {settings.postgres_dir} is PostgreSQL {bundled_major()}'s, or not made yet"
        )
    else:
        print(report.summary())
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    if remote.wants_remote(args):
        return remote.run(remote.audit_verify, args)
    from catalog.audit.auditors.service import verify_chain
    from catalog.db import create_pool
    from catalog.runtime import database_url_for_tools

    settings = _settings(args)

    async def run() -> int:
        url, stop = await database_url_for_tools(settings)
        try:
            pool = await create_pool(url, min_size=1, max_size=1)
            try:
                result = await verify_chain(pool)
            finally:
                await pool.close()
        finally:
            await stop()
        if getattr(args, "json", False):
            answer = {"ok": result.ok, "checked": result.checked, "first_broken_seq": result.first_broken_seq}
            print(json.dumps(answer))
            return 0 if result.ok else 1
        if result.ok:
            print(f"ok {result.checked} events")
            return 0
        print(f"broken at seq {result.first_broken_seq} ({result.checked} events verified before it)")
        return 1

    return asyncio.run(run())


def build_parser() -> argparse.ArgumentParser:
    parser = remote.Parser(
        prog="catalog",
        description="A governed memory catalog for AI agents.",
        parents=[remote.remote_options(suppress=False)],
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the server",
        description="Run the server: the API, the MCP servers and the web console on one port. Its "
        "data dir holds the embedded PostgreSQL (unless CATALOG_DATABASE_URL names another), the "
        "full-text index and, in development mode, the key that `catalog token` signs with. Prints "
        "`listening on URL` once it accepts connections; SIGTERM or Ctrl-C stops it cleanly. It "
        "runs one worker process per CPU core (--workers), all on one port.",
    )
    serve.add_argument("--host", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="the port to listen on (default 8080; 0: any free port)")
    serve.add_argument("--data-dir", help=DATA_DIR_HELP)
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes serving the port, sharing one full-text index (default "
        "$CATALOG_WORKERS, else one per CPU core the server may use, as many as a memory limit "
        "holds at 512 MiB each; 1: a single process)",
    )
    serve.add_argument("--worker", help=argparse.SUPPRESS)  # what a supervisor tells a worker (JSON)
    serve.set_defaults(run=cmd_serve)

    token = commands.add_parser(
        "token",
        help="print a development JWT",
        description="Print a token for a principal, signed with the development key of the data dir "
        "(development mode only). A server accepts it when it runs on the same data dir: run this "
        "where the server runs, or pass --data-dir (or CATALOG_DATA_DIR).",
    )
    token.add_argument("--sub", required=True, help="the principal (token subject)")
    token.add_argument("--on-behalf-of", help="the end user the application acts for")
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    token.add_argument("--data-dir", help=DATA_DIR_HELP)
    token.set_defaults(run=cmd_token)

    db_url = commands.add_parser(
        "db-url",
        help="print the PostgreSQL URL in use",
        description="Print the URL of the database the data dir's server uses, for any SQL client: "
        "CATALOG_DATABASE_URL when set, else the embedded PostgreSQL's (started when none runs).",
    )
    db_url.add_argument("--data-dir", help=DATA_DIR_HELP)
    db_url.add_argument("--role", choices=["catalog_auditor"], help="a URL for this database role instead")
    db_url.set_defaults(run=cmd_db_url)
    reindex = commands.add_parser(
        "reindex",
        help="rebuild the full-text and vector indexes from PostgreSQL",
        description="Rebuild the full-text index slots no running server holds, embed the entries "
        "whose vector is missing, and rebuild the vector indexes, from PostgreSQL.",
    )
    reindex.add_argument("--data-dir", help=DATA_DIR_HELP)
    reindex.add_argument(
        "--embeddings",
        action="store_true",
        help="re-embed the rows whose vector another model made too (after changing the model)",
    )
    reindex.set_defaults(run=cmd_reindex)
    upgrade = commands.add_parser(
        "upgrade",
        help="upgrade the embedded PostgreSQL of a data dir made by an earlier release",
        description="Move the embedded PostgreSQL data of an earlier release (PostgreSQL 16) to this "
        "release's PostgreSQL: dump with the old binaries running, restore and reindex into a new data "
        "dir, count every table on both, then swap; the old data dir is kept beside it. Stop every "
        "server on the data dir first.",
    )
    upgrade.add_argument("--data-dir", help=DATA_DIR_HELP)
    upgrade.add_argument(
        "--old-bin",
        help="the bin directory of the old PostgreSQL (default: the pgserver package's, where installed)",
    )
    upgrade.set_defaults(run=cmd_upgrade)

    audit = commands.add_parser(
        "audit",
        help="the audit log",
        description="Read the audit log (events) and verify its hash chain (verify).",
    )
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    audit_verify = audit_commands.add_parser(
        "verify",
        help="verify the audit hash chain",
        description="Verify the audit hash chain: in the database of --data-dir (the default), or "
        "on the server named by --url / --token (or CATALOG_URL / CATALOG_TOKEN).",
        parents=[remote.remote_options(suppress=True)],
    )
    audit_verify.add_argument("--data-dir", help=DATA_DIR_HELP)
    audit_verify.set_defaults(run=cmd_audit_verify)
    remote.add_commands(commands, audit_commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from catalog.db.embedded import UpgradeNeeded

    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except SettingsError as exc:
        print(f"catalog: configuration error: {exc}", file=sys.stderr)
        return 2
    except UpgradeNeeded as exc:
        print(f"catalog: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
