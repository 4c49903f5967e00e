"""OpenAI-compatible conversations, each bound to one memory store and one scope."""

from catalog.conversations.service import erase_scope, held_stores

__all__ = ["erase_scope", "held_stores"]
