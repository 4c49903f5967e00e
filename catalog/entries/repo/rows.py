"""An entry as stored (`EntryRow`, its `Key`, the `Fields` a write sets) and the SQL pieces
every statement on entries shares: its columns, the live and state conditions, the key's match."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import asyncpg
import msgspec

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


class Key(NamedTuple):
    """An entry's key, its fields in the order of the `$1`-`$4` of `KEY` (passed as `*key`)."""

    store_id: str
    scope: str
    session_id: str  # '' for none
    path: str


class EntryRow(msgspec.Struct, frozen=True, kw_only=True):
    """An entry as stored (times in epoch milliseconds; `session_id` '' for none)."""

    id: str
    store_id: str
    scope: str
    session_id: str
    path: str
    contents: str | None
    description: str | None
    source_type: str | None
    creation_reason: str | None
    creation_source: str | None
    version: int
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    expires_at: int | None = None  # epoch milliseconds; None: never
    metadata: dict[str, Any] | None = None
    state: str = "active"  # active | superseded | merged
    superseded_by: dict[str, str] | None = None  # {scope, session_id, path} of the entry replacing it
    imported_by: str | None = None  # who imported it from an archive (created_by is the archive's)
    # where its current text came from (catalog.entries.provenance); None: written before it was kept
    provenance: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self.state == "active"

    @property
    def held(self) -> bool:
        """Held for review by the store's trust policy (`quarantined`)."""
        return self.state == "quarantined"

    @property
    def has_contents(self) -> bool:
        return bool(self.contents)

    @property
    def key(self) -> Key:
        return Key(self.store_id, self.scope, self.session_id, self.path)


class Fields(msgspec.Struct, frozen=True, kw_only=True):
    contents: str | None
    description: str | None
    source_type: str | None
    creation_reason: str | None = None
    creation_source: str | None = None
    metadata: dict[str, Any] | None = None  # None: none given (an overwrite or append keeps the entry's)
    provenance: dict[str, Any] | None = None  # where this write came from (the version keeps it)
    held: bool = False  # the store's trust policy holds it for review (`quarantined`)

    @property
    def values(self) -> tuple[Any, ...]:
        """In the order of `_INSERT`'s $5.. parameters."""
        return (
            self.contents,
            self.description,
            self.source_type,
            self.creation_reason,
            self.creation_source,
            self.metadata,
            self.provenance,
            self.held,
        )


@dataclass(frozen=True)
class Held:
    """Which entries held for review a read answers: none, every one (`author` None: a MANAGE
    holder's read) or those one principal wrote (`author`: its own)."""

    include: bool = False
    author: str | None = None


NO_HELD = Held()


# the states a read answers: active ones; with $a superseded and merged ones; with $b held ones, of
# the author $c when given (NULL: any); `{col}` is the column that names a held version's author
_STATES = (
    "(state = 'active' OR (${a} AND state IN ('superseded', 'merged')) "
    "OR (${b} AND state = 'quarantined' AND (${c}::text IS NULL OR {col} = ${c})))"
)


def states(a: int, b: int, c: int, col: str = "updated_by", alias: str = "") -> str:
    """The state condition of a read, its flags and author at parameters $a, $b, $c."""
    condition = _STATES.replace("${a}", f"${a}").replace("${b}", f"${b}").replace("${c}", f"${c}")
    condition = condition.format(col=f"{alias}{col}")
    return condition.replace("state", f"{alias}state") if alias else condition


COLUMNS = (
    "id, store_id, scope, session_id, path, contents, description, source_type, creation_reason, "
    "creation_source, version, "
    "(extract(epoch FROM created_at) * 1000)::bigint AS created_at, created_by, "
    "(extract(epoch FROM updated_at) * 1000)::bigint AS updated_at, updated_by, "
    "(extract(epoch FROM expires_at) * 1000)::bigint AS expires_at, metadata, state, imported_by, "
    "provenance, "
    # the key of the entry that supersedes it (None when there is none, or it is gone)
    "(SELECT jsonb_build_object('scope', s.scope, 'session_id', s.session_id, 'path', s.path) "
    " FROM entries s WHERE s.store_id = entries.store_id AND s.id = entries.superseded_by) AS superseded_by"
)


# an entry past its expiry is gone for every read, before the sweep deletes it
LIVE = "(expires_at IS NULL OR expires_at > clock_timestamp())"


KEY = "store_id = $1 AND scope = $2 AND session_id = $3 AND path = $4"


def row_of(record: asyncpg.Record | None) -> EntryRow | None:
    if record is None:
        return None
    values = dict(record)
    values["id"], values["store_id"] = str(values["id"]), str(values["store_id"])
    return EntryRow(**values)


def rows_of(records: Sequence[asyncpg.Record]) -> list[EntryRow]:
    return [row for row in map(row_of, records) if row is not None]
