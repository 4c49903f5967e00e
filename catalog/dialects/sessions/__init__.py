"""Session stores of the agent dialect (`/api/2.0/agents/session-stores`)."""

from catalog.dialects.sessions.service import erase_scope, held_stores

__all__ = ["erase_scope", "held_stores"]
