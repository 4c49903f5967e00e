"""The server through pgbouncer in session mode, as docs/operations/cluster.md advises where the
connections add up: the migrations (under a session advisory lock), writes, the change channel
(`LISTEN`, held on a session), a search that finds its own write, and the audit chain, all through
Debian's pgbouncer in front of the tests' embedded PostgreSQL; and every pooled connection commits
synchronously although the database's default says otherwise (set on the session: pgbouncer
refuses it as a startup parameter). Skipped where pgbouncer is not installed (CI installs it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.db import create_pool
from catalog.db.embedded import system_user
from catalog.settings import Settings

PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")

pytestmark = pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def pgbouncer(fresh_database_url: str) -> Iterator[str]:
    """pgbouncer (session pooling) in front of the test's own database; its URL."""
    parts = urlsplit(fresh_database_url)
    database = parts.path.lstrip("/")
    socket_dir = dict(p.split("=", 1) for p in parts.query.split("&"))["host"]
    # outside pytest's own directory, which another pytest starting meanwhile makes unreadable to
    # pgbouncer's user again
    work = Path(tempfile.mkdtemp(prefix="catbouncer"))
    port = _free_port()
    (work / "userlist.txt").write_text('"postgres" ""\n')
    (work / "pgbouncer.ini").write_text(
        f"""[databases]
{database} = host={socket_dir} port=5432 dbname={database}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {work / "userlist.txt"}
pool_mode = session
max_client_conn = 100
default_pool_size = 20
max_db_connections = 20
logfile = {work / "pgbouncer.log"}
"""
    )
    user = system_user()  # pgbouncer refuses to run as root
    if user is not None:
        work.chmod(0o755)
        for path in (work, *work.iterdir()):
            shutil.chown(path, user, user)
    process = subprocess.Popen(
        [PGBOUNCER, str(work / "pgbouncer.ini")], user=user, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "pgbouncer did not listen"
            time.sleep(0.1)
        yield f"postgresql://postgres@127.0.0.1:{port}/{database}"
    finally:
        process.send_signal(signal.SIGINT)  # pgbouncer's immediate shutdown
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
        shutil.rmtree(work, ignore_errors=True)


_LISTENING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
)


async def _execute(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        database = await conn.fetchval("SELECT current_database()")
        await conn.execute(statement.format(db=f'"{database}"'))
    finally:
        await conn.close()


async def _pooled_setting(url: str) -> str:
    pool = await create_pool(url, min_size=1, max_size=1)
    try:
        return str(await pool.fetchval("SHOW synchronous_commit"))
    finally:
        await pool.close()


async def _fetch(url: str, query: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(query))
    finally:
        await conn.close()


def test_the_server_runs_through_pgbouncer_in_session_mode(
    pgbouncer: str, fresh_database_url: str, tmp_path: Path
) -> None:
    asyncio.run(_execute(fresh_database_url, "ALTER DATABASE {db} SET synchronous_commit = off"))
    assert asyncio.run(_pooled_setting(pgbouncer)) == "on"
    settings = Settings(data_dir=tmp_path / "data", database_url=pgbouncer, admin="admin")
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    store = f"{UC}/memory-stores/main.default.pooled"
    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        r = client.post(
            f"{UC}/memory-stores",
            headers=headers,
            json={"name": "pooled", "catalog_name": "main", "schema_name": "default"},
        )
        assert r.status_code == 200, r.text
        for i in range(3):
            r = client.post(
                f"{store}/entries",
                headers=headers,
                params={"scope": "u"},
                json={"path": f"/n{i}.md", "contents": f"pooled note {i} zqpool{i}"},
            )
            assert r.status_code == 200, r.text
        r = client.post(
            f"{store}/entries:search",
            headers=headers,
            json={"scope": "u", "query": "zqpool2", "mode": "keyword"},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert [hit["memory_entry"]["path"] for hit in body["results"]] == ["/n2.md"], body
        assert not body.get("degraded"), body
        # the server's only way to PostgreSQL is pgbouncer: its LISTEN is held there, on a session
        listening = asyncio.run(_fetch(fresh_database_url, _LISTENING))
        assert listening >= 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    verify = subprocess.run(
        [sys.executable, "-m", "catalog", "audit", "verify"],
        env={**env, "CATALOG_DATABASE_URL": pgbouncer, "CATALOG_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0 and verify.stdout.startswith("ok "), verify.stdout + verify.stderr
