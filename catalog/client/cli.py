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
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from catalog.client import _calls as calls
from catalog.client.errors import CatalogError
from catalog.client.output import Progress, fields, print_raw, table, when

if TYPE_CHECKING:
    from catalog.client import Call, Client

Handler = Callable[[argparse.Namespace], int]
SCOPE_HELP = {
    "add": "limit READ_MEMORY_STORE or WRITE_MEMORY_STORE to a scope (team-a) or a prefix ending in * "
    "(team-a:*), added to the patterns of a grant already limited; repeat it (at most 20). Without it, "
    "the privileges hold in every scope",
    "remove": "take this pattern from a grant limited to scopes (the grant goes with its last one) "
    "instead of revoking the privilege; repeat it",
}
SECURABLE_TYPES = ("metastore", "catalog", "schema", "memory_store")
DEFAULT_EVENTS = 50


# --- options and dispatch ------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """Refuses bad arguments in one line, `error: USAGE: ...`, and exit 1, like every other
    failure of the command (help is still `-h`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"error: USAGE: {message} (see: {self.prog} -h)\n")


def remote_options(*, suppress: bool) -> Parser:
    """`--url`, `--token`, `--json`. The main parser has them with their defaults; each remote
    subcommand has them too, defaulting to SUPPRESS, so that a value given after the subcommand
    wins and one given before it is not overwritten."""
    default: Any = argparse.SUPPRESS if suppress else None
    options = Parser(add_help=False)
    options.add_argument(
        "--url", default=default, help="the server (default: $CATALOG_URL, else http://127.0.0.1:8080)"
    )
    options.add_argument("--token", default=default, help="a bearer token (default: $CATALOG_TOKEN)")
    options.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="print the API's JSON answer unchanged",
    )
    return options


def wants_remote(args: argparse.Namespace) -> bool:
    """Whether `catalog audit verify` asks a server rather than reading the database itself: a
    server is named (`--url`, `--token`, CATALOG_URL or CATALOG_TOKEN) and no `--data-dir`."""
    if getattr(args, "data_dir", None):
        return False
    named = getattr(args, "url", None) or getattr(args, "token", None)
    return bool(named or os.environ.get("CATALOG_URL") or os.environ.get("CATALOG_TOKEN"))


def fail(code: str, message: str) -> int:
    print(f"error: {code}: {' '.join(str(message).split())}", file=sys.stderr)
    return 1


def run(handler: Handler, args: argparse.Namespace) -> int:
    """Run a remote command: every failure becomes one `error:` line and exit 1."""
    try:
        return handler(args)
    except CatalogError as exc:
        return fail(exc.error_code, exc.message)
    except (ValueError, TypeError) as exc:  # arguments the client refuses before sending them
        return fail("USAGE", str(exc))
    except BrokenPipeError:  # `catalog audit events | head`
        sys.stderr.close()
        return 0
    except Exception as exc:  # no trace for people; the message says what went wrong
        return fail("CLIENT_ERROR", f"{type(exc).__name__}: {exc}")


def client_for(args: argparse.Namespace) -> Client:
    from catalog.client import Client

    given = getattr(args, "token", None)
    if given is not None and not given.strip():
        # `--token "$ALICE"` with ALICE unset must not act as CATALOG_TOKEN's principal instead
        raise CatalogError(0, "USAGE", "--token is empty")
    token = given or os.environ.get("CATALOG_TOKEN")
    if not token:
        raise CatalogError(
            0,
            "UNAUTHENTICATED",
            "no token: pass --token or set CATALOG_TOKEN "
            "(a development server mints one: catalog token --sub NAME)",
        )
    return Client(getattr(args, "url", None) or None, token)


