"""The parameters an audit event may carry, each declared once with what the log keeps of it.

An event's `request_params` are a request's path and query parameters (catalog.web.middleware)
and what the code adds (`recorder.writer.note_params`, an operation's own parameters: a tool
call's, a pipeline run's, a maintenance action's). The audit log is append-only and kept for
years, so what a parameter may hold decides how it is kept, here and nowhere else:

- `CLEAR`: names of securables and principals, ids the server made, counts, flags, modes, times:
  kept as they are;
- `SCOPE` / `SCOPES`: a scope or an end user (one, or a list or one string): their pseudonyms
  (catalog.recorder.pseudonyms), which erasing the subject unlinks;
- `PATH`: an entry's path, or the paths an action names (one, or a list), and `FILTER`, a metadata
  filter whose values may name anyone: keyed with the subject of the event's scope;
- `REDACTED`: never kept (`[redacted]`): texts (a console search's words), page tokens (they
  hold a path, a scope and a session id), credentials.

A parameter this table does not name is kept as `[redacted]`, and noted (`UNDECLARED`: the test
suite fails a test whose events carried one), so that a new personal field under a new key is
never stored in clear. The three uses derive from this table: the pseudonyms at write time
(`catalog.recorder.pseudonyms`), the auditors' search for a scope
(`catalog.audit.auditors.repo`), and the pseudonyms a trace's spans carry (`catalog.telemetry`).
"""

from __future__ import annotations

from enum import Enum


class Kept(Enum):
    CLEAR = "clear"
    SCOPE = "scope"
    SCOPES = "scopes"
    PATH = "path"
    FILTER = "filter"
    REDACTED = "redacted"


_CLEAR = (
    # securables, principals and the server's own ids
    "full_name", "name", "new_name", "catalog_name", "schema_name", "store_name", "store_id",
    "securable_type", "securable_full_name", "securable", "managed_memory_store_id",
    "session_store", "session_store_name", "session_store_id", "source", "principal", "user_id",
    "group_id", "requested_by", "configured_by", "conversation_id", "item_id", "entry_id",
    "session_id", "pipeline", "pipeline_id", "run", "run_id", "tool", "step", "phase", "trigger",
    "state", "decision", "action", "action_name", "legal_hold", "trust_policy", "held",
    "held_rules", "held_classifier", "why", "next", "file_path", "done", "admin", "version",
    "embeddings", "status_code",
    # how a request reads: pages, order, modes, times, flags
    "page_size", "max_results", "startIndex", "count", "limit", "order", "order_by", "direction",
    "depth", "mode", "top_k", "min_score", "as_of", "since", "until", "after", "start_time",
    "end_time", "update_mask", "read_mask", "include", "include_superseded",
    "include_quarantined", "all", "force", "dry_run", "truncated",
    # what a pipeline run or a maintenance step reports
    "sessions_total", "sessions_skipped", "sessions_failed", "sessions_extracted",
    "scopes_reviewed", "failed_scopes", "superseded", "split", "merged",
)  # fmt: skip

PARAMS: dict[str, Kept] = {
    **dict.fromkeys(_CLEAR, Kept.CLEAR),
    "scope": Kept.SCOPE,
    "actor_id": Kept.SCOPE,  # an end user: the scope it acts in
    "scopes": Kept.SCOPES,
    "actor_ids": Kept.SCOPES,
    # an entry's path (`path_prefix`: the start of one), and the paths a tool call or a maintenance
    # action names
    **dict.fromkeys(("path", "path_prefix", "by", "into", "paths", "sources", "written"), Kept.PATH),
    "filter": Kept.FILTER,
    **dict.fromkeys(("q", "query", "page_token", "token"), Kept.REDACTED),
}

REDACTED = "[redacted]"  # what an event holds in place of a value it does not keep

# the keys an event carried that PARAMS does not name, since the last `undeclared()` (kept as
# `[redacted]`; a request's own unknown query parameters are not noted: the client chose them)
UNDECLARED: set[str] = set()


def keys_of(*kinds: Kept) -> tuple[str, ...]:
    """The declared parameters kept as one of `kinds`, in the table's order."""
    return tuple(key for key, kind in PARAMS.items() if kind in kinds)


def undeclared() -> set[str]:
    """The undeclared keys noted since the last call (and forget them)."""
    seen = set(UNDECLARED)
    UNDECLARED.clear()
    return seen
