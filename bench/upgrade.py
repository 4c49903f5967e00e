"""`catalog upgrade` of a data dir that the earlier release's embedded PostgreSQL 16 made, at size.

Builds the data dir as the earlier release would hold it: PostgreSQL 16 from the `pgserver`
package in `<data dir>/postgres`, the database `catalog` migrated and bootstrapped by the server
(one store made through the API), then `--entries` entries (100,000 by default) bulk-loaded into
it with 384-dimension vectors (random directions around 1,000 centres, so the HNSW graph has some
structure) and their HNSW index built, as the server keeps it. Then times `catalog upgrade` (the
real command, in a subprocess): its steps (starting both servers, the roles, dump and restore with
every index built anew, ANALYZE, counting every table on both sides) and the whole, and checks that
`catalog serve` then starts on the upgraded data dir and finds an entry by its vector.

Needs the dev dependencies (pgserver). Run: .venv/bin/python bench/upgrade.py [--entries N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fake embedder

from fake_embedder import HashEncoder
from litestar.testing import TestClient

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.db import EmbeddedPostgres
from catalog.runtime import with_database
from catalog.search.embedder import DIMENSIONS
from catalog.settings import Settings

REPO = Path(__file__).resolve().parents[1]
UC = "/api/2.1/unity-catalog"


def build_old(data_dir: Path, entries: int) -> dict[str, float]:
    import pgserver

    timings: dict[str, float] = {}
    data_dir.mkdir(parents=True)
    server = pgserver.get_server(data_dir / "postgres", cleanup_mode="stop")
    try:
        server.psql("CREATE DATABASE catalog;")
        url = with_database(server.get_uri(), "catalog")
        settings = Settings(data_dir=data_dir, database_url=url, admin="admin")
        headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
        with TestClient(create_app(settings, encoder=HashEncoder())) as client:
            r = client.post(
                f"{UC}/memory-stores",
                headers=headers,
                json={"name": "big", "catalog_name": "main", "schema_name": "default"},
            )
            r.raise_for_status()
        started = time.perf_counter()
        asyncio.run(bulk_load(url, entries))
        timings["load_s"] = time.perf_counter() - started
    finally:
        server.cleanup()
    return timings


async def bulk_load(url: str, n: int) -> None:
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(1000, DIMENSIONS)).astype(np.float32)
    conn = await asyncpg.connect(url)
    try:
        from pgvector.asyncpg import register_vector

        await register_vector(conn)
        store_id = await conn.fetchval("SELECT id FROM memory_stores WHERE name = 'big'")
        await conn.execute("DROP INDEX IF EXISTS entries_embedding_hnsw")
        await conn.execute("SET session_replication_role = replica")  # bulk: no change-log rows
        for chunk in range(0, n, 20_000):
            records = []
            for i in range(chunk, min(n, chunk + 20_000)):
                vector = centres[i % 1000] + rng.normal(0, 0.3, DIMENSIONS).astype(np.float32)
                vector /= np.linalg.norm(vector)
                text = f"entry {i}: a note of user {i % 1000} about topic {i % 97} and thing {i % 13}"
                records.append(
                    (
                        store_id,
                        f"user-{i % 1000}",
                        "",
                        f"/n/{i}.md",
                        text,
                        None,
                        "bench",
                        "bench",
                        vector,
                        1,
                        1,
                    )
                )
            await conn.copy_records_to_table(
                "entries",
                records=records,
                columns=[
                    "store_id", "scope", "session_id", "path", "contents", "description", "created_by",
                    "updated_by", "embedding", "version", "embedded_version",
                ],
            )  # fmt: skip
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(
            "CREATE INDEX entries_embedding_hnsw ON entries USING hnsw (embedding vector_cosine_ops)"
        )
        await conn.execute("VACUUM (ANALYZE) entries")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="upgradebench"))
    data_dir = root / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    try:
        built = build_old(data_dir, args.entries)
        size = du(data_dir / "postgres")
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "catalog", "upgrade", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
        )
        took = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"catalog upgrade failed:\n{done.stdout}\n{done.stderr}")
        print(
            f"{args.entries:,} entries with 384-dimension vectors (bulk load and HNSW build on "
            f"PostgreSQL 16: {built['load_s']:.0f} s); the old data dir {size / 2**20:.0f} MiB, the new "
            f"{du(data_dir / 'postgres') / 2**20:.0f} MiB"
        )
        print(f"catalog upgrade: {took:.1f} s wall clock")
        print(done.stdout.strip())
        server = EmbeddedPostgres(data_dir / "postgres")  # as `catalog serve` starts it
        url = with_database(server.start(), "catalog")

        async def nearest() -> bool:
            conn = await asyncpg.connect(url)
            try:
                row = await conn.fetchrow(
                    "SELECT path, embedding::text AS v FROM entries WHERE path = '/n/4242.md'"
                )
                found = await conn.fetchval(
                    "SELECT path FROM entries ORDER BY embedding <=> $1::text::vector LIMIT 1", row["v"]
                )
                return bool(found == row["path"])
            finally:
                await conn.close()

        try:
            print(f"after the upgrade, the HNSW index finds an entry by its vector: {asyncio.run(nearest())}")
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
