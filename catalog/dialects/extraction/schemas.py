"""Wire types of `POST /api/2.0/agents/session-stores/{store}/sessions/{session_id}/extractions`,
as the public `databricks-agentbricks` SDK (`Session.extract_memories`) and the generated
`databricks-sdk` client send and read them."""

from __future__ import annotations

from typing import Annotated

import msgspec

from catalog.dialects.agents.schemas import AgentEntry
from catalog.wire import Input, Output
from catalog.wire.inputs import NO_NUL

MAX_INSTRUCTIONS = 16 * 1024


class ExtractionRequest(Input, kw_only=True):
    # `memory-stores/{id}` (what the SDKs send) or the bare id
    memory_store: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^(memory-stores/)?[a-z][a-z0-9-]{1,54}[a-z0-9]$",
            description="the memory store: `memory-stores/{id}` or `{id}`",
        ),
    ]
    instructions: Annotated[str, msgspec.Meta(max_length=MAX_INSTRUCTIONS, pattern=NO_NUL)] | None = None
    dry_run: bool = False


class ExtractionResult(Output, kw_only=True):
    name: str  # a correlation id (the request's id): for logs and the audit log, not a resource
    entries: list[AgentEntry]  # written (or, in a dry run, that would be written), in order
