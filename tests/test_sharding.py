"""The schema is ready to be distributed by store with Citus (catalog/db/sharding.py), checked
against the live catalog after the migrations:

- every table of the database has a place: distributed, reference or local (a new table without
  one fails here);
- a distributed table's primary key and every unique index hold its distribution column, which
  is NOT NULL, of one type within its colocation group;
- a foreign key between distributed tables stays in one colocation group and pairs the
  distribution columns; no reference or local table references a distributed one, and no
  distributed table references a local one;
- the triggers of distributed tables write only tables of their own colocation group and read
  nothing but those and reference tables;
- the operator's statements place every distributed and reference table, a table after those it
  references, and are the ones docs/operations/sharding.md shows;
- the hot path's statements (each repo function a request runs) name the store of every
  distributed table they touch.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest

from catalog.db import create_pool, sharding
from catalog.dialects.conversations import repo as conversations
from catalog.dialects.conversations.items import Item
from catalog.dialects.extraction import repo as extraction
from catalog.dialects.sessions import repo as sessions
from catalog.dialects.transcripts import repo as transcripts
from catalog.entries import repo as entries
from catalog.lineage import repo as lineage
from catalog.search import repo as search
from catalog.search.corpus import TRANSCRIPTS

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "operations" / "sharding.md"
PLACED = {**dict.fromkeys(sharding.DISTRIBUTED, "distributed")}
PLACED |= dict.fromkeys(sharding.REFERENCE, "reference") | dict.fromkeys(sharding.LOCAL, "local")
# a table a statement reads or writes
_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE)\s+(?:ONLY\s+)?([a-z_][a-z0-9_]*)", re.IGNORECASE)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection as the server's pool makes them (its JSON and vector codecs)."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as connection:
            yield connection
    finally:
        await pool.close()


async def _columns(conn: asyncpg.Connection, relid: int, attnums: list[int]) -> list[str]:
    rows = await conn.fetch(
        "SELECT a.attnum, a.attname FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum = ANY($2::int2[])",
        relid,
        attnums,
    )
    names = {row["attnum"]: row["attname"] for row in rows}
    return [names[n] for n in attnums if n in names]


async def test_every_table_has_a_place(conn):
    tables = {
        row["relname"]
        for row in await conn.fetch(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%' AND NOT c.relispartition"
        )
    }
    counted = [*sharding.DISTRIBUTED, *sharding.REFERENCE, *sharding.LOCAL]
    assert len(counted) == len(set(counted)), "a table is in two places"
    assert tables - set(counted) == set(), "tables without a place in catalog/db/sharding.py"
    assert set(counted) - tables == set(), "placed tables that do not exist"
    groups = [t for members in sharding.COLOCATION_GROUPS.values() for t in members]
    assert sorted(groups) == sorted(sharding.DISTRIBUTED), "every distributed table is in one group"


async def test_keys_of_distributed_tables_hold_the_distribution_column(conn):
    for table, column in sharding.DISTRIBUTED.items():
        relid = await conn.fetchval("SELECT $1::regclass::oid", table)
        attnum, not_null, type_ = await conn.fetchrow(
            "SELECT attnum, attnotnull, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = $1 AND attname = $2 AND NOT attisdropped",
            relid,
            column,
        )
        assert not_null, f"{table}.{column} may be NULL"
        indexes = await conn.fetch(
            "SELECT i.indexrelid::regclass::text AS name, i.indisprimary, i.indkey::int2[] AS keys "
            "FROM pg_index i WHERE i.indrelid = $1 AND i.indisunique",
            relid,
        )
        assert any(index["indisprimary"] for index in indexes), f"{table} has no primary key"
        for index in indexes:
            assert attnum in index["keys"], f"unique index {index['name']} of {table} lacks {column}"
        first = sharding.group_of(table)
        first_type = await conn.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass "
            "AND attname = $2",
            first,
            sharding.DISTRIBUTED[first],
        )
        assert type_ == first_type, f"{table}.{column} cannot be colocated with {first}"


async def test_foreign_keys_follow_the_placement(conn):
    keys = await conn.fetch(
        "SELECT conname, conrelid, conrelid::regclass::text AS source, confrelid, "
        "confrelid::regclass::text AS target, conkey::int2[] AS conkey, confkey::int2[] AS confkey "
        "FROM pg_constraint WHERE contype = 'f'"
    )
    assert keys
    allowed = {
        ("distributed", "distributed"),
        ("distributed", "reference"),
        ("reference", "reference"),
        ("local", "reference"),  # a Citus local table on the coordinator
        ("local", "local"),
    }
    for key in keys:
        source, target = key["source"], key["target"]
        places = (PLACED[source], PLACED[target])
        assert places in allowed, f"{key['conname']}: a {places[0]} table references a {places[1]} one"
        if places != ("distributed", "distributed"):
            continue
        assert sharding.group_of(source) == sharding.group_of(target), f"{key['conname']} crosses groups"
        ours = await _columns(conn, key["conrelid"], list(key["conkey"]))
        theirs = await _columns(conn, key["confrelid"], list(key["confkey"]))
        pairs = list(zip(ours, theirs, strict=True))
        assert (sharding.DISTRIBUTED[source], sharding.DISTRIBUTED[target]) in pairs, (
            f"{key['conname']} does not go through the distribution columns: {pairs}"
        )


async def test_triggers_of_distributed_tables_stay_in_their_colocation_group(conn):
    triggers = await conn.fetch(
        "SELECT t.tgname, t.tgrelid::regclass::text AS tbl, p.proname, p.prosrc FROM pg_trigger t "
        "JOIN pg_proc p ON p.oid = t.tgfoid WHERE NOT t.tgisinternal"
    )
    seen = set()
    for trigger in triggers:
        table = trigger["tbl"]
        if PLACED.get(table) != "distributed":
            continue
        seen.add(table)
        body = re.sub(r"--[^\n]*", "", trigger["prosrc"])
        for name in _TABLE.findall(body):
            if name not in PLACED:
                continue  # a transition table (added, removed), a function
            if PLACED[name] == "reference" and not re.search(rf"\b(?:INTO|UPDATE)\s+{name}\b", body, re.I):
                continue  # read only
            assert PLACED[name] == "distributed", f"{trigger['tgname']} on {table} touches {name}"
            assert sharding.group_of(name) == sharding.group_of(table), f"{trigger['tgname']} touches {name}"
    assert {"entries", "transcript_items", "conversation_items", "session_items"} <= seen


def test_the_statements_place_every_table_in_order():
    statements = sharding.citus_statements()
    placed = [re.search(r"\('([a-z_]+)'", s).group(1) for s in statements]  # type: ignore[union-attr]
    assert sorted(placed) == sorted([*sharding.DISTRIBUTED, *sharding.REFERENCE])
    for table, column in sharding.DISTRIBUTED.items():
        assert f"create_distributed_table('{table}', '{column}'" in statements[placed.index(table)]
    text = DOC.read_text(encoding="utf-8")
    missing = [s for s in statements if s not in text]
    assert missing == [], f"docs/operations/sharding.md does not show {missing}"
    (block,) = [b for b in re.findall(r"```sql\n(.*?)```", text, re.S) if statements[0] in b]
    shown = [line.strip() for line in block.splitlines() if "SELECT create_" in line]
    assert shown == statements, "the page shows the statements in catalog/db/sharding.py's order"


async def test_tables_come_after_the_tables_they_reference(conn):
    order = [re.search(r"\('([a-z_]+)'", s).group(1) for s in sharding.citus_statements()]  # type: ignore[union-attr]
    keys = await conn.fetch(
        "SELECT conname, conrelid::regclass::text AS source, confrelid::regclass::text AS target "
        "FROM pg_constraint WHERE contype = 'f'"
    )
    for key in keys:
        if key["source"] in order and key["target"] in order and key["source"] != key["target"]:
            assert order.index(key["target"]) < order.index(key["source"]), key["conname"]


# --- the hot path names the store --------------------------------------------------------------------


class Recorder:
    """A connection (or pool) that records every statement sent through it."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.statements: list[str] = []

    async def execute(self, sql: str, *args: Any) -> str:
        self.statements.append(sql)
        return await self.conn.execute(sql, *args)  # type: ignore[no-any-return]

    async def executemany(self, sql: str, args: Any) -> None:
        self.statements.append(sql)
        await self.conn.executemany(sql, args)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        self.statements.append(sql)
        return await self.conn.fetch(sql, *args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        self.statements.append(sql)
        return await self.conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        self.statements.append(sql)
        return await self.conn.fetchval(sql, *args)

    def transaction(self) -> Any:
        return self.conn.transaction()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Recorder]:
        yield self


