"""PostgreSQL: the embedded server, migrations, the connection pool, the health probe, and the few
statements of the server itself (`databases`: creating the embedded database; `keys`: the
page-token key)."""

from catalog.db.embedded import EmbeddedPostgres, running_url
from catalog.db.health import DatabaseMonitor
from catalog.db.migrate import MIGRATIONS_DIR, apply_migrations, load_migrations
from catalog.db.pool import atomic, create_pool

__all__ = [
    "MIGRATIONS_DIR",
    "DatabaseMonitor",
    "EmbeddedPostgres",
    "apply_migrations",
    "atomic",
    "create_pool",
    "load_migrations",
    "running_url",
]
