"""Every action the server performs, declared once, with the privileges it needs and on what.

A service names its action; `Authorizer.authorize` looks the requirement up here. `inside=True`
means the action happens inside the securable (creating or listing its children), so USE on the
securable itself is needed too, as on every parent. A test checks that every action is documented
and that every route reaches `authorize`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from catalog.access.securables import SecurableType


class Privilege(StrEnum):
    CREATE_CATALOG = "CREATE_CATALOG"
    USE_CATALOG = "USE_CATALOG"
    CREATE_SCHEMA = "CREATE_SCHEMA"
    USE_SCHEMA = "USE_SCHEMA"
    CREATE_MEMORY_STORE = "CREATE_MEMORY_STORE"
    READ_MEMORY_STORE = "READ_MEMORY_STORE"
    WRITE_MEMORY_STORE = "WRITE_MEMORY_STORE"
    MANAGE = "MANAGE"
    ALL_PRIVILEGES = "ALL_PRIVILEGES"
    READ_AUDIT = "READ_AUDIT"

    @classmethod
    def parse(cls, value: str) -> Privilege:
        """`READ_MEMORY_STORE` or `read memory store` → READ_MEMORY_STORE; ValueError otherwise."""
        return cls("_".join(value.strip().upper().replace("_", " ").split()))


# Only the metastore admin holds this: it is never grantable (see policies/README.md).
METASTORE_ADMIN = "METASTORE_ADMIN"

_S, _P = SecurableType, Privilege

# Where each privilege may be granted (docs/governance/index.md, "Privileges"); anything else is 400.
GRANTABLE: dict[SecurableType, tuple[Privilege, ...]] = {
    _S.METASTORE: (_P.CREATE_CATALOG, _P.READ_AUDIT),
    _S.CATALOG: (
        _P.USE_CATALOG,
        _P.CREATE_SCHEMA,
        _P.USE_SCHEMA,
        _P.CREATE_MEMORY_STORE,
        _P.READ_MEMORY_STORE,
        _P.WRITE_MEMORY_STORE,
        _P.MANAGE,
        _P.ALL_PRIVILEGES,
    ),
    _S.SCHEMA: (
        _P.USE_SCHEMA,
        _P.CREATE_MEMORY_STORE,
        _P.READ_MEMORY_STORE,
        _P.WRITE_MEMORY_STORE,
        _P.MANAGE,
        _P.ALL_PRIVILEGES,
    ),
    _S.MEMORY_STORE: (_P.READ_MEMORY_STORE, _P.WRITE_MEMORY_STORE, _P.MANAGE, _P.ALL_PRIVILEGES),
}

# What a principal can effectively hold on each type (ALL_PRIVILEGES expanded).
EFFECTIVE: dict[SecurableType, tuple[Privilege, ...]] = {
    securable_type: tuple(p for p in privileges if p != _P.ALL_PRIVILEGES)
    for securable_type, privileges in GRANTABLE.items()
}


@dataclass(frozen=True)
class Action:
    name: str
    on: SecurableType | None  # None: any securable type
    privileges: tuple[str, ...]  # any one suffices; () = open to every authenticated principal
    description: str
    inside: bool = False
    any_privilege: bool = False  # any privilege that can be held on the securable suffices
    # reaches data kept by scope (entries, conversations, sessions, transcripts): a grant limited to
    # scopes allows it only for the scopes its patterns match, checked where the scopes are known
    data: bool = False
    # reaches every scope of the securable at once (what a memory pipeline's runs do): a grant
    # limited to scopes never allows it
    every_scope: bool = False


# the privileges a grant may limit to scopes
SCOPABLE: tuple[str, ...] = ("READ_MEMORY_STORE", "WRITE_MEMORY_STORE")

DATA_ACTIONS = frozenset(
    {
        "entries.read",
        "entries.write",
        "conversations.read",
        "conversations.write",
        "sessions.read",
        "sessions.write",
        "responses.create",
        "memories.extract",
        "transcripts.search",
    }
)


def _a(
    name: str,
    on: SecurableType | None,
    privileges: tuple[str, ...],
    description: str,
    *,
    inside: bool = False,
    any_privilege: bool = False,
    every_scope: bool = False,
) -> Action:
    return Action(name, on, privileges, description, inside, any_privilege, name in DATA_ACTIONS, every_scope)


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in [
        _a("metastore.summary", _S.METASTORE, (), "read the metastore summary"),
        _a("catalog.create", _S.METASTORE, (_P.CREATE_CATALOG,), "create a catalog"),
        _a("catalog.list", _S.METASTORE, (), "list the catalogs the caller may use or owns"),
        _a("catalog.get", _S.CATALOG, (_P.USE_CATALOG,), "read a catalog"),
        _a("catalog.update", _S.CATALOG, (_P.MANAGE,), "update a catalog or transfer its ownership"),
        _a("catalog.delete", _S.CATALOG, (_P.MANAGE,), "delete a catalog"),
        _a("schema.create", _S.CATALOG, (_P.CREATE_SCHEMA,), "create a schema in a catalog", inside=True),
        _a("schema.list", _S.CATALOG, (_P.USE_CATALOG,), "list the schemas of a catalog", inside=True),
        _a("schema.get", _S.SCHEMA, (_P.USE_SCHEMA,), "read a schema"),
        _a("schema.update", _S.SCHEMA, (_P.MANAGE,), "update a schema or transfer its ownership"),
        _a("schema.delete", _S.SCHEMA, (_P.MANAGE,), "delete a schema"),
        _a(
            "memory_store.create",
            _S.SCHEMA,
            (_P.CREATE_MEMORY_STORE,),
            "create a memory store in a schema",
            inside=True,
        ),
        _a(
            "memory_store.list",
            _S.SCHEMA,
            (_P.USE_SCHEMA,),
            "list the memory stores of a schema",
            inside=True,
        ),
        _a(
            "memory_store.see",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE, _P.WRITE_MEMORY_STORE, _P.MANAGE),
            "see a memory store",  # in a list, or its page in the web console
        ),
        _a(
            "mcp.connect",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE, _P.WRITE_MEMORY_STORE, _P.MANAGE),
            "use a memory store's MCP server (each tool call is then authorized as its entry operation)",
        ),
        _a("memory_store.get", _S.MEMORY_STORE, (_P.READ_MEMORY_STORE,), "read a memory store's metadata"),
        _a("memory_store.update", _S.MEMORY_STORE, (_P.MANAGE,), "update a memory store or its owner"),
        _a("memory_store.delete", _S.MEMORY_STORE, (_P.MANAGE,), "delete a memory store"),
        # backup and restore (catalog/backup): the whole store, every scope, grants included
        _a(
            "memory_store.export",
            _S.MEMORY_STORE,
            (_P.MANAGE,),
            "export a memory store (or a session store) as an archive; reading what it holds also "
            "needs `entries.read` (`sessions.read` for a session store), without its scope binding",
        ),
        _a(
            "memory_store.import",
            _S.MEMORY_STORE,
            (_P.MANAGE,),
            "import an archive into an existing memory store that holds nothing; writing what it "
            "holds also needs `entries.write` (`sessions.write` for a session store) in every scope "
            "of the archive, without the store's scope binding",
        ),
        _a(
            "memory_store.import_new",
            _S.SCHEMA,
            (_P.CREATE_MEMORY_STORE,),
            "import an archive as a new memory store of the schema (the store is created by the import)",
            inside=True,
        ),
        _a(
            "entries.read",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE,),
            "read or search a memory store's entries",
        ),
        _a("entries.write", _S.MEMORY_STORE, (_P.WRITE_MEMORY_STORE,), "write a memory store's entries"),
        _a(
            "entries.redact",
            _S.MEMORY_STORE,
            (_P.MANAGE,),
            "redact a version of an entry: its contents and description, in the history and in the entry",
        ),
        # trust and provenance (catalog/access/trust.py, docs/governance/trust.md)
        _a(
            "entries.review",
            _S.MEMORY_STORE,
            (_P.MANAGE,),
            "list the entries a memory store's trust policy holds for review, read them, and approve "
            "or reject them",
        ),
        _a(
            "trust_policy.read",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE, _P.WRITE_MEMORY_STORE, _P.MANAGE),
            "read a memory store's trust policy and try text against its screen",
        ),
        _a(
            "trust_policy.update",
            _S.MEMORY_STORE,
            (_P.MANAGE,),
            "set or remove a memory store's trust policy",
        ),
        _a(
            "conversations.read",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE,),
            "read a memory store's conversations and their items",
        ),
        _a(
            "conversations.write",
            _S.MEMORY_STORE,
            (_P.WRITE_MEMORY_STORE,),
            "create, change or delete a memory store's conversations and their items",
        ),
        # a session store is a memory store of kind `session`: the same privileges as its entries
        _a(
            "sessions.read",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE,),
            "read a session store's sessions and items",
        ),
        _a(
            "sessions.write",
            _S.MEMORY_STORE,
            (_P.WRITE_MEMORY_STORE,),
            "create, change or delete a session store's sessions and items",
        ),
        _a(
            "responses.create",
            _S.MEMORY_STORE,
            (_P.WRITE_MEMORY_STORE,),
            "answer a response over a conversation of the store (appends the turn; reading the "
            "conversation for the model also needs `conversations.read`); each memory tool call "
            "the model makes is then authorized as its entry operation",
        ),
        _a(
            "responses.create_stateless",
            _S.METASTORE,
            (),
            "answer a response without a conversation (no memory tools, nothing kept)",
        ),
        _a(
            "memories.extract",
            _S.MEMORY_STORE,
            (_P.WRITE_MEMORY_STORE,),
            "extract a session's transcript into the store's memories (a dry run too: it checks "
            "what it would write); each tool call is then authorized as its entry operation",
        ),
        # a memory pipeline belongs to its memory store; its runs act as its creator over every
        # scope of both stores, so whoever creates, changes what it does or starts it must be able
        # to do every step of a run (`pipelines.run`, `pipelines.read_memories` and
        # `pipelines.read_sessions`, none of which a grant limited to scopes allows)
        _a(
            "pipelines.create",
            _S.MEMORY_STORE,
            (_P.WRITE_MEMORY_STORE,),
            "create a memory pipeline into the store (its runs act as the creator, in every scope)",
            every_scope=True,
        ),
        _a("pipelines.list", _S.METASTORE, (), "list the memory pipelines the caller may read"),
        _a(
            "pipelines.read",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE,),
            "read the store's memory pipelines and their runs (a reader of some scopes reads the "
            "runs' maintenance reports held to those scopes)",
        ),
        _a(
            "pipelines.manage",
            _S.MEMORY_STORE,
            (_P.WRITE_MEMORY_STORE,),
            "rename or delete a memory pipeline into the store",
            every_scope=True,
        ),
        _a(
            "pipelines.configure",
            _S.MEMORY_STORE,
            (_P.MANAGE,),
            "change what another principal's memory pipeline does (its model, instructions, trigger "
            "or maintenance; checked on both its stores)",
        ),
        _a(
            "pipelines.run",
            _S.MEMORY_STORE,
            (_P.WRITE_MEMORY_STORE,),
            "start a run of a memory pipeline into the store, or change what one does (its runs "
            "write the memories of every scope)",
            every_scope=True,
        ),
        _a(
            "pipelines.read_memories",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE,),
            "read every scope's memories of a memory pipeline's memory store (a run reads them "
            "before it writes), to create, change what it does or start a pipeline",
            every_scope=True,
        ),
        _a(
            "pipelines.read_sessions",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE,),
            "read every session of a memory pipeline's session store (a run reads them all), to "
            "create, change what it does or start a pipeline",
            every_scope=True,
        ),
        _a(
            "transcripts.search",
            _S.MEMORY_STORE,
            (_P.READ_MEMORY_STORE,),
            "search the messages of a store's conversations or sessions",
        ),
        _a("permissions.get", None, (), "read the grants on a securable", any_privilege=True),
        _a("permissions.update", None, (_P.MANAGE,), "grant or revoke privileges on a securable"),
        _a("effective_permissions.self", None, (), "read one's own effective privileges"),
        _a(
            "effective_permissions.other", None, (_P.MANAGE,), "read another principal's effective privileges"
        ),
        _a("groups.manage", _S.METASTORE, (METASTORE_ADMIN,), "create, change or delete groups"),
        _a("audit.read", _S.METASTORE, (_P.READ_AUDIT,), "read the audit log"),
        _a("lineage.read", _S.METASTORE, (_P.READ_AUDIT,), "read lineage"),
        _a("provenance.read", _S.METASTORE, (_P.READ_AUDIT,), "read the provenance of entry versions"),
        _a("system.erase_scope", _S.METASTORE, (METASTORE_ADMIN,), "erase a scope from every memory store"),
        _a(
            "system.erase_subject",
            _S.METASTORE,
            (METASTORE_ADMIN,),
            "erase a data subject (its scope and every `subject:...` scope) everywhere, audit key included",
        ),
        _a("groups.list", _S.METASTORE, (), "list or read groups"),
        _a("system.metrics", _S.METASTORE, (_P.READ_AUDIT,), "read the server's metrics"),
        _a("principals.me", _S.METASTORE, (), "read one's own identity and groups"),
        _a(
            "principals.read",
            _S.METASTORE,
            (METASTORE_ADMIN,),
            "list or read the principals the server knows",
        ),
    ]
}


def action(name: str) -> Action:
    return ACTIONS[name]
