"""Every PostgreSQL advisory lock key the application takes, each named once.

Two of them are also written, as decimal literals, in migration SQL, which is append-only and
so cannot refer to these names. `tests/test_migrations.py` reads the SQL and checks that every
lock number there is one of these constants, in the migration named beside it, so the two cannot
drift. Keys are 64-bit (`pg_advisory_lock(bigint)`); each is four ASCII letters, so they stay
apart and can be recognised in `pg_locks`.
"""

from __future__ import annotations

# The migration runner's session lock (catalog/db/migrate.py): several processes starting on one
# database apply the migrations one after another. No SQL takes it.
MIGRATIONS = 0x6D656D63  # "memc"

# The policy writers' transaction lock: the policy_log triggers of 0003_governance.sql take it
# (as 1886350457) before numbering a change, and catalog/governance/groups/repo.py takes it so that checks
# made under it see every committed policy change and no concurrent one.
POLICY_LOG = 0x706F6C79  # "poly" = 1886350457

# The audit chain's transaction lock: audit_append() of 0009_audit_append.sql takes it (as
# 1635083380) while it reads the chain's head and appends; its version of
# 0042_audit_append_if_free.sql may ask for it without waiting. The application only calls the
# function; the number is named here so that nothing else reuses it.
AUDIT_CHAIN = 0x61756474  # "audt" = 1635083380

# Which migration's SQL takes each lock that SQL takes (checked by tests/test_migrations.py).
IN_MIGRATIONS: dict[int, tuple[str, ...]] = {
    POLICY_LOG: ("0003_governance.sql", "0032_scope_grants.sql"),  # the trigger, then its new version
    AUDIT_CHAIN: ("0009_audit_append.sql", "0042_audit_append_if_free.sql"),
}
