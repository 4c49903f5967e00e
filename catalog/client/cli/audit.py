"""The remote command that reads the audit log (`catalog audit events`), and its time and
filter arguments."""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

from catalog.client import _calls as calls
from catalog.client.cli.base import client_for, show_list, wants_json
from catalog.client.output import print_raw, when

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
    if wants_json(args):
        print_raw(response.text)
    elif result.get("ok"):
        print(f"ok {result.get('checked')} events")
    else:
        broken, checked = result.get("first_broken_seq"), result.get("checked")
        print(f"broken at seq {broken} ({checked} events verified before it)")
    return 0 if result.get("ok") else 1
