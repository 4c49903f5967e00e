"""Provenance: where an entry version's text came from, as the server saw the change arrive.

Rules:
- it is built here, in the change's transaction, from what the server knows and never from what a
  request says: the principal and the end user of its token (`on_behalf_of`), the channel the
  change came through and the model that wrote it (`ops.Channel`, set by the route, the MCP server
  or the tool-calling loop the change entered through), what it was derived from (the
  conversation or session and its items, the source entries: the lineage recorded with it), the
  coarse class of its source (`catalog.access.trust.class_of`) and, for a store with a trust
  policy, what the policy decided (`trust`);
- each version keeps the provenance of its change (the history trigger copies it); a state change
  (superseded, merged) and a redaction keep the text's; a review adds its decision (`review`);
- an entry or version written before provenance was kept answers its author alone, class
  `unknown` (`answer`); an imported one keeps its archive's (`catalog.backup`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from catalog.access.trust import Verdict, class_of
from catalog.auth import Principal
from catalog.entries import operations as ops

MAX_ITEMS = 20  # item ids a provenance names (the lineage keeps them all); `items_total` counts them


def source(origin: ops.TranscriptSource | None, derived_from: Sequence[ops.Source]) -> dict[str, Any] | None:
    """What a change was derived from: a conversation or a session (with its store and items) and
    the entries it names; None for neither."""
    found: dict[str, Any] = {}
    if origin is not None:
        if origin.kind == "conversation":
            found["conversation"] = origin.thread_id
            found["memory_store"] = origin.store
        else:
            found["session"] = origin.thread_id
            found["session_store"] = origin.store
        if origin.item_ids:
            found["items"] = list(origin.item_ids[:MAX_ITEMS])
            if len(origin.item_ids) > MAX_ITEMS:
                found["items_total"] = len(origin.item_ids)
    if derived_from:
        found["entries"] = [
            {
                "memory_store": ref.store,
                "scope": ref.key.scope,
                "path": ref.key.path,
                **({"session_id": ref.key.session_id} if ref.key.session_id else {}),
            }
            for ref in derived_from
        ]
    return found or None


def of_change(
    principal: Principal,
    channel: ops.Channel,
    *,
    origin: ops.TranscriptSource | None = None,
    derived_from: Sequence[ops.Source] = (),
    verdict: Verdict | None = None,
    extra_source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The provenance of one change by `principal` through `channel`."""
    value: dict[str, Any] = {"principal": principal.name}
    if principal.on_behalf_of:
        value["on_behalf_of"] = principal.on_behalf_of
    value["via"] = channel.via
    if channel.model:
        value["model"] = channel.model
    value["class"] = class_of(channel.via, principal.on_behalf_of)
    found = source(origin, derived_from)
    if extra_source:
        found = {**(found or {}), **extra_source}
    if found:
        value["source"] = found
    if verdict is not None:
        value["trust"] = verdict.note()
    return value


def of_deletion(principal: Principal, channel: ops.Channel) -> dict[str, Any]:
    """The provenance of a deletion (its version holds no text)."""
    return of_change(principal, channel)


def answer(provenance: dict[str, Any] | None, author: str) -> dict[str, Any]:
    """A stored provenance as answered: as kept, or, for a change made before provenance was kept,
    its author alone (class `unknown`)."""
    if not provenance:
        return {"principal": author, "class": "unknown"}
    if "principal" not in provenance or "class" not in provenance:
        return {"principal": author, "class": "unknown", **provenance}
    return provenance


def class_of_row(provenance: dict[str, Any] | None) -> str:
    """The coarse class of a stored provenance (`unknown` when none is kept)."""
    if not provenance:
        return "unknown"
    value = provenance.get("class")
    return value if isinstance(value, str) else "unknown"
