"""Authorization at scale: p50/p99 of a privilege check, cold and warm, and the cost of a revoke.

Builds, in a real PostgreSQL (the embedded one in a temporary directory unless --database-url is
given), 10,000 memory stores (10 catalogs x 10 schemas x 100 stores), 10,000 principals, 1,000
groups nested 4 deep and 100,000 grants, loads them into the authorizer as the server does, and
times `Authorizer.authorize` for `memory_store.get` on random (principal, store) pairs.

cold = no cached decision and no cached group closure for that principal; warm = the same check
again (a decision-cache hit). Run: .venv/bin/python bench/authz.py [--grants N] [--checks N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from catalog.access import Authorizer, Node, Securable, SecurableType, action
from catalog.access.actions import GRANTABLE
from catalog.auth import Principal
from catalog.db import apply_migrations, create_pool
from catalog.governance.namespace import bootstrap, get_metastore
from catalog.governance.permissions.repo import change_grants

C, S, T = SecurableType.CATALOG, SecurableType.SCHEMA, SecurableType.MEMORY_STORE


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def build(conn: asyncpg.Connection, rng: random.Random, n_grants: int) -> dict:
    admin = "admin"
    catalogs, schemas, stores = [], [], []
    for c in range(10):
        cid = uuid.uuid4()
        catalogs.append((cid, f"cat{c}", admin))
        for s in range(10):
            sid = uuid.uuid4()
            schemas.append((sid, cid, f"sch{s}", admin, f"cat{c}"))
            for m in range(100):
                stores.append((uuid.uuid4(), sid, f"store{m}", admin, f"cat{c}.sch{s}"))
    await conn.copy_records_to_table(
        "catalogs",
        records=[(i, n, o, o, o) for i, n, o in catalogs],
        columns=["id", "name", "owner", "created_by", "updated_by"],
    )
    await conn.copy_records_to_table(
        "schemas",
        records=[(i, c, n, o, o, o) for i, c, n, o, _ in schemas],
        columns=["id", "catalog_id", "name", "owner", "created_by", "updated_by"],
    )
    await conn.copy_records_to_table(
        "memory_stores",
        records=[(i, s, n, o, o, o) for i, s, n, o, _ in stores],
        columns=["id", "schema_id", "name", "owner", "created_by", "updated_by"],
    )
    principals = [f"user{i}" for i in range(10_000)]
    # 1,000 groups in 4 levels (400, 300, 200, 100); each group sits inside one of the next level
    levels = [[f"g{k}_{i}" for i in range(n)] for k, n in enumerate((400, 300, 200, 100))]
    group_ids = {name: uuid.uuid4() for level in levels for name in level}
    await conn.copy_records_to_table(
        "groups",
        records=[(gid, name, admin) for name, gid in group_ids.items()],
        columns=["id", "display_name", "created_by"],
    )
    members = []
    for k in range(3):
        for name in levels[k]:
            members.append((group_ids[rng.choice(levels[k + 1])], "group", str(group_ids[name])))
    for p in principals:
        for name in rng.sample(levels[0], 2):
            members.append((group_ids[name], "principal", p))
    await conn.copy_records_to_table(
        "group_members", records=members, columns=["group_id", "member_type", "member"]
    )
    all_groups = [name for level in levels for name in level]
    targets = (
        [(C, cid, f"cat{i}") for i, (cid, _, _) in enumerate(catalogs)]
        + [(S, sid, f"{cat}.{n}") for sid, _, n, _, cat in schemas]
        + [(T, mid, f"{sch}.{n}") for mid, _, n, _, sch in stores]
    )
    # as in most deployments, everyone may use the catalogs and schemas; stores are what is guarded
    grants = {(C.value, cid, "account users", "USE_CATALOG", admin) for cid, _, _ in catalogs}
    grants |= {(C.value, cid, "account users", "USE_SCHEMA", admin) for cid, _, _ in catalogs}
    while len(grants) < n_grants:
        kind, sid, _ = rng.choice(targets) if rng.random() < 0.9 else rng.choice(targets[:110])
        grantee = rng.choice(principals) if rng.random() < 0.8 else rng.choice(all_groups)
        grants.add((kind.value, sid, grantee, rng.choice(GRANTABLE[kind]).value, admin))
    await conn.copy_records_to_table(
        "grants",
        records=list(grants),
        columns=["securable_type", "securable_id", "principal", "privilege", "granted_by"],
    )
    readers = [
        (g[2], g[1]) for g in grants if g[3] in ("READ_MEMORY_STORE", "ALL_PRIVILEGES") and g[0] == T.value
    ]
    return {
        "catalogs": catalogs,
        "schemas": schemas,
        "stores": stores,
        "principals": principals,
        "readers": readers,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", help="an empty PostgreSQL database with pgvector (default: embedded)"
    )
    parser.add_argument("--grants", type=int, default=100_000)
    parser.add_argument("--checks", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    server = None
    url = args.database_url
    if url is None:
        from catalog.db import EmbeddedPostgres

        root = Path(tempfile.mkdtemp(prefix="authzbench"))
        server = EmbeddedPostgres(root / "pg")
        url = server.start()
    try:
        conn = await asyncpg.connect(url)
        await apply_migrations(conn)
        await bootstrap(conn, "admin")
        started = time.perf_counter()
        world = await build(conn, rng, args.grants)
        build_s = time.perf_counter() - started
        await conn.close()

        pool = await create_pool(url)
        row = await get_metastore(pool)
        metastore = Node(SecurableType.METASTORE, str(row["id"]), str(row["id"]), "admin")
        authorizer = Authorizer("admin", metastore, pool)
        started = time.perf_counter()
        await authorizer.load()
        load_s = time.perf_counter() - started

        catalogs = {name: Node(C, name, str(cid), owner) for cid, name, owner in world["catalogs"]}
        schemas = {f"{cat}.{n}": Node(S, f"{cat}.{n}", str(sid), o) for sid, _, n, o, cat in world["schemas"]}
        chains = []
        for mid, _, name, owner, schema_name in world["stores"]:
            full = f"{schema_name}.{name}"
            chain = (
                metastore,
                catalogs[schema_name.split(".")[0]],
                schemas[schema_name],
                Node(T, full, str(mid), owner),
            )
            chains.append(Securable(T, full, chain))
        get = action("memory_store.get")
        by_id = {s.node.id: s for s in chains}
        # half random pairs (mostly denied), half a principal or group member with a grant on the store
        samples = [
            (Principal(rng.choice(world["principals"])), rng.choice(chains)) for _ in range(args.checks // 2)
        ]
        readers = [(who, by_id[str(sid)]) for who, sid in world["readers"] if who.startswith("user")]
        samples += [(Principal(who), sec) for who, sec in rng.sample(readers, args.checks - len(samples))]
        rng.shuffle(samples)

        cold, warm, allowed = [], [], 0
        for principal, securable in samples:
            authorizer._cache.clear()
            authorizer.policy._memberships.clear()
            t0 = time.perf_counter_ns()
            decision = authorizer.authorize(principal, get, securable)
            cold.append((time.perf_counter_ns() - t0) / 1000)
            allowed += decision.allowed
        for principal, securable in samples:
            authorizer.authorize(principal, get, securable)
        for principal, securable in samples:
            t0 = time.perf_counter_ns()
            authorizer.authorize(principal, get, securable)
            warm.append((time.perf_counter_ns() - t0) / 1000)

        # the cost of a revoke: the write, then the next request catching up and deciding afresh
        revoke_ms, sync_ms, first_check_us, flips = [], [], [], 0
        for principal, securable in [p for p in samples if authorizer.authorize(p[0], get, p[1]).allowed][
            :25
        ]:
            schema = Securable(S, securable.chain[2].full_name, securable.chain[:3])
            async with pool.acquire() as conn:
                await change_grants(
                    conn,
                    schema,
                    put=[(principal.name, "READ_MEMORY_STORE", None)],
                    delete=[],
                    granted_by="admin",
                )
            await authorizer.sync()
            store = Securable(T, securable.full_name, securable.chain)
            async with pool.acquire() as conn:
                await change_grants(
                    conn, store, put=[], delete=[(principal.name, "READ_MEMORY_STORE")], granted_by="admin"
                )
            started = time.perf_counter()
            async with pool.acquire() as conn:
                await change_grants(
                    conn, schema, put=[], delete=[(principal.name, "READ_MEMORY_STORE")], granted_by="admin"
                )
            revoke_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            revision = await pool.fetchval("SELECT max(seq) FROM policy_log")
            await authorizer.sync(revision)
            sync_ms.append((time.perf_counter() - started) * 1000)
            t0_ns = time.perf_counter_ns()
            after = authorizer.authorize(principal, get, securable)
            first_check_us.append((time.perf_counter_ns() - t0_ns) / 1000)
            flips += not after.allowed or "via group" in after.reason or "ALL_PRIVILEGES" in after.reason
        await pool.close()
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)

    print(
        f"authorization: {args.grants:,} grants, 10,000 principals, 1,000 groups nested 4 deep, "
        f"10,000 stores; {args.checks:,} checks of memory_store.get ({allowed / len(samples):.0%} allowed)"
    )
    print(f"data built in {build_s:.1f} s; policy loaded by the authorizer in {load_s * 1000:.0f} ms\n")
    print("| check | p50 | p99 | max |")
    print("|---|---|---|---|")
    print(
        f"| cold (no cached decision or group closure) | {pct(cold, 0.5):.0f} µs | {pct(cold, 0.99):.0f} µs "
        f"| {max(cold):.0f} µs |"
    )
    w50, w99 = pct(warm, 0.5), pct(warm, 0.99)
    print(f"| warm (cached decision) | {w50:.1f} µs | {w99:.1f} µs | {max(warm):.0f} µs |")
    print(f"| mean cold / warm | {statistics.mean(cold):.0f} µs | {statistics.mean(warm):.1f} µs | |")
    print()
    print(f"| revoke ({len(revoke_ms)} revokes, median) | cost |")
    print("|---|---|")
    print(f"| the revoke's transaction (grant row + policy log) | {statistics.median(revoke_ms):.2f} ms |")
    print(f"| next request: read the log head and apply the change | {statistics.median(sync_ms):.2f} ms |")
    print(f"| next request: the first check after it (cold) | {statistics.median(first_check_us):.0f} µs |")
    print(f"| checks right after it that no longer used the revoked grant | {flips} of {len(revoke_ms)} |")


if __name__ == "__main__":
    asyncio.run(main())
