"""Test fixtures: one real PostgreSQL (with pgvector) per test session, a fresh database per test
module (or per test, where a test needs one of its own), and the application on top of it.

PostgreSQL is the embedded one (catalog.db.EmbeddedPostgres: PostgreSQL 18 with pgvector 0.8) in a
temporary directory, unless CATALOG_TEST_DATABASE_URL names a server to use (its user must be
allowed to create databases).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from scripted_llm import ScriptedLLM

from catalog import event_params
from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.runtime import with_database
from catalog.settings import Settings

# fixtures of their own modules: `store` and `pool` for the indexer tests (a module's own fixture
# of the same name wins over these)
pytest_plugins = ["index_entries"]

# The process-level modules: clusters, killed and restarted servers and databases, several
# workers, a wheel built and installed, the docs site built and its snippets run, the fuzz. They
# carry the `slow` marker; `make test-fast` leaves them out (`make test` runs everything).
SLOW_MODULES = frozenset(
    {
        "test_cluster",
        "test_derived_state",
        "test_docs",
        "test_drain",
        "test_durability",
        "test_fresh_database",
        "test_fuzz",
        "test_index_recovery",
        "test_pgbouncer",
        "test_upgrade",
        "test_wheel",
        "test_workers",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _audit_parameters_declared() -> Iterator[None]:
    """Every parameter an audit event of this process carried is declared (catalog.event_params):
    a new one would be kept as `[redacted]`, which says nothing to auditors, and the declaration
    is where it is decided what it may hold. (Events are appended in batches: one appended just
    after a test ends is counted in the next.)"""
    yield
    undeclared = event_params.undeclared()
    assert not undeclared, f"audit parameters not declared in catalog/event_params.py: {sorted(undeclared)}"


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    external = os.environ.get("CATALOG_TEST_DATABASE_URL")
    if external:
        yield external
        return
    from catalog.db import EmbeddedPostgres

    root = Path(tempfile.mkdtemp(prefix="catpg"))
    server = EmbeddedPostgres(root / "pg")
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _admin(url: str, *statements: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


@pytest.fixture(scope="session")
def template_database(pg_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The name of a database the server has started on once, and nothing else: migrated,
    bootstrapped (`admin` is the metastore admin), and its audit chain holding exactly the system
    events of that first start (one `system.migrate` per migration, then `system.bootstrap`).

    Every test database is a copy of it (`CREATE DATABASE ... TEMPLATE`), which is much faster
    than migrating each one. A server started on a copy finds nothing to migrate or bootstrap, so
    it appends nothing at start: each copy's chain is the same intact chain of the first start.
    Connections to it are refused once it is built, since PostgreSQL copies only a database that
    nobody is connected to."""
    name = f"tmpl_{uuid.uuid4().hex[:12]}"
    _admin(pg_server_url, f'CREATE DATABASE "{name}"')
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("template"),
        database_url=with_database(pg_server_url, name),
        admin="admin",
    )
    try:
        with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as app:
            assert app.get("/healthz").json() == {"status": "ok"}
        _admin(pg_server_url, f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false')
        yield name
    finally:
        _admin(
            pg_server_url,
            f'ALTER DATABASE "{name}" WITH IS_TEMPLATE false',
            f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
        )


@contextmanager
def _copy_of(pg_server_url: str, template: str | None) -> Iterator[str]:
    """A new database (a copy of `template`, or empty), dropped afterwards; yields its URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    source = f' TEMPLATE "{template}"' if template else ""
    _admin(pg_server_url, f'CREATE DATABASE "{name}"{source}')
    try:
        yield with_database(pg_server_url, name)
    finally:
        _admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def database_url(pg_server_url: str, template_database: str) -> Iterator[str]:
    """A database of its own for one test module, as the server leaves it after its first start.
    The tests of a module share it (and the app on it): none may rely on what another wrote."""
    with _copy_of(pg_server_url, template_database) as url:
        yield url


@pytest.fixture
def fresh_database_url(pg_server_url: str, template_database: str) -> Iterator[str]:
    """A database of its own for one test (a test that counts what the whole database holds)."""
    with _copy_of(pg_server_url, template_database) as url:
        yield url


@pytest.fixture
def empty_database_url(pg_server_url: str) -> Iterator[str]:
    """An empty database for one test: not migrated, no extensions (the migration runner's tests)."""
    with _copy_of(pg_server_url, None) as url:
        yield url


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


def _settings(database_url: str, data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, database_url=database_url, admin="admin", page_default=5, page_cap=20)


@contextmanager
def _app(settings: Settings) -> Iterator[TestClient]:
    with TestClient(
        create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False
    ) as test_client:
        yield test_client


def _token_maker(settings: Settings):  # type: ignore[no-untyped-def]
    def make(sub: str = "admin", **kwargs: object) -> dict[str, str]:
        return {"Authorization": f"Bearer {mint_dev_token(settings, sub, **kwargs)}"}  # type: ignore[arg-type]

    return make


@pytest.fixture(scope="module")
def settings(database_url: str, data_dir: Path) -> Settings:
    return _settings(database_url, data_dir)


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    """The app on the module's database, shared by the module's tests."""
    with _app(settings) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def token(settings: Settings):  # type: ignore[no-untyped-def]
    """`token("alice")` → headers with a valid bearer token for alice."""
    return _token_maker(settings)


@pytest.fixture
def own_settings(fresh_database_url: str, tmp_path: Path) -> Settings:
    """Settings for a database and a data dir of the test's own."""
    return _settings(fresh_database_url, tmp_path / "data")


@pytest.fixture
def own_client(own_settings: Settings) -> Iterator[TestClient]:
    """An app of the test's own, on its own database (for a test that must not share one)."""
    with _app(own_settings) as test_client:
        yield test_client


@pytest.fixture
def own_token(own_settings: Settings):  # type: ignore[no-untyped-def]
    """`own_token("alice")`: headers with a bearer token that `own_client` accepts."""
    return _token_maker(own_settings)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """`catalog serve` in a subprocess; `stop()` sends SIGTERM and waits."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        # no drain before a stop (a test that checks the drain sets it): a test that asked
        # /healthz would otherwise wait CATALOG_DRAIN_SECONDS at each stop
        # and one process, unless a test asks for workers (CATALOG_WORKERS)
        own = {"CATALOG_DATA_DIR": str(data_dir), "CATALOG_DRAIN_SECONDS": "0", "CATALOG_WORKERS": "1"}
        self.env = {**inherited, **own, **(env or {})}
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / "server.log"
        self._log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "catalog", "serve", "--port", str(self.port)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=REPO,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 90
        self.first_line = ""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if line:
                self.first_line = line.strip()
                break
            if self.process.poll() is not None:
                break
        if not self.first_line.startswith("listening on"):
            self.process.kill()
            raise RuntimeError(f"server did not start:\n{self.problems()}")
        self.url = f"http://127.0.0.1:{self.port}"

    def problems(self) -> str:
        """The warnings and errors the server logged, each with the end of its trace."""
        lines = []
        for line in self.log_path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                lines.append(line[:500])
                continue
            if record.get("level") in ("warning", "error", "critical"):
                lines.append(f"{record.get('logger')}: {record.get('message')} {record.get('error', '')}")
                if record.get("exception"):
                    lines.append(record["exception"][-2500:])
        return "\n".join(lines)[-8000:]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "catalog", *args],
            env=self.env,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self._log.close()


@pytest.fixture(scope="session")
def live_server() -> type[LiveServer]:
    """The `LiveServer` class: `live_server(data_dir, env)` starts `catalog serve`."""
    return LiveServer


@pytest.fixture(scope="module")
def live(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`catalog serve` in a subprocess on the module's database, one for the module."""
    server = LiveServer(tmp_path_factory.mktemp("live"), env={"CATALOG_DATABASE_URL": database_url})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def llm(request: pytest.FixtureRequest) -> Iterator[ScriptedLLM]:
    """The scripted OpenAI-compatible upstream of a module's tests, started by the tests (a module
    sets its options in `UPSTREAM`, e.g. the API key the upstream expects)."""
    with ScriptedLLM(**getattr(request.module, "UPSTREAM", {})) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_upstream(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses the scripted upstream (itself or through a server started with it)
    starts and ends with nothing scripted and no request recorded."""
    if "llm" not in request.fixturenames:
        yield
        return
    upstream: ScriptedLLM = request.getfixturevalue("llm")
    upstream.reset()
    yield
    upstream.reset()
