"""Entries: the one owner of entry behaviour. Each operation (`catalog.entries.operations`) is
validated, authorized on its store through the access seam, held to the store's scope binding,
and run here; both dialects only build operations and shape the replies.

Rules:
- an entry's key is (store, scope, session or none, path); every write is one statement (or a
  row-locked read-modify-write for edits), so concurrent writers never lose an update;
- versions give optimistic concurrency: every change bumps `version` (the ETag); an expected
  version that is stale is 409 ABORTED;
- a caller holding WRITE but not READ learns nothing of what a store holds: its writes are
  acknowledged without contents, an edit that depends on the text needs READ too, and its APPEND
  is never deduplicated (whether it changed the entry would say what the entry held);
- a search ranks in the engine (`catalog.search`) and every hit is re-read here, so a deleted
  entry or an old version is never answered;
- every change records its provenance (`catalog.entries.provenance`: who, through what channel,
  from what, with which model), and a store's trust policy (`catalog.access.trust`) judges
  every write and edit: a write it holds is kept `quarantined`, and stays so (with any later
  change to it) until a MANAGE holder approves or rejects it (`review`). A held entry is read
  (get, list, search, as-of, history's text) only by MANAGE holders and its author, and only when
  they ask for held entries (`include_quarantined`); a state change, a forget by query and the
  memory tools never reach it. A store without a policy holds nothing.

The modules: `core` (validation, the store, trust, the operations on one entry, erasure's),
`searching`, `versions` (history, restore, state, redaction), `batch` and `review`.
"""

from catalog.entries.service.batch import (
    MAX_BATCH,
    BatchResult,
    batch_write,
)
from catalog.entries.service.core import (
    Cursor,
    Page,
    Written,
    apply_change,
    check_binding,
    delete,
    delete_scope,
    edit,
    erase_scope,
    get,
    held_stores,
    list_entries,
    may_review,
    resolve_store,
    write,
)
from catalog.entries.service.review import (
    MAX_REVIEW_REASON,
    QueueCursor,
    Reviewed,
    quarantined,
    review,
)
from catalog.entries.service.searching import (
    AS_OF_SEARCH_MAX,
    MIN_CANDIDATES,
    Forgotten,
    delete_matching,
    delete_matching_floor,
    search,
    search_input,
)
from catalog.entries.service.versions import (
    HISTORY_LIMIT,
    history,
    redact,
    restore,
    set_state,
)

__all__ = [
    "AS_OF_SEARCH_MAX",
    "HISTORY_LIMIT",
    "MAX_BATCH",
    "MAX_REVIEW_REASON",
    "MIN_CANDIDATES",
    "BatchResult",
    "Cursor",
    "Forgotten",
    "Page",
    "QueueCursor",
    "Reviewed",
    "Written",
    "apply_change",
    "batch_write",
    "check_binding",
    "delete",
    "delete_matching",
    "delete_matching_floor",
    "delete_scope",
    "edit",
    "erase_scope",
    "get",
    "held_stores",
    "history",
    "list_entries",
    "may_review",
    "quarantined",
    "redact",
    "resolve_store",
    "restore",
    "review",
    "search",
    "search_input",
    "set_state",
    "write",
]
