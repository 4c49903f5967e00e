"""The export of one store: its archive's bytes, a few lines at a time, read from one snapshot
(REPEATABLE READ) of the store. Each slice reads its own rows (its `archive`: the parts below, in
the order an archive holds their kinds)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
import numpy as np

from catalog import __version__
from catalog.access import Securable, SecurableType, trust
from catalog.auth import Principal
from catalog.backup import repo
from catalog.backup.archive import KINDS, model_id
from catalog.backup.schemas import (
    FORMAT,
    VERSION,
    Conversation,
    ConversationItem,
    Entry,
    EntryVersion,
    Grant,
    Header,
    Line,
    Lineage,
    Manifest,
    Origin,
    Session,
    SessionItem,
    Store,
    Transcript,
)
from catalog.context import Context
from catalog.dialects.conversations import archive as conversations_archive
from catalog.dialects.sessions import archive as sessions_archive
from catalog.entries import archive as entries_archive
from catalog.governance.namespace import archive as store_archive
from catalog.governance.permissions import archive as grants_archive
from catalog.lineage import archive as lineage_archive
from catalog.search import archive as transcripts_archive
from catalog.wire.entry_keys import validate_scope
from catalog.wire.names import split_full_name

STORE = SecurableType.MEMORY_STORE
CHUNK = 64 * 1024  # bytes of lines an export sends at once

# each slice's part of an archive, in archive order (after the header and the store's definition)
PARTS = (
    grants_archive,
    entries_archive,
    conversations_archive,
    sessions_archive,
    transcripts_archive,
    lineage_archive,
)


def _vector_text(vector: Any) -> str:
    """A vector as read (pgvector's `Vector`, or an array) as an archive writes it."""
    values = vector.to_numpy() if hasattr(vector, "to_numpy") else vector
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


# --- export ---------------------------------------------------------------------------------------


async def export(
    ctx: Context, principal: Principal, full_name: str, scope: str | None
) -> AsyncIterator[bytes]:
    """Authorize the export of the store (a memory or a session store), then its archive's bytes,
    a few lines at a time, read from one snapshot."""
    parts = split_full_name(full_name, 3)
    scope = None if scope is None else validate_scope(scope)
    store = await ctx.access.resolve(principal, "memory_store.export", STORE, parts, store_kind=None)
    kind = await store_archive.kind(ctx.pool, store.node.id)
    await ctx.access.ensure(principal, "sessions.read" if kind == "session" else "entries.read", store)
    return _archive(ctx.pool, store, scope, model_id(ctx))


def _export_line(kind: str, row: asyncpg.Record) -> Line:
    values = dict(row)
    if kind == "grant":
        return Grant(**values)
    if kind == "entry":
        vector = values.pop("embedding")
        return Entry(**values, embedding=None if vector is None else _vector_text(vector))
    if kind == "entry_version":
        return EntryVersion(**values)
    if kind == "conversation":
        return Conversation(**values)
    if kind == "conversation_item":
        return ConversationItem(**values)
    if kind == "session":
        return Session(**values)
    if kind == "session_item":
        return SessionItem(**values)
    if kind == "transcript":
        return Transcript(**{**values, "embedding": _vector_text(values["embedding"])})
    if kind == "lineage":
        return Lineage(**values)
    if kind == "origin":
        return Origin(**{**values, "source_item_ids": list(values["source_item_ids"])})
    raise AssertionError(f"no archive line of kind {kind}")


async def _archive(
    pool: asyncpg.Pool, store: Securable, scope: str | None, model: str
) -> AsyncIterator[bytes]:
    encoder = msgspec.json.Encoder()
    digest = hashlib.sha256()
    counts = dict.fromkeys(KINDS, 0)
    lines = 0
    out = bytearray()

    def add(line: Line) -> None:
        nonlocal lines
        data = encoder.encode(line) + b"\n"
        digest.update(data)
        out.extend(data)
        lines += 1

    async with repo.snapshot(pool) as conn:
        row = await store_archive.definition(conn, store.node.id)
        if row is None:
            return  # deleted since it was authorized: the archive ends without its manifest
        add(
            Header(
                format=FORMAT,
                version=VERSION,
                server_version=__version__,
                embedding_model=model,
                memory_store=store.full_name,
                scope=scope,
                exported_at=datetime.now(UTC),
            )
        )
        values = dict(row)
        values["store_kind"] = values.pop("kind")
        values["shared_scopes"] = list(values["shared_scopes"])
        values["trust_policy"] = trust.parse(values["trust_policy"])
        add(Store(**values))
        counts["store"] = 1
        for part in PARTS:
            for kind in part.KINDS:
                async for record in part.rows(conn, kind, store.node.id, scope):
                    add(_export_line(kind, record))
                    counts[kind] += 1
                    if len(out) >= CHUNK:
                        yield bytes(out)
                        out.clear()
    out.extend(encoder.encode(Manifest(counts=counts, lines=lines, sha256=digest.hexdigest())) + b"\n")
    yield bytes(out)
