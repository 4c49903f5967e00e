"""OpenAI-compatible conversations, each bound to one memory store and one scope."""

from catalog.dialects.conversations.service import erase_scope, held_stores

__all__ = ["erase_scope", "held_stores"]
