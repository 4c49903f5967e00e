"""Session stores of the agent dialect (`/api/2.0/agents/session-stores`); `archive`: the sessions
a store's archive holds (`catalog.backup`)."""

from catalog.dialects.sessions import archive_repo as archive
from catalog.dialects.sessions.service import erase_scope, held_stores

__all__ = ["archive", "erase_scope", "held_stores"]