def _unnamed(statement: str) -> list[str]:
    """The distributed tables a statement touches without naming their distribution column (as
    compared, or as a written column)."""
    out = []
    for name in set(_TABLE.findall(statement)):
        column = sharding.DISTRIBUTED.get(name)
        if column is None:
            continue
        compared = re.search(rf"\b{column}\s*(?:=|IN\b)", statement)
        written = re.search(rf"INSERT INTO {name}\b[^)]*\b{column}\b", statement)
        if not (compared or written):
            out.append(name)
    return out


async def _store(conn: asyncpg.Connection, name: str, kind: str = "memory") -> str:
    return str(
        await conn.fetchval(
            "INSERT INTO memory_stores (schema_id, name, owner, created_by, updated_by, kind) "
            "SELECT s.id, $1, 'admin', 'admin', 'admin', $2 "
            "FROM schemas s JOIN catalogs c ON c.id = s.catalog_id "
            "WHERE c.name = 'main' AND s.name = 'default' RETURNING id",
            name,
            kind,
        )
    )


async def test_hot_path_statements_name_the_store(conn):
    notes, chats = await _store(conn, "hp_notes"), await _store(conn, "hp_chats")
    log = await _store(conn, "hp-log", "session")
    db = Recorder(conn)
    key = entries.Key(notes, "ann", "", "/a/1.md")
    fields = entries.Fields(contents="one", description=None, source_type=None, metadata={"k": "v"})
    tr = conn.transaction()
    await tr.start()
    try:
        # entries: writes, reads, history, expiry, search's reads
        row = await entries.insert_exclusive(db, key, fields, "admin")
        assert row is not None
        await entries.upsert_overwrite(db, key, fields, "admin")
        await entries.upsert_append(db, key, fields, "admin")
        await entries.before_write(db, key)
        await entries.get(db, key, for_update=True)
        await entries.get_by_id(db, notes, row.id)
        current = await entries.get_by_id(db, notes, row.id)
        assert current is not None
        await entries.update_contents(db, notes, row.id, current.version, "two", None, "admin")
        await entries.set_expiry(db, notes, row.id, 3600)
        await entries.list_entries(db, notes, ["ann"], None, "/a", None, 10, where={"k": "v"})
        await entries.by_ids(db, notes, [row.id])
        versions = await entries.history(db, key, 10)
        kept = await entries.version(db, key, versions[-1].version)
        assert kept is not None
        await entries.restore(conn, key, kept, "admin")  # its statements are upsert_overwrite's
        vector = np.zeros(384, dtype=np.float32)
        vector[0] = 1.0
        await search.unembedded_in(db, notes, ["ann"], 10)
        await search.ids_under_prefix(db, notes, ["ann"], None, "/a")
        await search.similarities(db, notes, [row.id], vector)
        await search.written_neighbours(
            db, notes, [row.id], None, include_inactive=False, gap_seconds=3600.0, short_words=96
        )
        vectors = search.VectorSearch(db)  # type: ignore[arg-type]
        await vectors.search(notes, ["ann"], vector, 5)
        await vectors.search(notes, ["ann"], vector, 5, also=[row.id])  # the keyword candidates cosines too
        await vectors._hnsw(vectors.hnsw_sql(search._FILTER, 40), 40, (notes, ["ann"], None, None, vector, 5))
        # lineage written with an entry, and read by its key
        target = lineage.EntryRef(id=row.id, store_id=notes, scope="ann", session_id="", path="/a/1.md")
        await lineage.add_edges(db, target, [target], "admin")
        await lineage.entry_id(db, notes, "ann", "", "/a/1.md")
        await lineage.store_entry_ids(db, notes, True)
        await lineage.store_kind(db, notes)

        # conversations
        conv = "conv_" + "cd" * 16
        await conversations.insert(db, conv, chats, "ann", "user", {}, "admin")
        message = {"id": "msg_1", "type": "message", "role": "user", "content": "hi"}
        item = Item(id="msg_1", type="message", item=message, text="hi")
        await conversations.append(db, chats, conv, [item], "admin")  # type: ignore[arg-type]
        await conversations.find(db, conv)
        await conversations.set_metadata(db, chats, conv, {"a": "b"})
        await conversations.get_item(db, chats, conv, "msg_1")
        await conversations.position(db, chats, conv, "msg_1")
        await conversations.list_items(db, chats, conv, None, 10, True)
        source = lineage.TranscriptRef(
            kind="conversation",
            store_id=chats,
            store_name="main.default.hp_chats",
            scope="ann",
            thread_id=conv,
            item_ids=("msg_1",),
        )
        await lineage.add_origin(db, target, source, "admin")
        hits = await transcripts.by_ids(db, chats, [])  # type: ignore[arg-type]
        assert hits == {}
        await search.similarities(db, chats, [], vector, TRANSCRIPTS)
        await conversations.delete_item(db, chats, conv, "msg_1")
        await conversations.delete(db, chats, conv)

        # sessions and extraction marks
        session = await sessions.insert_session(
            db,
            log,
            session_id="s1",
            actor_id="ann",
            parent_session_id=None,
            root_session_id="s1",
            metadata={},
        )
        locked = await sessions.get_session(db, log, "s1", lock=True)
        assert locked is not None
        await sessions.list_sessions(
            db,
            log,
            descending=True,
            after=None,
            limit=10,
            actor_id="ann",
            root_session_id=None,
            parent_session_id=None,
        )
        items = await sessions.append(db, locked, ['{"role": "user", "content": "hi"}'])  # type: ignore[arg-type]
        await sessions.item_position(db, locked, items[0].item_id)
        await sessions.list_items(db, locked, descending=False, after=None, limit=10)
        fork = await sessions.insert_session(
            db,
            log,
            session_id="s2",
            actor_id="ann",
            parent_session_id="s1",
            root_session_id="s1",
            metadata={},
        )
        await sessions.copy_items(db, locked, fork, None)  # type: ignore[arg-type]
        await sessions.pop(db, fork)  # type: ignore[arg-type]
        await sessions.clear(db, fork)  # type: ignore[arg-type]
        await sessions.update_metadata(db, session, {"a": "b"})
        await extraction.set_mark(db, log, session.id, notes, "digest", "admin")
        await extraction.mark(db, log, session.id, notes)
        await sessions.delete_session(db, fork)

        await entries.delete(db, notes, row.id, None, "admin")
        await entries.delete_scope(db, notes, "ann")
    finally:
        await tr.rollback()

    touched = [s for s in db.statements if any(t in sharding.DISTRIBUTED for t in _TABLE.findall(s))]
    assert len(touched) > 40
    offenders = {s: _unnamed(s) for s in db.statements if _unnamed(s)}
    assert offenders == {}, "statements that do not name the store"
