"""Where each table goes when the database is sharded with Citus: every table of the schema, in
one of three places (tests/test_sharding.py fails on a table that is in none, and checks the
keys of the distributed ones against the live catalog).

- distributed: a store's data, split by the store's id (the table's distribution column) so
  that all of one store lives on one shard, its tables colocated: a statement that names the
  store runs on that shard alone. Its primary key and unique keys hold the distribution column,
  and a foreign key between two of them goes through it on both sides (migration 0028).
- reference: small tables every node holds a full copy of, which distributed tables reference
  (foreign keys to `memory_stores`) and whose rows their triggers and joins read (names, a
  store's properties and legal hold).
- local: tables that stay on the coordinator only, read and written by the server's processes
  there and never joined with a distributed table: governance (grants, groups and the policy log,
  which numbers changes under one advisory lock and one sequence), the audit log (one hash chain
  under one lock), its keys, the page-token key, the indexer's prune marks, the pipelines'
  bookkeeping and the migration record.

`citus_statements()` is what an operator runs on the coordinator, in order
(docs/operations/sharding.md).
"""

from __future__ import annotations

# Distributed tables and their distribution columns, each group in an order in which a table
# comes after the tables it references. Tables with the same column type are colocated with the
# first of their group.
DISTRIBUTED: dict[str, str] = {
    "entries": "store_id",
    "entry_versions": "store_id",  # history, by entry key
    "entry_changes": "store_id",  # the entries' change log (the indexer tails it)
    "conversations": "store_id",
    "conversation_items": "store_id",
    "agent_sessions": "store_id",
    "session_items": "store_id",
    "extraction_marks": "store_id",  # the session's store (the session store)
    "transcript_items": "store_id",
    "transcript_changes": "store_id",
    "entry_lineage": "target_store_id",  # an edge belongs to the store of the entry it explains
    "transcript_lineage": "target_store_id",
    # the one lookup by conversation id alone (the OpenAI API names a conversation by id): its
    # own colocation group, distributed by that id
    "conversation_stores": "conversation_id",
}

# The first table of each colocation group: the others of the group are colocated with it.
COLOCATION_GROUPS: dict[str, tuple[str, ...]] = {
    "entries": tuple(t for t, column in DISTRIBUTED.items() if column in ("store_id", "target_store_id")),
    "conversation_stores": ("conversation_stores",),
}

# Reference tables, each after the tables it references.
REFERENCE: tuple[str, ...] = ("catalogs", "schemas", "memory_stores", "metastore")

LOCAL: tuple[str, ...] = (
    "grants",
    "groups",
    "group_members",
    "policy_log",
    "principals",
    "audit_events",
    "audit_pepper",
    "subject_keys",
    "audit_key_epoch",
    "page_token_key",
    "change_log_pruned",
    "memory_pipelines",
    "pipeline_runs",
    "pipeline_run_sessions",
    "schema_migrations",
)


def group_of(table: str) -> str:
    """The colocation group (its first table) of a distributed table."""
    return next(first for first, members in COLOCATION_GROUPS.items() if table in members)


def citus_statements() -> list[str]:
    """The statements that place every table, in the order they must run: reference tables
    first (distributed tables reference them), then each colocation group, its first table first."""
    statements = [f"SELECT create_reference_table('{table}');" for table in REFERENCE]
    for first, members in COLOCATION_GROUPS.items():
        for table in members:
            colocate = "'none'" if table == first else f"'{first}'"
            column = DISTRIBUTED[table]
            statements.append(
                f"SELECT create_distributed_table('{table}', '{column}', colocate_with => {colocate});"
            )
    return statements
