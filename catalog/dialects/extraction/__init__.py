"""Memory extraction: an upstream model turns a session's transcript into memory entries of the
session's actor, through the memory tools (save, update, delete), so that it updates a topic
instead of duplicating it."""