def _json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def read_list(client: Client, call: Call, key: str, what: str, limit: int | None = None) -> list[Any]:
    """The items of a list, page after page (at most `limit`), as the server sent them."""
    progress = Progress(what)
    found: list[Any] = []
    try:
        for pages, page in enumerate(client.pages(call), start=1):
            found.extend(page.get(key) or [])
            progress.update(len(found), pages)
            if limit is not None and len(found) >= limit:
                del found[limit:]
                break
    finally:
        progress.done()
    return found


def show_list(
    args: argparse.Namespace,
    call: Call,
    key: str,
    what: str,
    columns: Sequence[tuple[str, Callable[[dict[str, Any]], Any]]],
    limit: int | None = None,
) -> int:
    with client_for(args) as client:
        found = read_list(client, call, key, what, limit)
    if _json(args):
        print_raw(json.dumps({key: found}))
    else:
        print(table([title for title, _ in columns], ([get(item) for _, get in columns] for item in found)))
    return 0


def show_one(args: argparse.Namespace, call: Call, describe: Callable[[dict[str, Any]], str]) -> int:
    with client_for(args) as client:
        response = client.send(call)
    if _json(args):
        print_raw(response.text)
    else:
        print(describe(response.json()))
    return 0


# --- namespace -----------------------------------------------------------------------------------


def _described(kind: str) -> Callable[[dict[str, Any]], str]:
    def describe(obj: dict[str, Any]) -> str:
        return fields(
            [
                (kind, obj.get("full_name")),
                ("owner", obj.get("owner")),
                ("comment", obj.get("comment")),
                ("description", obj.get("description")),
                ("scope binding", obj.get("scope_binding")),
                ("shared scopes", obj.get("shared_scopes")),
                ("legal hold", "yes" if obj.get("legal_hold") else None),
                (
                    "default ttl",
                    f"{obj['default_ttl_seconds']} s" if obj.get("default_ttl_seconds") else None,
                ),
                ("properties", ", ".join(f"{k}={v}" for k, v in (obj.get("properties") or {}).items())),
                ("created", f"{when(obj.get('created_at'))} by {obj.get('created_by')}"),
                ("updated", f"{when(obj.get('updated_at'))} by {obj.get('updated_by')}"),
            ]
        )

    return describe


def catalogs_list(args: argparse.Namespace) -> int:
    columns = [
        ("NAME", lambda c: c.get("name")),
        ("OWNER", lambda c: c.get("owner")),
        ("COMMENT", lambda c: c.get("comment")),
    ]
    return show_list(args, calls.list_catalogs(None), "catalogs", "catalogs", columns)


def catalogs_create(args: argparse.Namespace) -> int:
    return show_one(args, calls.create_catalog(args.name, args.comment, None), _described("catalog"))


def schemas_list(args: argparse.Namespace) -> int:
    columns = [
        ("NAME", lambda s: s.get("full_name")),
        ("OWNER", lambda s: s.get("owner")),
        ("COMMENT", lambda s: s.get("comment")),
    ]
    return show_list(args, calls.list_schemas(args.catalog, None), "schemas", "schemas", columns)


def schemas_create(args: argparse.Namespace) -> int:
    return show_one(args, calls.create_schema(args.full_name, args.comment, None), _described("schema"))


def stores_list(args: argparse.Namespace) -> int:
    columns = [
        ("NAME", lambda s: s.get("full_name")),
        ("OWNER", lambda s: s.get("owner")),
        ("UPDATED", lambda s: when(s.get("updated_at"))),
        ("DESCRIPTION", lambda s: s.get("description")),
    ]
    call = calls.list_stores(args.catalog, args.schema, None)
    return show_list(args, call, "memory_stores", "memory stores", columns)


def stores_create(args: argparse.Namespace) -> int:
    call = calls.create_store(args.full_name, description=args.description)
    return show_one(args, call, _described("memory store"))


def stores_show(args: argparse.Namespace) -> int:
    return show_one(args, calls.get_store(args.full_name), _described("memory store"))


