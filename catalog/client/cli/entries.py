"""The remote commands on a store's entries: list, get, put, delete, search, forget by query,
and the review of held entries."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from catalog.client import _calls as calls
from catalog.client.cli.base import show_list, show_one
from catalog.client.output import fields, table, when

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
