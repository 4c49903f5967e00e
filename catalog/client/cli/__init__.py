"""The `catalog` command's remote commands: stores, grants, entries and the audit log of a running
server, through `catalog.client`.

Rules:
- the server is `--url` (else `CATALOG_URL`, else http://127.0.0.1:8080), the bearer token
  `--token` (else `CATALOG_TOKEN`); `--json` prints the API's JSON answer unchanged (a list read
  over several pages: one object of the same shape holding every item read). The three options
  may come before or after the subcommand;
- otherwise stdout gets plain tables for people (long cells cut, times in UTC), and stderr the
  progress of lists read over several pages when it is a terminal;
- any failure exits 1 after exactly one line `error: CODE: message` on stderr: the server's
  error code, `CONNECTION_FAILED`/`TIMEOUT` when no answer came, `USAGE` for arguments the
  command itself refuses.

The modules: `base` (options, dispatch, output), `namespace` (catalogs, schemas, stores, grants,
groups), `entries`, `transfer` (export and import), `audit`, and `parser` (the arguments).
"""

from catalog.client.cli.audit import audit_verify
from catalog.client.cli.base import Parser, remote_options, run, wants_remote
from catalog.client.cli.parser import add_commands

__all__ = ["Parser", "add_commands", "audit_verify", "remote_options", "run", "wants_remote"]
