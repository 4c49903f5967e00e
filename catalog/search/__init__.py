"""Search: local embeddings, the Tantivy index and pgvector, fused into one ranking, over two
corpora with one design (`catalog.search.corpus`): entries, and the transcript items of
conversations and sessions. Ranking knows ids and scores only: the caller re-reads the hits.

Rules of the slice:
- PostgreSQL is the truth; the Tantivy index and the vectors are derived state, kept by
  background workers and always rebuildable from the tables (`catalog reindex`). A search waits
  for both to hold every write committed before it (read-your-writes), or says which leg may
  have missed rows (`Found.degraded`).
- Only the repo modules write SQL: `repo` (vector search, the embedding worker's claims and
  vectors, what ranking reads about its candidates), `change_log_repo` (the change logs the
  indexer tails and prunes) and `scope_index_repo` (large scopes' own vector indexes). Values
  are always bound; identifiers are written into SQL only from the code's constants (the
  `Corpus` table names) or quoted by PostgreSQL (`format('%I')`).
- The modules: `engine` (the `SearchEngine`: ranking, and the workers' start and stop),
  `embedding_worker` (the vectors, in the background and for a search), `query` (what a search
  is asked and answers), `embedding` (what is embedded of an entry), `placement` (where a
  blocking call runs), `indexer` (the full-text index kept in step with the change log),
  `fulltext` (the Tantivy index itself), `fusion` (the scores, and how a search's are
  assembled), `neighbours` (numbered neighbours), `scope_index` (which scopes get a vector
  index of their own), `embedder` (the local model), `passes` (waiting for a worker's next
  pass, the change feed), `health` (a worker's failures and status), `archive_repo` (the
  transcripts' vectors a store's archive holds: `catalog.backup`). The engine's public names
  are re-exported here; the tuning constants live in `engine` and `embedding_worker` (patch
  them there).
"""

from catalog.search import archive_repo as archive
from catalog.search.change_log_repo import log_changed
from catalog.search.embedding import embedding_text
from catalog.search.engine import SEARCH_WAIT, CorpusSearch, SearchEngine
from catalog.search.query import (
    Explained,
    Found,
    Given,
    HitScores,
    LegRun,
    Query,
    Ranking,
    SearchStatus,
)

__all__ = [
    "SEARCH_WAIT",
    "CorpusSearch",
    "Explained",
    "Found",
    "Given",
    "HitScores",
    "LegRun",
    "Query",
    "Ranking",
    "SearchEngine",
    "SearchStatus",
    "archive",
    "embedding_text",
    "log_changed",
]
