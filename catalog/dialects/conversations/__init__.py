"""OpenAI-compatible conversations, each bound to one memory store and one scope; `archive`: the
conversations a store's archive holds (`catalog.backup`)."""

from catalog.dialects.conversations import archive_repo as archive
from catalog.dialects.conversations.service import erase_scope, held_stores

__all__ = ["archive", "erase_scope", "held_stores"]
