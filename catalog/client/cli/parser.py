"""The remote commands' arguments, added under the `catalog` command's subcommands."""

from __future__ import annotations

import argparse

from catalog.client.cli.audit import audit_events, json_object, parse_time
from catalog.client.cli.base import (
    DEFAULT_EVENTS,
    SCOPE_HELP,
    SECURABLE_TYPES,
    Handler,
    Parser,
    remote_options,
    run,
)
from catalog.client.cli.entries import (
    entries_delete,
    entries_forget,
    entries_get,
    entries_held,
    entries_list,
    entries_put,
    entries_review,
    entries_search,
)
from catalog.client.cli.namespace import (
    catalogs_create,
    catalogs_list,
    grants_change,
    grants_effective,
    grants_show,
    groups_change,
    groups_create,
    groups_list,
    groups_show,
    schemas_create,
    schemas_list,
    stores_create,
    stores_list,
    stores_screen,
    stores_show,
    stores_trust,
)
from catalog.client.cli.transfer import export_store, import_store

# --- the parser ----------------------------------------------------------------------------------


def add_commands(
    commands: argparse._SubParsersAction[Parser],
    audit_commands: argparse._SubParsersAction[Parser],
) -> None:
    """The remote commands, under the `catalog` command's subcommands (`audit` exists already:
    `events` joins its `verify`)."""
    options = remote_options(suppress=True)

    def leaf(
        group: argparse._SubParsersAction[Parser], name: str, handler: Handler, text: str
    ) -> argparse.ArgumentParser:
        parser = group.add_parser(name, help=text, description=text, parents=[options])
        parser.set_defaults(run=lambda args: run(handler, args))
        return parser

    def securable(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "securable_type",
            metavar="TYPE",
            type=str.lower,
            choices=SECURABLE_TYPES,
            help="metastore, catalog, schema or memory_store",
        )
        parser.add_argument(
            "full_name",
            metavar="FULL_NAME",
            help="catalog, catalog.schema, catalog.schema.store, or the metastore id",
        )

    catalogs = commands.add_parser(
        "catalogs", help="catalogs on a server", description="List and create catalogs."
    ).add_subparsers(dest="catalogs_command", required=True)
    leaf(catalogs, "list", catalogs_list, "the catalogs you may use")
    create = leaf(catalogs, "create", catalogs_create, "create a catalog")
    create.add_argument("name", metavar="NAME", help="the catalog's name (letters, digits, _ and -)")
    create.add_argument("--comment", help="what the catalog holds (at most 4,096 characters)")

    schemas = commands.add_parser(
        "schemas", help="schemas on a server", description="List and create schemas."
    ).add_subparsers(dest="schemas_command", required=True)
    listed = leaf(schemas, "list", schemas_list, "the schemas of a catalog you may use")
    listed.add_argument("--catalog", required=True, help="the catalog whose schemas to list")
    create = leaf(schemas, "create", schemas_create, "create a schema")
    create.add_argument("full_name", metavar="CATALOG.SCHEMA", help="the new schema's full name")
    create.add_argument("--comment", help="what the schema holds (at most 4,096 characters)")

    stores = commands.add_parser(
        "stores", help="memory stores on a server", description="List, create and show memory stores."
    ).add_subparsers(dest="stores_command", required=True)
    listed = leaf(stores, "list", stores_list, "the memory stores of a schema you hold a privilege on")
    listed.add_argument("--catalog", required=True, help="the schema's catalog")
    listed.add_argument("--schema", required=True, help="the schema whose stores to list")
    create = leaf(stores, "create", stores_create, "create a memory store")
    create.add_argument("full_name", metavar="CATALOG.SCHEMA.NAME", help="the new store's full name")
    create.add_argument("--description", help="what the store remembers (at most 4,096 characters)")
    shown = leaf(stores, "show", stores_show, "one memory store")
    shown.add_argument("full_name", metavar="CATALOG.SCHEMA.NAME", help="the store's full name")
    trusted = leaf(
        stores,
        "trust",
        stores_trust,
        "a store's trust policy and the screen's rules; --set or --remove changes it (MANAGE)",
    )
    trusted.add_argument("store", metavar="STORE", help="catalog.schema.store")
    trusted.add_argument(
        "--set", metavar="FILE", help="set the policy to this JSON file ('-': read it from stdin)"
    )
    trusted.add_argument("--remove", action="store_true", help="remove the policy (nothing more is held)")
    screened = leaf(
        stores, "screen", stores_screen, "whether the store's trust policy would hold a write of this text"
    )
    screened.add_argument("store", metavar="STORE", help="catalog.schema.store")
    screened.add_argument("text", metavar="TEXT", help="the text ('-': read it from stdin)")
    screened.add_argument(
        "--via",
        default="mcp",
        choices=("rest", "agents", "console", "mcp", "responses", "extraction", "pipeline", "maintenance"),
        help="the channel the write would come through (default mcp: a model's tool call)",
    )
    screened.add_argument(
        "--on-behalf-of", action="store_true", help="the writer's token acts for an end user (an application)"
    )

    grants = commands.add_parser(
        "grants",
        help="who may do what",
        description="Show, add and remove the privileges granted on an object, and what a principal "
        "may do there (effective).",
    ).add_subparsers(dest="grants_command", required=True)
    shown = leaf(grants, "show", grants_show, "the privileges granted on an object")
    securable(shown)
    shown.add_argument("--principal", help="only this principal's")
    for verb, text in (("add", "grant privileges to a principal or group"), ("remove", "revoke privileges")):
        change = leaf(grants, verb, grants_change, text)
        securable(change)
        change.add_argument("principal", metavar="PRINCIPAL", help="a token subject or a group")
        change.add_argument(
            "privileges", metavar="PRIVILEGE", nargs="+", help="e.g. READ_MEMORY_STORE USE_SCHEMA"
        )
        change.add_argument(
            "--scope",
            dest="scopes",
            action="append",
            metavar="PATTERN",
            help=SCOPE_HELP[verb],
        )
    effective = leaf(grants, "effective", grants_effective, "what a principal may do on an object, and why")
    securable(effective)
    effective.add_argument("--principal", help="whose (default: yours)")

    groups = commands.add_parser(
        "groups",
        help="groups of principals (the admin manages them)",
        description="List, show, create and change groups of principals (the metastore admin manages them).",
    )
    group_commands = groups.add_subparsers(dest="groups_command", required=True)
    leaf(group_commands, "list", groups_list, "the groups (all of them for the admin; yours otherwise)")
    shown = leaf(group_commands, "show", groups_show, "one group and its members")
    shown.add_argument("name", metavar="NAME", help="the group's name")
    create = leaf(group_commands, "create", groups_create, "create a group")
    create.add_argument("name", metavar="NAME", help="the new group's name")
    create.add_argument(
        "--member", dest="members", action="append", help="a principal (or a group id); repeat it"
    )
    for verb, text in (("add", "add members to a group"), ("remove", "remove members from a group")):
        change = leaf(group_commands, verb, groups_change, text)
        change.add_argument("name", metavar="NAME", help="the group's name")
        change.add_argument("members", metavar="MEMBER", nargs="+", help="principals (or group ids)")

    entries = commands.add_parser(
        "entries",
        help="the entries of a memory store",
        description="List, get, write, delete, search and forget the entries of a store, in one scope.",
    ).add_subparsers(dest="entries_command", required=True)

    def store_and_scope(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("store", metavar="STORE", help="catalog.schema.store")
        parser.add_argument("--scope", required=True, help="whose memory (a user, a team)")

    listed = leaf(entries, "list", entries_list, "the entries of a scope, in path order")
    store_and_scope(listed)
    listed.add_argument("--path-prefix", help="only the entries whose path starts with this")
    listed.add_argument(
        "--filter", type=json_object, help='metadata to match: a JSON object, e.g. {"topic": "food"}'
    )
    listed.add_argument("--limit", type=int, default=0, help="at most this many (default: all)")
    got = leaf(entries, "get", entries_get, "one entry with its contents")
    store_and_scope(got)
    got.add_argument("path", metavar="PATH", help="the entry's path, e.g. /memories/preferences.md")
    put = leaf(entries, "put", entries_put, "write an entry")
    store_and_scope(put)
    put.add_argument("path", metavar="PATH", help="the entry's path, e.g. /memories/preferences.md")
    put.add_argument("--contents", required=True, help="the text ('-': read it from stdin)")
    put.add_argument("--description", help="one line that says what the entry is")
    put.add_argument(
        "--mode",
        type=str.upper,
        choices=("EXCLUSIVE", "OVERWRITE", "APPEND"),
        help="default EXCLUSIVE: fails if the entry exists",
    )
    put.add_argument("--ttl-seconds", type=int, help="the entry expires this long after the write")
    put.add_argument("--metadata", type=json_object, help='a JSON object, e.g. {"topic": "food"}')
    held = leaf(
        entries,
        "held",
        entries_held,
        "the entries the store's trust policy holds for review, every scope or one (MANAGE)",
    )
    held.add_argument("store", metavar="STORE", help="catalog.schema.store")
    held.add_argument("--scope", help="only this scope's")
    held.add_argument("--limit", type=int, default=0, help="at most this many (default: all)")
    for verb, text in (
        ("approve", "approve an entry held for review: its text becomes active (MANAGE)"),
        ("reject", "reject an entry held for review: it goes back to its text before (MANAGE)"),
    ):
        reviewed = leaf(entries, verb, entries_review, text)
        store_and_scope(reviewed)
        reviewed.add_argument("path", metavar="PATH", help="the held entry's path")
        reviewed.add_argument("--etag", help="the held version decided on (refused if it moved on)")
        reviewed.add_argument("--reason", help="why (kept in the entry's provenance)")
    deleted = leaf(entries, "delete", entries_delete, "delete an entry")
    store_and_scope(deleted)
    deleted.add_argument("path", metavar="PATH", help="the entry's path")
    searched = leaf(entries, "search", entries_search, "the entries that best answer a query")
    store_and_scope(searched)
    searched.add_argument("query", metavar="QUERY", help="what to look for, in words")
    searched.add_argument("--top-k", type=int, help="at most this many hits (1-100; default 10)")
    searched.add_argument(
        "--mode", choices=("hybrid", "keyword", "semantic"), help="how to rank (default hybrid)"
    )
    searched.add_argument("--min-score", type=float, help="0-1; 0.5 keeps what is relevant")
    searched.add_argument("--path-prefix", help="only the entries whose path starts with this")
    searched.add_argument(
        "--filter", type=json_object, help='metadata to match: a JSON object, e.g. {"topic": "food"}'
    )

    forget = leaf(
        entries,
        "forget",
        entries_forget,
        "delete the entries that match a query (what search finds at --min-score), at most 100",
    )
    store_and_scope(forget)
    forget.add_argument("query", metavar="QUERY", help="what to forget, in words, e.g. 'the divorce'")
    forget.add_argument(
        "--dry-run", action="store_true", help="name the entries it would delete, and delete none"
    )
    forget.add_argument(
        "--min-score", type=float, help="the score a match needs: above 0, at most 1 (default 0.5)"
    )
    forget.add_argument(
        "--mode", choices=("hybrid", "keyword", "semantic"), help="how to rank (default hybrid)"
    )
    forget.add_argument("--path-prefix", help="only the entries whose path starts with this")

    exported = leaf(
        commands,
        "export",
        export_store,
        "write a store's archive (JSON lines) to stdout: its definition, grants, entries with "
        "history and vectors, conversations, sessions and lineage",
    )
    exported.add_argument("store", metavar="STORE", help="catalog.schema.store (a memory or a session store)")
    exported.add_argument(
        "--scope", help="only this scope's entries, history, conversations, sessions, lineage"
    )
    exported.add_argument("--output", "-o", metavar="FILE", help="write the archive here instead of stdout")
    imported = leaf(
        commands,
        "import",
        import_store,
        "restore an archive into a new store, or into an existing one that holds nothing",
    )
    imported.add_argument("file", metavar="FILE", help="the archive ('-': read it from stdin)")
    imported.add_argument(
        "--into", metavar="CATALOG.SCHEMA.NAME", help="the store to restore into (default: the one exported)"
    )

    events = leaf(audit_commands, "events", audit_events, "audit events, newest first")
    events.add_argument("--principal", help="only the events of this principal")
    events.add_argument("--action", help="an action name, e.g. permissions.update or entries.write")
    events.add_argument("--securable", help="events on this object (a full name)")
    events.add_argument(
        "--decision", choices=("allow", "deny", "unauthenticated"), help="only the events so decided"
    )
    events.add_argument(
        "--since", type=parse_time, help="30m, 2h, 7d (ago), an ISO date or time, or epoch ms"
    )
    events.add_argument("--until", type=parse_time, help="as --since (exclusive)")
    events.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_EVENTS,
        help=f"at most this many (default {DEFAULT_EVENTS}; 0: all)",
    )
