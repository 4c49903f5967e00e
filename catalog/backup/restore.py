"""The import of an archive into one store (the rules are the package's, `catalog.backup.service`):
where it may go (`import_target`), and the restore itself, all of it or nothing, each slice
writing back its own rows (its `archive`) once the archive has been checked here."""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import msgspec
import numpy as np

from catalog.access import Securable, SecurableType, trust
from catalog.access.actions import GRANTABLE, SCOPABLE
from catalog.access.scoping import MAX_PATTERNS, validate_pattern
from catalog.auth import Principal
from catalog.backup.archive import KINDS, Archive, ArchiveError, model_id, read
from catalog.backup.schemas import (
    Conversation,
    ConversationItem,
    Entry,
    EntryVersion,
    Grant,
    ImportResult,
    Lineage,
    Origin,
    Session,
    SessionItem,
    Store,
    Transcript,
)
from catalog.context import Context
from catalog.dialects.conversations import archive as conversations_archive
from catalog.dialects.conversations.items import new_conversation_id
from catalog.dialects.sessions import archive as sessions_archive
from catalog.entries import archive as entries_archive
from catalog.entries.schemas import Provenance
from catalog.errors import InvalidParameter, PermissionDenied
from catalog.governance.namespace import archive as store_archive
from catalog.governance.namespace import repo as namespace
from catalog.governance.namespace.schemas import (
    MAX_COMMENT,
    MAX_PROPERTIES,
    MAX_PROPERTY_KEY,
    MAX_PROPERTY_VALUE,
)
from catalog.governance.permissions import archive as grants_archive
from catalog.lineage import archive as lineage_archive
from catalog.recorder import audited, note_params, note_result
from catalog.search import archive as transcripts_archive
from catalog.search.embedder import DIMENSIONS
from catalog.search.passages import is_short
from catalog.wire.entry_keys import validate_path, validate_scope, validate_session
from catalog.wire.inputs import MAX_PRINCIPAL, blank, within
from catalog.wire.metadata import validate as validate_metadata
from catalog.wire.names import split_full_name

STORE = SecurableType.MEMORY_STORE


def _vector(text: str, where: str) -> np.ndarray:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ArchiveError(f"{where}: embedding is not base64") from None
    if len(raw) != DIMENSIONS * 4:
        raise ArchiveError(f"{where}: embedding holds {len(raw) // 4} numbers, not {DIMENSIONS}")
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(vector).all():
        raise ArchiveError(f"{where}: embedding holds a number that is not finite")
    return vector


# --- import ---------------------------------------------------------------------------------------


def _check(number: int, check: Any, *args: Any) -> Any:
    """`check(*args)`, its InvalidParameter as an ArchiveError naming the line."""
    try:
        return check(*args)
    except InvalidParameter as exc:
        raise ArchiveError(f"line {number}: {exc.message}") from None


