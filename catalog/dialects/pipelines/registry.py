"""The steps a pipeline run may take after its sessions, in the order it takes them (`STEPS`), and
what erasing a data subject takes out of the runs (their reports through each step's own rule,
their errors)."""

from __future__ import annotations

import asyncpg

from catalog.dialects.pipelines import maintenance, repo
from catalog.dialects.pipelines.steps import Step

STEPS: dict[str, Step] = {step.name: step for step in (maintenance.STEP,)}


async def erase_subject(conn: asyncpg.Connection, subject: str) -> int:
    """Take a data subject out of the runs, in the caller's transaction (`catalog.erasure`)."""
    return await repo.erase_subject(conn, subject, {name: step.erase for name, step in STEPS.items()})
