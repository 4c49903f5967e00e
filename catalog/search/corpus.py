"""What the search engine indexes: two corpora with one design.

A corpus is a PostgreSQL table of searchable rows and the change log its triggers write. Both
tables name their searchable columns alike (`id`, `store_id`, `scope`, `session_id`, `path`,
`contents`, `description`, `version`, `embedding`, `embedded_version`; entries also have
`metadata`), so one indexer, one
embedding worker and one vector search serve both; each corpus has its own Tantivy index
directory and its own watermark.

- `entries`: long-term memory (`entries`, `entry_changes`).
- `transcripts`: the text of conversation and session items, episodic memory
  (`transcript_items`, `transcript_changes`; kept by triggers on the item tables, see migration
  0015). There `session_id` is `conversation:<id>` or `session:<id>` and `path` the item's role.

Table and column names here are constants of the code, never input: they are written into SQL.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Corpus:
    name: str
    table: str
    changes: str  # the change log: (seq, <key>, op)
    key: str  # the change log's column naming the changed row
    directory: str  # the index directory under the index root ("" = the root itself)
    hnsw_index: str
    metadata: str = "NULL::jsonb"  # the column of its rows' metadata (for filters), if any
    state: str = "'active'"  # the column of its rows' state (consolidation), if any
    # the boolean column of the rows whose vector the whole table's HNSW index holds (`hnsw_index`
    # is partial on it; catalog.search.repo.GRAPH_MIN), if any ("": every row with a vector)
    graph: str = ""


ENTRIES = Corpus(
    "entries",
    "entries",
    "entry_changes",
    "entry_id",
    "",
    "entries_embedding_hnsw",
    "metadata",
    "state",
    "in_graph",
)
TRANSCRIPTS = Corpus(
    "transcripts",
    "transcript_items",
    "transcript_changes",
    "item_id",
    "transcripts",
    "transcript_items_embedding_hnsw",
)
CORPORA = (ENTRIES, TRANSCRIPTS)
