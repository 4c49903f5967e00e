"""The test databases themselves (tests/conftest.py): each is a copy of a template on which the
server started once, so its audit chain is the intact chain of a first start; a server started on
a copy finds nothing to migrate or bootstrap and appends nothing; copies share nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.settings import Settings

REPO = Path(__file__).resolve().parents[1]
# the migrations a first start applies, in order: one `system.migrate` event each
VERSIONS = sorted(int(p.name[:4]) for p in (REPO / "sql" / "migrations").glob("*.sql"))
assert VERSIONS, "no migrations found"


def verify_cli(data_dir: Path, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(CATALOG_DATA_DIR=str(data_dir), CATALOG_DATABASE_URL=database_url)
    return subprocess.run(
        [sys.executable, "-m", "catalog", "audit", "verify"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_a_copy_holds_the_chain_of_one_first_start_and_a_start_adds_nothing(fresh_database_url, tmp_path):
    first_start = len(VERSIONS) + 1  # the migrations, then the bootstrap
    before = verify_cli(tmp_path, fresh_database_url)
    assert (before.returncode, before.stdout) == (0, f"ok {first_start} events\n"), before.stderr

    settings = Settings(data_dir=tmp_path, database_url=fresh_database_url, admin="admin")
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as c:
        r = c.get(f"{UC}/system/audit", headers=headers, params={"order": "asc", "page_size": 100})
        assert r.status_code == 200, r.text
        events = r.json()["events"]
        # this start on the copy migrated and bootstrapped nothing, so it recorded nothing
        assert [(e["seq"], e["action_name"], e["decision"]) for e in events] == [
            *[(i + 1, "system.migrate", "system") for i in range(len(VERSIONS))],
            (first_start, "system.bootstrap", "system"),
        ]
        assert [e["request_params"]["version"] for e in events[:-1]] == VERSIONS
        assert events[-1]["request_params"] == {"admin": "admin"}
        assert events[0]["prev_hash"] == "0" * 64
        assert [e["prev_hash"] for e in events[1:]] == [e["hash"] for e in events[:-1]]
        main = c.get(f"{UC}/catalogs/main", headers=headers)
        assert main.status_code == 200 and main.json()["owner"] == "admin"

    after = verify_cli(tmp_path, fresh_database_url)  # and the two requests above
    assert (after.returncode, after.stdout) == (0, f"ok {first_start + 2} events\n"), after.stderr


def test_copies_share_nothing(client, token, database_url, fresh_database_url):
    r = client.post(f"{UC}/catalogs", headers=token(), json={"name": "only_in_this_module"})
    assert r.status_code == 200, r.text

    async def count(url: str) -> int:
        conn = await asyncpg.connect(url)
        try:
            return int(
                await conn.fetchval("SELECT count(*) FROM catalogs WHERE name = 'only_in_this_module'")
            )
        finally:
            await conn.close()

    assert asyncio.run(count(database_url)) == 1
    assert asyncio.run(count(fresh_database_url)) == 0
