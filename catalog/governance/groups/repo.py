"""SQL for groups and memberships. Changes reach `policy_log` by trigger."""

from __future__ import annotations

from typing import TypeAlias

import asyncpg

from catalog.db import locks
from catalog.errors import AlreadyExists

Conn: TypeAlias = asyncpg.Connection


async def lock_policy(conn: Conn) -> None:
    """The policy writers' lock (the log triggers take the same one): the membership checks made
    under it see every committed change and no concurrent one."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", locks.POLICY_LOG)


async def insert_group(conn: Conn, display_name: str, created_by: str) -> str:
    try:
        return str(
            await conn.fetchval(
                "INSERT INTO groups (display_name, created_by) VALUES ($1, $2) RETURNING id",
                display_name,
                created_by,
            )
        )
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(f"group {display_name} already exists") from exc


async def add_members(conn: Conn, group_id: str, members: list[tuple[str, str]]) -> None:
    await conn.executemany(
        "INSERT INTO group_members (group_id, member_type, member) VALUES ($1, $2, $3) "
        "ON CONFLICT DO NOTHING",
        [(group_id, kind, member) for kind, member in members],
    )


async def remove_members(conn: Conn, group_id: str, members: list[tuple[str, str]]) -> None:
    await conn.executemany(
        "DELETE FROM group_members WHERE group_id = $1 AND member_type = $2 AND member = $3",
        [(group_id, kind, member) for kind, member in members],
    )


async def delete_group(conn: Conn, group_id: str) -> str | None:
    """Delete a group, its memberships (as group and as member) and the grants made to it."""
    name = await conn.fetchval("DELETE FROM groups WHERE id = $1 RETURNING display_name", group_id)
    if name is not None:
        await conn.execute("DELETE FROM group_members WHERE member_type = 'group' AND member = $1", group_id)
        await conn.execute("DELETE FROM grants WHERE principal = $1", name)
    return name


async def get_group(conn: Conn | asyncpg.Pool, group_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT id::text AS id, display_name FROM groups WHERE id = $1", group_id)


async def list_groups(conn: Conn | asyncpg.Pool, display_name: str | None) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT id::text AS id, display_name FROM groups WHERE ($1::text IS NULL OR display_name = $1) "
        "ORDER BY display_name",
        display_name,
    )


async def members_of(conn: Conn | asyncpg.Pool, group_ids: list[str]) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT m.group_id::text AS group_id, m.member_type, m.member, g.display_name AS member_group "
        "FROM group_members m LEFT JOIN groups g ON m.member_type = 'group' AND g.id::text = m.member "
        "WHERE m.group_id = ANY($1::uuid[]) ORDER BY m.member_type DESC, m.member",
        group_ids,
    )
