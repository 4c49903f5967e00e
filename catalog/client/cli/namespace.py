"""The remote commands of the namespace and its governance: catalogs, schemas, memory stores
(with their trust policy), grants and groups."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.client import _calls as calls
from catalog.client.cli.audit import json_object
from catalog.client.cli.base import client_for, fail, read_list, show_list, show_one, wants_json
from catalog.client.errors import CatalogError
from catalog.client.output import fields, print_raw, table, when

if TYPE_CHECKING:
    from catalog.client import Client

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
    if wants_json(args):
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
    if wants_json(args):
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
    if wants_json(args):
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
    print_raw(json.dumps(group)) if wants_json(args) else print(_group(group))
    return 0


def groups_create(args: argparse.Namespace) -> int:
    return show_one(args, calls.create_group(args.name, args.members or []), _group)


def groups_change(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        group = _find_group(client, args.name)
        response = client.send(calls.change_members(group["id"], args.groups_command, args.members))
    print_raw(response.text) if wants_json(args) else print(_group(response.json()))
    return 0