def _policy(body: dict[str, Any]) -> str:
    policy = body.get("policy")
    if policy is None:
        return f"{body.get('memory_store')} has no trust policy: nothing written to it is held for review"
    via = {k: v for k, v in (policy.get("via") or {}).items() if v}
    head = fields(
        [
            ("memory store", body.get("memory_store")),
            ("people", policy.get("person")),
            ("applications", policy.get("application")),
            ("models", policy.get("model")),
            ("by channel", ", ".join(f"{k}={v}" for k, v in via.items()) or None),
            ("classifier", "on" if body.get("classifier_active") else None),
        ]
    )
    rows = [
        (rule.get("name"), "built-in" if rule.get("builtin") else "own", "; ".join(rule.get("phrases") or []))
        for rule in body.get("rules") or []
    ]
    return f"{head}\n\n{table(['RULE', 'FROM', 'PHRASES'], rows)}"


def stores_trust(args: argparse.Namespace) -> int:
    if args.set is not None and args.remove:
        return fail("USAGE", "give --set or --remove, not both")
    if args.remove:
        return show_one(args, calls.set_trust_policy(args.store, None), _policy)
    if args.set is not None:
        text = sys.stdin.read() if args.set == "-" else Path(args.set).read_text()
        return show_one(args, calls.set_trust_policy(args.store, json_object(text)), _policy)
    return show_one(args, calls.get_trust_policy(args.store), _policy)


