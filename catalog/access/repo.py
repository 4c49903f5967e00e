"""SQL of the governance engine: its reads of the policy (loaded whole at start, then followed
through `policy_log`) and of a securable's chain. The engine's only module that talks to
PostgreSQL; the policy's writes are the slices' (`permissions`, `groups`, and `namespace` for a
rename), made through their own repos."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

# The chain of existing objects named by (catalog, schema, store), each part NULL when not asked
# for, with the policy revision read in the same statement (so a request decides on a policy at
# least as new as what it sees), and the store's scope rules (its binding and shared scopes: what
# every request on its entries checks, read with the store rather than by another query) and its
# trust policy (what every write to its entries is judged by; NULL for a store without one); and
# for a search ($5: the scopes it reads), the head of the entries' change log among the changes of
# those scopes (`changes`, one probe of `entry_changes_scope` a scope, and one for the changes
# logged without a scope, which count for every search) and whether an entry of the store lacks
# its vector (`unembedded`, on the partial index of such rows): what its full-text index must
# hold, and whether its vectors are complete, for every write to those scopes committed before
# the request, known without queries of its own (other requests read NULL: the subqueries in an
# untaken CASE branch do not run). With $6, the row of the deepest object asked
# for, whole, as JSON (`row`): what a request that shows that object answers with, read in the
# same trip (the slice that owns the table reads its columns).
_CHAIN = """
SELECT c.id AS c_id, c.owner AS c_owner, s.id AS s_id, s.owner AS s_owner, m.id AS m_id, m.owner AS m_owner,
       m.scope_binding AS m_scope_binding, m.shared_scopes AS m_shared_scopes,
       m.trust_policy AS m_trust_policy,
       (SELECT coalesce(max(seq), 0) FROM policy_log) AS revision,
       CASE WHEN $5::text[] IS NOT NULL THEN greatest(
           0,
           (SELECT max(h.seq) FROM unnest($5::text[]) AS w(scope) CROSS JOIN LATERAL (
                SELECT c.seq FROM entry_changes c WHERE c.store_id = m.id AND c.scope = w.scope
                ORDER BY c.seq DESC LIMIT 1) h),
           (SELECT c.seq FROM entry_changes c WHERE c.store_id = m.id AND c.scope IS NULL
            ORDER BY c.seq DESC LIMIT 1))
       END AS changes,
       CASE WHEN $5::text[] IS NOT NULL THEN EXISTS (
           SELECT 1 FROM entries WHERE store_id = m.id AND embedded_version IS DISTINCT FROM version)
       END AS unembedded,
       CASE WHEN $6::boolean THEN
           CASE WHEN $3::text IS NOT NULL THEN to_jsonb(m) WHEN $2::text IS NOT NULL THEN to_jsonb(s)
                ELSE to_jsonb(c) END
       END AS row
FROM (SELECT 1) AS one
LEFT JOIN catalogs c ON c.name = $1
LEFT JOIN schemas s ON s.catalog_id = c.id AND s.name = $2
LEFT JOIN memory_stores m ON m.schema_id = s.id AND m.name = $3 AND ($4::text IS NULL OR m.kind = $4)
"""


@dataclass(frozen=True)
class PolicyRows:
    """The whole policy as of `revision`, read in one snapshot: the rows of `groups` (id,
    display_name), `group_members` (group_id, member_type, member) and `grants` (securable_id,
    principal, privilege, scope patterns as JSON or '')."""

    revision: int
    groups: list[asyncpg.Record]
    members: list[asyncpg.Record]
    grants: list[asyncpg.Record]


async def load_policy(pool: asyncpg.Pool) -> PolicyRows:
    """Every group, membership and grant, with the policy log's revision they are current at
    (one repeatable-read transaction, so the revision and the rows agree)."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        revision = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM policy_log")
        groups = await conn.fetch("SELECT id::text, display_name FROM groups")
        members = await conn.fetch("SELECT group_id::text, member_type, member FROM group_members")
        grants = await conn.fetch(
            "SELECT securable_id::text, principal, privilege, coalesce(array_to_json(scopes)::text, '') "
            "FROM grants"
        )
    return PolicyRows(revision, groups, members, grants)


async def policy_changes(pool: asyncpg.Pool, after: int, limit: int) -> list[asyncpg.Record]:
    """At most `limit` rows of `policy_log` past seq `after`, in seq order: seq, kind, op, a, b, c, d."""
    # the LIMIT keeps the plan on the primary key even as a generic prepared plan
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT seq, kind, op, a, b, c, d FROM policy_log WHERE seq > $1 ORDER BY seq LIMIT $2", after, limit
    )
    return rows


async def chain_row(
    conn: asyncpg.Connection | asyncpg.Pool,
    catalog: str | None,
    schema: str | None,
    store: str | None,
    store_kind: str | None,
    fresh: Sequence[str] | None = None,
    whole: bool = False,
) -> asyncpg.Record:
    """The ids and owners of the named catalog, schema and store (`c_`, `s_`, `m_`; NULL where
    absent; a store only of `store_kind` unless None), the store's `m_scope_binding`,
    `m_shared_scopes` and `m_trust_policy`, the policy `revision`; with `fresh` (a search: the
    scopes it reads), the head of the entries' change log among those scopes' changes `changes`
    (0 without a store) and whether an entry of the store lacks its vector `unembedded` (else
    both NULL); with `whole`, the deepest named object's row as JSON, `row` (NULL where absent or
    not asked for)."""
    scopes = None if fresh is None else list(fresh)
    row = await conn.fetchrow(_CHAIN, catalog, schema, store, store_kind, scopes, whole)
    assert row is not None  # one row always: the joins are outer joins onto a single row
    return row
