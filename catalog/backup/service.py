"""Backup and restore of one store: an export writes it as a portable archive (JSON lines, see
`catalog.backup.schemas`), an import restores an archive into an empty store.

Rules:
- an export needs MANAGE on the store (`memory_store.export`) and READ on it (`entries.read`, or
  `sessions.read` for a session store), and reads every scope, whatever the store's scope binding
  (who manages a store may set its binding anyway); it reads one snapshot of the store (REPEATABLE
  READ), so the archive is the store at one instant. `scope` limits it to one scope's entries,
  history, conversations, sessions and lineage (the definition and grants come whole);
- the last line is a manifest: the count of every kind of line and the sha256 of every line
  before it, so an archive cut short or altered is refused whole;
- an import goes into the store named by the route: an existing store that holds nothing
  (`memory_store.import`: MANAGE on it) or a new one, which the import creates
  (`memory_store.import_new`: CREATE_MEMORY_STORE on the schema). Importing into an existing
  store writes its data: it also needs WRITE there (`entries.write`, or `sessions.write` for a
  session store) in every scope the archive holds, held to grants limited to scopes (403 naming
  the first scope refused, before anything is written), not to the store's scope binding (as an
  export); a new store is the importer's own while the import creates it. The store takes the
  archive's definition (description, properties, owner, scope binding, shared scopes, default
  TTL, legal hold, trust policy), grants, entries with their ids renewed, versions, times and
  authors, history, vectors, conversations, sessions, transcript vectors and lineage edges, in one
  transaction with the request's audit event: all of it or nothing;
- the authors an archive names are kept as its original authors (`created_by`, `changed_by`);
  every entry and version it writes records the importer (`imported_by`, which an export
  carries; the `imported_by` of an archive, from an earlier import, is replaced);
- entries and versions keep the provenance the archive carries (where their text came from) and
  their state (an entry held for review stays held); one the archive has none for is recorded as
  imported (`via` `import`, its author the principal);
- a vector is kept when the importing server's embedding model made it (each archived vector
  names its model); every other row is embedded anew by the embedding worker (`reembedded`);
- an archive that is empty, cut short, altered, of another version, malformed (a line that breaks
  the rules of its kind, out of order, or the rules of the tables), or aimed at a store that
  holds something is 400 INVALID_PARAMETER_VALUE naming what is wrong, and nothing changes;
- a conversation id is unique on a server: one that is taken (the archive is imported beside the
  store it came from) is replaced by a new one, everywhere the archive names it.

The modules: `archive` (reading and checking an archive), `export`, `restore`.
"""

from catalog.backup.archive import ArchiveError, read
from catalog.backup.export import export
from catalog.backup.restore import Target, import_archive, import_target

__all__ = ["ArchiveError", "Target", "export", "import_archive", "import_target", "read"]