def _uuid(value: str, number: int, name: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ArchiveError(f"line {number}: {name} {value[:60]!r} is not a UUID") from None


def _principal(value: str, number: int, name: str) -> str:
    if blank(value) or len(value) > MAX_PRINCIPAL:
        raise ArchiveError(
            f"line {number}: {name} must be a principal or group name of 1-{MAX_PRINCIPAL} characters"
        )
    return value


def _definition(store: Store) -> None:
    """The store's definition follows the rules a create or an update holds it to (line 2)."""
    _check(2, within, store.description, "description", MAX_COMMENT)
    if len(store.properties) > MAX_PROPERTIES:
        raise ArchiveError(f"line 2: properties may hold at most {MAX_PROPERTIES} entries")
    for key, value in store.properties.items():
        if not key or len(key) > MAX_PROPERTY_KEY:
            raise ArchiveError(f"line 2: property keys must be 1-{MAX_PROPERTY_KEY} characters")
        _check(2, within, value, f"properties.{key}", MAX_PROPERTY_VALUE)
    for scope in store.shared_scopes:
        _check(2, validate_scope, scope, "shared_scopes")
    if store.default_ttl_seconds is not None and store.default_ttl_seconds < 1:
        raise ArchiveError("line 2: default_ttl_seconds must be at least 1")
    if store.trust_policy is not None:
        _check(2, trust.check, store.trust_policy)
    _principal(store.owner, 2, "owner")


def _provenance(number: int, value: dict[str, Any] | None, author: str) -> dict[str, Any]:
    """An archived provenance as kept (it must read as one: 400 otherwise); where the archive has
    none, the import is where the text came from (`via` `import`, its author as the principal)."""
    if value is None:
        return {"principal": author, "via": "import", "class": "unknown"}
    try:
        msgspec.convert(value, Provenance)
    except msgspec.ValidationError as exc:
        raise ArchiveError(f"line {number}: provenance: {exc}") from None
    return value


@dataclass
class _Ids:
    """The new id of each archived entry id (also of entries deleted before the export, which
    history and lineage still name) and each archived conversation id."""

    entries: dict[str, str] = field(default_factory=dict)
    conversations: dict[str, str] = field(default_factory=dict)

    def entry(self, old: str, number: int, name: str) -> str:
        old = _uuid(old, number, name)
        return self.entries.setdefault(old, str(uuid.uuid4()))


@dataclass(frozen=True)
class Target:
    """Where an import goes, once it is authorized: an existing store, or a new one in `schema`."""

    parts: list[str]
    store: Securable
    schema: Securable | None  # None: the store exists


async def import_target(ctx: Context, principal: Principal, full_name: str) -> Target:
    """Authorize an import into `full_name` (before its body is read): MANAGE on the store when it
    exists, else CREATE_MEMORY_STORE on its schema."""
    parts = split_full_name(full_name, 3)
    store = await ctx.access.locate(STORE, parts, store_kind=None)
    if store.exists:
        await ctx.access.ensure(principal, "memory_store.import", store)
        return Target(parts, store, None)
    schema = await ctx.access.resolve(principal, "memory_store.import_new", SecurableType.SCHEMA, parts[:2])
    return Target(parts, store, schema)


async def import_archive(ctx: Context, principal: Principal, into: Target, body: bytes) -> ImportResult:
    """Restore an archive into the store `import_target` authorized (see the module's rules)."""
    parts, target, schema = into.parts, into.store, into.schema
    archive = read(body)
    definition = archive.store
    _definition(definition)
    note_params({"source": archive.header.memory_store})
    agents = ctx.settings.agents_schema.lower()
    if definition.store_kind == "session" and ".".join(parts[:2]) != agents:
        raise ArchiveError(
            f"the archive is of a session store, which lives in the agents schema {agents} "
            f"(CATALOG_AGENTS_SCHEMA), not in {'.'.join(parts[:2])}"
        )
    if schema is None:  # a new store is the importer's own while the import creates it
        await _ensure_may_write(ctx, principal, target, archive)
    model = model_id(ctx)
    name = ".".join(parts)
    try:
        async with audited(ctx.pool) as conn:
            if schema is None:
                store_id = target.node.id
                await _into_existing(conn, store_id, name, definition)
                await namespace.update_object(
                    conn,
                    STORE,
                    store_id,
                    text=definition.description,
                    properties=definition.properties,
                    owner=definition.owner,
                    updated_by=principal.name,
                )
            else:
                row = await namespace.insert_store(
                    conn,
                    schema_id=schema.node.id,
                    name=parts[2],
                    description=definition.description,
                    properties=definition.properties,
                    owner=principal.name,
                    scope_binding=definition.scope_binding,
                    shared_scopes=definition.shared_scopes,
                    kind=definition.store_kind,
                )
                store_id = row.id
                if definition.owner != principal.name:
                    await namespace.update_object(
                        conn,
                        STORE,
                        store_id,
                        text=None,
                        properties=None,
                        owner=definition.owner,
                        updated_by=principal.name,
                    )
            await namespace.set_store_binding(
                conn, store_id, definition.scope_binding, definition.shared_scopes
            )
            await namespace.set_default_ttl(conn, store_id, definition.default_ttl_seconds or 0)
            policy = definition.trust_policy
            await namespace.set_trust_policy(
                conn, store_id, None if policy is None else trust.to_json(policy), principal.name
            )
            restored = await _restore(conn, store_id, archive, model, principal.name)
            await namespace.set_legal_hold(conn, store_id, definition.legal_hold)
            note_result(restored.entries)
    except asyncpg.IntegrityConstraintViolationError as exc:
        # a row twice (one key), a broken reference or a value a table refuses: no SQL text is shown
        what = f" ({exc.constraint_name})" if getattr(exc, "constraint_name", None) else ""
        raise ArchiveError(
            f"the archive breaks a rule of the tables{what}: a row it holds twice, or a value they refuse"
        ) from None
    assert ctx.search is not None
    ctx.search.written()  # index and embed what came in
    return ImportResult(
        memory_store=name,
        created=schema is not None,
        source=archive.header.memory_store,
        counts={kind: len(archive.lines.get(kind, [])) for kind in KINDS},
        reembedded=restored.reembedded,
        conversations_renamed=restored.conversations_renamed,
    )


def _scopes(archive: Archive) -> list[str]:
    """Every scope the archive writes into its store, sorted: its entries', versions',
    conversations' and sessions' (an actor id is a scope), and those of the entries its lineage
    edges lead into; each checked as a request's."""
    found: set[str] = set()
    for number, entry in archive.of("entry", Entry):
        found.add(_check(number, validate_scope, entry.scope))
    for number, version in archive.of("entry_version", EntryVersion):
        found.add(_check(number, validate_scope, version.scope))
    for number, conversation in archive.of("conversation", Conversation):
        found.add(_check(number, validate_scope, conversation.scope))
    for number, session in archive.of("session", Session):
        found.add(_check(number, validate_scope, session.actor_id, "actor_id"))
    for number, edge in archive.of("lineage", Lineage):
        found.add(_check(number, validate_scope, edge.target_scope, "target_scope"))
    for number, origin in archive.of("origin", Origin):
        found.add(_check(number, validate_scope, origin.target_scope, "target_scope"))
    return sorted(found)


async def _ensure_may_write(ctx: Context, principal: Principal, store: Securable, archive: Archive) -> None:
    """Importing into an existing store writes what it will hold, as writes would: WRITE on it
    (`entries.write`, `sessions.write` for a session store) in every scope of the archive, held to
    grants limited to scopes; 403 naming the first scope refused, before anything is written. Not
    held to the store's scope binding, which the import sets (and who manages the store may set
    anyway), as an export reads every scope."""
    scopes = _scopes(archive)
    if not scopes:
        return  # a definition and grants only: what MANAGE may set anyway
    action = "sessions.write" if archive.store.store_kind == "session" else "entries.write"
    try:
        await ctx.access.ensure(principal, action, store)
    except PermissionDenied as exc:
        raise PermissionDenied(f"the import writes scope '{scopes[0]}': {exc.message}") from None
    ctx.access.hold_scopes(principal, store, scopes)


async def _into_existing(conn: asyncpg.Connection, store_id: str, name: str, definition: Store) -> None:
    """An existing store takes an archive of its kind only, and only when it holds nothing."""
    await store_archive.lock(conn, store_id)
    kind = await store_archive.kind(conn, store_id)
    if kind != definition.store_kind:
        raise ArchiveError(f"the archive is of a {definition.store_kind} store; {name} is a {kind} store")
    held = {
        **await entries_archive.held(conn, store_id),
        **await conversations_archive.held(conn, store_id),
        **await sessions_archive.held(conn, store_id),
    }
    if held:
        what = ", ".join(f"{kind.replace('_', ' ')}: {count}" for kind, count in held.items())
        raise ArchiveError(
            f"memory store {name} is not empty ({what}): an archive is imported only into a store that "
            "holds nothing, or into a new one"
        )


@dataclass(frozen=True)
class _Restored:
    entries: int
    reembedded: int
    conversations_renamed: int


def _version_key(key: dict[str, str] | None, number: int) -> dict[str, str] | None:
    """A version's `superseded_by`: the key of an entry ({scope, session_id, path})."""
    if key is None:
        return None
    if set(key) != {"scope", "session_id", "path"} or not all(isinstance(v, str) for v in key.values()):
        raise ArchiveError(f"line {number}: superseded_by is the key of an entry: scope, session_id, path")
    return {
        "scope": _check(number, validate_scope, key["scope"]),
        "session_id": key["session_id"],
        "path": _check(number, validate_path, key["path"]),
    }


def _grant_scopes(grant: Grant, number: int) -> list[str] | None:
    """A grant's scope patterns, as a grant could be limited by the permissions API."""
    if grant.scopes is None:
        return None
    if grant.privilege not in SCOPABLE:
        raise ArchiveError(f"line {number}: only {' and '.join(SCOPABLE)} may be limited to scopes")
    if not 1 <= len(grant.scopes) <= MAX_PATTERNS:
        raise ArchiveError(f"line {number}: scopes holds 1-{MAX_PATTERNS} scopes or prefixes ending in '*'")
    for j, pattern in enumerate(grant.scopes):
        _check(number, validate_pattern, pattern, f"scopes[{j}]")
    return list(dict.fromkeys(grant.scopes))


async def _restore(
    conn: asyncpg.Connection, store_id: str, archive: Archive, model: str, importer: str
) -> _Restored:
    """Write the archive's rows into the store; every entry and version keeps its archived author
    and records `importer`."""
    ids = _Ids()
    grantable = set(GRANTABLE[STORE])
    grants = []
    for number, grant in archive.of("grant", Grant):
        if grant.privilege not in grantable:
            raise ArchiveError(f"line {number}: {grant.privilege[:60]!r} cannot be granted on a memory store")
        grants.append(
            (
                _principal(grant.principal, number, "principal"),
                grant.privilege,
                _principal(grant.granted_by, number, "granted_by"),
                grant.granted_at,
                _grant_scopes(grant, number),
            )
        )
    await grants_archive.restore(conn, store_id, grants)

    entries, reembedded = [], 0
    for number, entry in archive.of("entry", Entry):
        vector = None
        # a vector is kept only where it is this server's recipe for certain: one passage (a
        # longer text's, made by an earlier version from its first 256 tokens, is made again)
        if entry.embedding is not None and entry.embedding_model == model and is_short(entry.contents or ""):
            vector = _vector(entry.embedding, f"line {number}")
        else:
            reembedded += 1
        entries.append(
            (
                ids.entry(entry.id, number, "id"),
                store_id,
                *_key(number, entry.scope, entry.session_id, entry.path),
                entry.contents,
                entry.description,
                entry.source_type,
                entry.creation_reason,
                entry.creation_source,
                _check(number, validate_metadata, entry.metadata),
                _positive(entry.version, number),
                entry.created_at,
                entry.created_by,
                entry.updated_at,
                entry.updated_by,
                entry.expires_at,
                vector,
                None if vector is None else model,
                entry.state,
                None
                if entry.superseded_by is None
                else ids.entry(entry.superseded_by, number, "superseded_by"),
                importer,  # whoever imported it before (the archive's imported_by) is not kept
                _provenance(number, entry.provenance, entry.updated_by),
            )
        )
    await entries_archive.restore(conn, entries)
    versions = [
        (
            *_key(number, v.scope, v.session_id, v.path),
            ids.entry(v.entry_id, number, "entry_id"),
            _positive(v.version, number),
            v.contents,
            v.description,
            _check(number, validate_metadata, v.metadata),
            v.operation,
            v.changed_at,
            v.changed_by,
            v.redacted_at,
            v.redacted_by,
            v.redaction_reason,
            v.state,
            _version_key(v.superseded_by, number),
            importer,
            _provenance(number, v.provenance, v.changed_by),
        )
        for number, v in archive.of("entry_version", EntryVersion)
    ]
    await entries_archive.replace_history(conn, store_id, versions)

    conversations = archive.of("conversation", Conversation)
    taken = await conversations_archive.taken_ids(conn, [c.id for _, c in conversations])
    renamed = 0
    for number, c in conversations:
        if c.id in ids.conversations:
            raise ArchiveError(f"line {number}: conversation {c.id[:60]} twice")
        ids.conversations[c.id] = new_conversation_id() if c.id in taken else c.id
        renamed += c.id in taken
    await conversations_archive.restore(
        conn,
        store_id,
        [
            (
                ids.conversations[c.id],
                _check(number, validate_scope, c.scope),
                c.scope_kind,
                c.metadata,
                c.last_position,
                c.created_at,
                c.created_by,
                c.updated_at,
            )
            for number, c in conversations
        ],
    )
    items = []
    for number, item in archive.of("conversation_item", ConversationItem):
        if item.conversation_id not in ids.conversations:
            raise ArchiveError(
                f"line {number}: an item of conversation {item.conversation_id[:60]}, which the archive lacks"
            )
        items.append(
            (
                ids.conversations[item.conversation_id],
                item.position,
                item.id,
                item.type,
                msgspec.json.encode(item.item).decode(),
                item.text,
                item.created_at,
                item.created_by,
            )
        )
    await conversations_archive.restore_items(conn, store_id, items)

    sessions = archive.of("session", Session)
    rows = [
        (
            _check(number, validate_session, s.session_id, "session_id"),
            _check(number, validate_scope, s.actor_id, "actor_id"),
            s.parent_session_id,
            s.root_session_id,
            s.metadata,
            s.next_position,
            s.created_at,
            s.updated_at,
            s.last_activity_at,
        )
        for number, s in sessions
    ]
    session_ids = await sessions_archive.restore(conn, store_id, rows)
    session_items = []
    for number, si in archive.of("session_item", SessionItem):
        if si.session_id not in session_ids:
            raise ArchiveError(
                f"line {number}: an item of session {si.session_id[:60]}, which the archive lacks"
            )
        session_items.append(
            (
                session_ids[si.session_id],
                si.position,
                _uuid(si.item_id, number, "item_id"),
                msgspec.json.encode(si.data).decode(),
                si.created_at,
            )
        )
    await sessions_archive.restore_items(conn, store_id, session_items)

    vectors = []
    for number, t in archive.of("transcript", Transcript):
        if t.embedding_model != model:
            continue
        thread = (
            ids.conversations.get(t.thread_id, t.thread_id) if t.source == "conversation" else t.thread_id
        )
        vectors.append((t.source, thread, t.item_id, _vector(t.embedding, f"line {number}"), model))
    kept = await transcripts_archive.restore_vectors(conn, store_id, vectors)
    reembedded += await transcripts_archive.count(conn, store_id) - kept

    edges = []
    for number, e in archive.of("lineage", Lineage):
        here = e.source_store_id is None
        edges.append(
            (
                ids.entry(e.target_entry_id, number, "target_entry_id"),
                store_id,
                *_key(number, e.target_scope, e.target_session_id, e.target_path, "target_"),
                ids.entry(e.source_entry_id, number, "source_entry_id")
                if here
                else _uuid(e.source_entry_id, number, "source_entry_id"),
                store_id
                if e.source_store_id is None
                else _uuid(e.source_store_id, number, "source_store_id"),
                *_key(number, e.source_scope, e.source_session_id, e.source_path, "source_"),
                e.created_at,
                e.created_by,
            )
        )
    await lineage_archive.restore(conn, edges)
    origins = []
    for number, o in archive.of("origin", Origin):
        here = o.source_store_id is None
        thread = o.source_thread_id
        if here and o.source_kind == "conversation":
            thread = ids.conversations.get(thread, thread)
        origins.append(
            (
                ids.entry(o.target_entry_id, number, "target_entry_id"),
                store_id,
                *_key(number, o.target_scope, o.target_session_id, o.target_path, "target_"),
                o.source_kind,
                store_id
                if o.source_store_id is None
                else _uuid(o.source_store_id, number, "source_store_id"),
                _check(number, validate_scope, o.source_scope, "source_scope"),
                thread,
                o.source_item_ids,
                o.created_at,
                o.created_by,
                o.updated_at,
                o.updated_by,
            )
        )
    await lineage_archive.restore_origins(conn, origins)
    return _Restored(len(entries), reembedded, renamed)


def _key(
    number: int, scope: str, session_id: str | None, path: str, prefix: str = ""
) -> tuple[str, str, str]:
    """An entry's key as stored: (scope, session id or '', path), checked as a request's."""
    return (
        _check(number, validate_scope, scope, f"{prefix}scope"),
        _check(number, validate_session, session_id, f"{prefix}session_id"),
        _check(number, validate_path, path, f"{prefix}path"),
    )


def _positive(version: int, number: int) -> int:
    if version < 1:
        raise ArchiveError(f"line {number}: version must be at least 1")
    return version