def stores_screen(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    call = calls.try_trust_policy(args.store, text, args.via, args.on_behalf_of)

    def verdict(body: dict[str, Any]) -> str:
        if body.get("policy") is False:
            return "no trust policy: it would be kept as written"
        how = f"{body.get('source_class')} through {body.get('via')}: {body.get('decision')}"
        why = ", ".join(body.get("rules") or []) or body.get("classifier") or ""
        said = "held for review" if body.get("held") else "kept as written"
        return f"{said} ({how}{'; ' + why if why else ''})"

    return show_one(args, call, verdict)


# --- grants --------------------------------------------------------------------------------------


def _grant_rows(assignment: dict[str, Any]) -> list[tuple[Any, str, str]]:
    """A principal's grants as rows of (principal, privileges, scopes): the privileges held in
    every scope in one row (SCOPES empty), those limited to the same patterns in one row each."""
    limits: dict[str, list[str]] = assignment.get("scopes") or {}
    groups: dict[tuple[str, ...], list[str]] = {}
    for privilege in assignment.get("privileges") or []:
        groups.setdefault(tuple(limits.get(privilege) or ()), []).append(privilege)
    return [
        (assignment.get("principal"), ", ".join(privileges), ", ".join(patterns))
        for patterns, privileges in sorted(groups.items())
    ]


GRANT_COLUMNS = ["PRINCIPAL", "PRIVILEGES", "SCOPES"]


def _grants_table(body: dict[str, Any]) -> str:
    return table(
        GRANT_COLUMNS, [row for a in body.get("privilege_assignments") or [] for row in _grant_rows(a)]
    )


def grants_show(args: argparse.Namespace) -> int:
    call = calls.get_permissions(args.securable_type, args.full_name, args.principal)
    with client_for(args) as client:
        found = read_list(client, call, "privilege_assignments", "grants")
    if _json(args):
        print_raw(json.dumps({"privilege_assignments": found}))
    else:
        print(_grants_table({"privilege_assignments": found}))
    return 0


def grants_change(args: argparse.Namespace) -> int:
    privileges = [p.upper().replace(" ", "_") for p in args.privileges]
    add, remove = (privileges, []) if args.grants_command == "add" else ([], privileges)
    call = calls.update_permissions(
        args.securable_type, args.full_name, args.principal, add, remove, args.scopes
    )
    return show_one(args, call, _grants_table)


def grants_effective(args: argparse.Namespace) -> int:
    call = calls.effective_permissions(args.securable_type, args.full_name, args.principal)
    with client_for(args) as client:
        found = read_list(client, call, "privilege_assignments", "assignments")
    if _json(args):
        print_raw(json.dumps({"privilege_assignments": found}))
        return 0
    rows = []
    for assignment in found:
        for privilege in assignment.get("privileges") or []:
            source = privilege.get("inherited_from_name")
            origin = (
                f"{privilege.get('inherited_from_type', '').lower()} {source}" if source else "this object"
            )
            scopes = ", ".join(privilege.get("scopes") or [])
            rows.append((assignment.get("principal"), privilege.get("privilege"), origin, scopes))
    print(table(["THROUGH", "PRIVILEGE", "FROM", "SCOPES"], rows))
    return 0


# --- groups --------------------------------------------------------------------------------------


def _group(obj: dict[str, Any]) -> str:
    members = [m.get("display") or m.get("value") for m in obj.get("members") or []]
    return fields([("group", obj.get("displayName")), ("id", obj.get("id")), ("members", members)])


def _find_group(client: Client, name: str) -> dict[str, Any]:
    found = client.call(calls.find_group(name), dict[str, Any]).get("Resources") or []
    if not found:
        raise CatalogError(404, "RESOURCE_DOES_NOT_EXIST", f"no group named {name}")
    return dict(found[0])


def groups_list(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        found = [group for page in _group_pages(client) for group in page]
    if _json(args):
        print_raw(json.dumps({"Resources": found, "totalResults": len(found)}))
        return 0
    rows = [
        (g.get("displayName"), [m.get("display") or m.get("value") for m in g.get("members") or []])
        for g in found
    ]
    print(table(["GROUP", "MEMBERS"], rows))
    return 0


def _group_pages(client: Client) -> Iterator[list[dict[str, Any]]]:
    start = 1
    while True:
        page = client.call(calls.list_groups(start), dict[str, Any])
        groups = page.get("Resources") or []
        yield groups
        start += len(groups)
        if not groups or start > int(page.get("totalResults") or 0):
            return


def groups_show(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        group = _find_group(client, args.name)
    print_raw(json.dumps(group)) if _json(args) else print(_group(group))
    return 0


def groups_create(args: argparse.Namespace) -> int:
    return show_one(args, calls.create_group(args.name, args.members or []), _group)


def groups_change(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        group = _find_group(client, args.name)
        response = client.send(calls.change_members(group["id"], args.groups_command, args.members))
    print_raw(response.text) if _json(args) else print(_group(response.json()))
    return 0


# --- entries -------------------------------------------------------------------------------------


def entries_list(args: argparse.Namespace) -> int:
    call = calls.list_entries(args.store, args.scope, args.path_prefix, None, None, args.filter)
    columns = [
        ("PATH", lambda e: e.get("path")),
        ("UPDATED", lambda e: when(e.get("updated_at"))),
        ("DESCRIPTION", lambda e: e.get("description")),
    ]
    return show_list(args, call, "entries", "entries", columns, args.limit or None)


def _entry(obj: dict[str, Any]) -> str:
    head = fields(
        [
            ("scope", obj.get("scope")),
            ("path", obj.get("path")),
            ("session", obj.get("session_id")),
            ("description", obj.get("description")),
            ("etag", obj.get("etag")),
            ("expires", when(obj.get("expires_at"))),
            ("updated", f"{when(obj.get('updated_at'))} by {obj.get('updated_by')}"),
        ]
    )
    contents = obj.get("contents")
    return head if contents is None else f"{head}\n\n{contents}"


def entries_held(args: argparse.Namespace) -> int:
    call = calls.quarantined_entries(args.store, args.scope)

    def why(entry: dict[str, Any]) -> str:
        origin = entry.get("provenance") or {}
        trust = origin.get("trust") or {}
        return ", ".join(trust.get("rules") or []) or trust.get("classifier") or trust.get("decision") or ""

    columns = [
        ("SCOPE", lambda e: e.get("scope")),
        ("PATH", lambda e: e.get("path")),
        ("ETAG", lambda e: e.get("etag")),
        ("BY", lambda e: (e.get("provenance") or {}).get("principal")),
        ("VIA", lambda e: (e.get("provenance") or {}).get("via")),
        ("WHY", why),
        ("CONTENTS", lambda e: e.get("contents")),
    ]
    return show_list(args, call, "entries", "entries", columns, args.limit or None)


def entries_review(args: argparse.Namespace) -> int:
    decision = "approve" if args.entries_command == "approve" else "reject"
    call = calls.review_entry(
        args.store, args.scope, args.path, decision, session_id=None, etag=args.etag, reason=args.reason
    )

    def reviewed(body: dict[str, Any]) -> str:
        if body.get("deleted"):
            return f"rejected {args.path} in scope {args.scope}: it had no earlier text, so it was deleted"
        entry = body.get("memory_entry") or {}
        if decision == "approve":
            return f"approved {args.path} in scope {args.scope} (etag {entry.get('etag')})"
        return f"rejected {args.path} in scope {args.scope}: back as it was (etag {entry.get('etag')})"

    return show_one(args, call, reviewed)


def entries_get(args: argparse.Namespace) -> int:
    return show_one(args, calls.get_entry(args.store, args.scope, args.path, None), _entry)


def entries_put(args: argparse.Namespace) -> int:
    contents = sys.stdin.read() if args.contents == "-" else args.contents
    call = calls.write_entry(
        args.store,
        args.scope,
        args.path,
        contents=contents,
        description=args.description,
        write_mode=args.mode,
        session_id=None,
        metadata=args.metadata,
        ttl_seconds=args.ttl_seconds,
        source_type=None,
        creation_reason=None,
        creation_source=None,
        derived_from=None,
    )

    def written(obj: dict[str, Any]) -> str:
        held = "; held for review by the store's trust policy" if obj.get("state") == "quarantined" else ""
        return f"wrote {obj.get('path')} in scope {obj.get('scope')} (etag {obj.get('etag')}){held}"

    return show_one(args, call, written)


def entries_delete(args: argparse.Namespace) -> int:
    call = calls.delete_entry(args.store, args.scope, args.path, None, None)
    return show_one(args, call, lambda _: f"deleted {args.path} in scope {args.scope}")


def entries_search(args: argparse.Namespace) -> int:
    call = calls.search_entries(
        args.store,
        args.scope,
        args.query,
        top_k=args.top_k,
        mode=args.mode,
        min_score=args.min_score,
        path_prefix=args.path_prefix,
        session_id=None,
        where=args.filter,
    )

    def hits(body: dict[str, Any]) -> str:
        rows = [
            (
                f"{hit.get('score', 0):.3f}",
                hit["memory_entry"].get("path"),
                hit["memory_entry"].get("description") or hit["memory_entry"].get("contents"),
            )
            for hit in body.get("results") or []
        ]
        return table(["SCORE", "PATH", "DESCRIPTION OR CONTENTS"], rows)

    return show_one(args, call, hits)


def entries_forget(args: argparse.Namespace) -> int:
    call = calls.delete_matching_entries(
        args.store,
        args.scope,
        args.query,
        mode=args.mode,
        min_score=args.min_score,
        path_prefix=args.path_prefix,
        session_id=None,
        dry_run=args.dry_run,
    )

    def forgotten(body: dict[str, Any]) -> str:
        deleted = body.get("deleted") or []
        if not deleted:
            return f"no entry in scope {args.scope} matches the query: nothing deleted"
        verb = "would delete" if args.dry_run else "deleted"
        head = f"{verb} {len(deleted)} {'entry' if len(deleted) == 1 else 'entries'} in scope {args.scope}"
        if args.dry_run:
            head += " (a dry run: nothing deleted)"
        if body.get("truncated"):
            head += "; more matched: run it again to delete the rest"
        rows = [(e.get("path"), e.get("session_id")) for e in deleted]
        return f"{head}\n{table(['PATH', 'SESSION'], rows)}"

    return show_one(args, call, forgotten)


# --- backup and restore --------------------------------------------------------------------------

MIB = 1024 * 1024


class Transfer:
    """`<verb> 12.0 MiB (4,000 lines)…` on stderr while an archive goes by, when stderr is a
    terminal, at most ten times a second."""

    def __init__(self, verb: str, total: int | None = None) -> None:
        self.verb = verb
        self.total = total
        self.live = sys.stderr.isatty()
        self.shown = 0.0

    def update(self, done: int, lines: int | None = None) -> None:
        now = time.monotonic()
        if not self.live or now - self.shown < 0.1:
            return
        self.shown = now
        size = f"{done / MIB:.1f} MiB" + (f" of {self.total / MIB:.1f} MiB" if self.total else "")
        more = f" ({lines:,} lines)" if lines is not None else ""
        sys.stderr.write(f"\r{self.verb} {size}{more}…")
        sys.stderr.flush()

    def note(self, text: str) -> None:
        if self.live:
            sys.stderr.write(f"\r\033[K{text}…")
            sys.stderr.flush()
            self.shown = time.monotonic()

    def done(self) -> None:
        if self.live and self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


class ArchiveCheck:
    """An archive as it arrives, checked as the server checks one it imports: it ends with its
    manifest, which counts the lines before it and holds their sha256 (each line with its
    newline). `finish` raises CatalogError `TRUNCATED` or `CORRUPT` otherwise."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.rest = b""  # after the last newline so far
        self.held: bytes | None = None  # the last complete line (the manifest, if it is the last)
        self.lines = 0  # complete lines hashed
        self.size = 0

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        *complete, self.rest = (self.rest + chunk).split(b"\n")
        for line in complete:
            if self.held is not None:
                self.digest.update(self.held + b"\n")
                self.lines += 1
            self.held = line

    def finish(self) -> dict[str, Any]:
        """The manifest, once the archive is known whole."""
        try:
            manifest = json.loads(self.held) if self.held is not None and not self.rest else None
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict) or manifest.get("kind") != "manifest":
            raise CatalogError(
                0,
                "TRUNCATED",
                f"the archive ended after {self.size} bytes without its manifest line: the export did not "
                "finish (the server's request timeout, CATALOG_REQUEST_TIMEOUT, may be too short for it)",
            )
        if manifest.get("lines") != self.lines or manifest.get("sha256") != self.digest.hexdigest():
            raise CatalogError(0, "CORRUPT", "the archive does not match its manifest (lines or sha256)")
        return manifest


_WORDS = {
    "entry_version": "version",
    "transcript": "transcript vector",
    "lineage": "lineage edge",
    "origin": "transcript lineage edge",
}


def _counted(counts: dict[str, Any]) -> str:
    """`12 entries, 20 entry versions, 2 grants, ...`: the kinds that are there."""
    shown = []
    for kind, count in counts.items():
        if kind == "store" or not count:
            continue
        words = _WORDS.get(kind, kind.replace("_", " "))
        plural = words[:-1] + "ies" if words.endswith("y") else words + "s"
        shown.append(f"{count} {words if count == 1 else plural}")
    return ", ".join(shown) or "nothing but its definition"


def export_store(args: argparse.Namespace) -> int:
    output = Path(args.output) if args.output else None
    out = output.open("wb") if output is not None else sys.stdout.buffer
    progress, check = Transfer("exported"), ArchiveCheck()
    try:
        with client_for(args) as client:
            for chunk in client.memory_stores.export(args.store, scope=args.scope):
                out.write(chunk)
                check.feed(chunk)
                progress.update(check.size, check.lines)
        progress.done()
        manifest = check.finish()
        out.flush()
    except BaseException:
        progress.done()
        if output is not None:
            out.close()
            output.unlink(missing_ok=True)  # no partial archive is left behind
        raise
    if output is not None:
        out.close()
    where = f" to {output}" if output is not None else ""
    print(
        f"exported {args.store}{where}: {_counted(manifest.get('counts') or {})} "
        f"({check.lines + 1} lines, {check.size / MIB:.1f} MiB, sha256 {str(manifest.get('sha256'))[:16]}…)",
        file=sys.stderr,
    )
    return 0


def _archived_store(data: bytes) -> str:
    """The store an archive was exported from (its header's `memory_store`)."""
    try:
        header = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        header = None
    name = header.get("memory_store") if isinstance(header, dict) and header.get("kind") == "header" else None
    if not isinstance(name, str):
        raise CatalogError(
            0, "USAGE", "the file does not start with an archive's header: name the store with --into"
        )
    return name


def import_store(args: argparse.Namespace) -> int:
    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    target = args.into or _archived_store(data)
    progress = Transfer("sent", len(data))

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(data), MIB):
            yield data[start : start + MIB]
            progress.update(min(start + MIB, len(data)))
        progress.note(f"importing into {target}")

    try:
        with client_for(args) as client:
            result = client.memory_stores.import_archive(target, chunks() if progress.live else data)
    finally:
        progress.done()
    if _json(args):
        print_raw(json.dumps(result))
        return 0
    how = "a new store" if result.get("created") else "an empty store"
    line = (
        f"imported {result.get('source')} into {result.get('memory_store')} ({how}): "
        f"{_counted(result.get('counts') or {})}"
    )
    if result.get("reembedded"):
        line += f"; {result['reembedded']} to embed anew (another model made their vectors)"
    if result.get("conversations_renamed"):
        line += f"; {result['conversations_renamed']} conversations given a new id (theirs is taken here)"
    print(line)
    return 0


# --- audit ---------------------------------------------------------------------------------------

_RELATIVE = re.compile(r"^(\d+)([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def json_object(text: str) -> dict[str, Any]:
    """A JSON object given as an option's value (metadata, a filter)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def parse_time(text: str) -> int:
    """A time as epoch ms: `30m`, `2h`, `7d` ago; an ISO date or date-time (UTC unless it says);
    or epoch milliseconds."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative:
        return int((time.time() - int(relative.group(1)) * _UNIT[relative.group(2)]) * 1000)
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: give 30m, 2h, 7d (ago), 2026-01-31, 2026-01-31T09:00 or epoch ms"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def audit_events(args: argparse.Namespace) -> int:
    filters = {
        "principal": args.principal,
        "action_name": args.action,
        "securable_full_name": args.securable,
        "decision": args.decision,
        "start_time": args.since,
        "end_time": args.until,
        "page_size": min(args.limit, 1000) if args.limit else None,
    }
    columns = [
        ("SEQ", lambda e: e.get("seq")),
        ("TIME", lambda e: when(e.get("event_time"))),
        ("PRINCIPAL", lambda e: e.get("principal")),
        ("ACTION", lambda e: e.get("action_name")),
        ("SECURABLE", lambda e: e.get("securable_full_name")),
        ("DECISION", lambda e: e.get("decision")),
        ("STATUS", lambda e: e.get("status_code")),
    ]
    return show_list(args, calls.audit_events(filters), "events", "events", columns, args.limit or None)


def audit_verify(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        response = client.send(calls.verify_audit())
    result = response.json()
    if _json(args):
        print_raw(response.text)
    elif result.get("ok"):
        print(f"ok {result.get('checked')} events")
    else:
        broken, checked = result.get("first_broken_seq"), result.get("checked")
        print(f"broken at seq {broken} ({checked} events verified before it)")
    return 0 if result.get("ok") else 1


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
