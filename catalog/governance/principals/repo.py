"""SQL for the principals the server knows (see `catalog.governance.principals.service` for who they are)."""

from __future__ import annotations

from typing import TypeAlias

import asyncpg

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

# Every known principal once: token subjects that authenticated, grantees that are not groups
# (`account users` is the built-in group of everyone), and principal members of groups.
_KNOWN = """
SELECT name FROM principals
UNION
SELECT principal FROM grants
WHERE principal <> 'account users' AND principal NOT IN (SELECT display_name FROM groups)
UNION
SELECT member FROM group_members WHERE member_type = 'principal'
"""


async def record(conn: Conn, name: str) -> None:
    """Record a token subject (nothing changes when it is there already)."""
    await conn.execute("INSERT INTO principals (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", name)


async def count_known(conn: Conn, name: str | None) -> int:
    """How many known principals there are (named `name`, when given: 0 or 1)."""
    total = await conn.fetchval(
        f"SELECT count(*) FROM ({_KNOWN}) AS known WHERE ($1::text IS NULL OR name = $1)", name
    )
    return int(total)


async def list_known(conn: Conn, name: str | None, offset: int, limit: int) -> list[str]:
    """Known principals in name order (only `name`, when given), from the `offset`-th on."""
    rows = await conn.fetch(
        f"SELECT name FROM ({_KNOWN}) AS known WHERE ($1::text IS NULL OR name = $1) "
        "ORDER BY name OFFSET $2 LIMIT $3",
        name,
        offset,
        limit,
    )
    return [row["name"] for row in rows]
