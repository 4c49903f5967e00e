"""Every request the clients send, built once for both (the routes and bodies of docs/reference/api/,
from the server's OpenAPI document). A function here returns a `Call`; the sync and the async client
send it and shape the answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from catalog.client._core import Call, epoch_ms, if_match, segment

UC = "/api/2.1/unity-catalog"
WRITE_MODES = ("EXCLUSIVE", "OVERWRITE", "APPEND")
SEARCH_MODES = ("hybrid", "keyword", "semantic")


def _set(**fields: Any) -> dict[str, Any]:
    """A body of the fields that are given (None is left out: the server keeps what it has)."""
    return {key: value for key, value in fields.items() if value is not None}


def split_name(full_name: str, parts: int, what: str) -> list[str]:
    names = full_name.split(".")
    if len(names) != parts or not all(names):
        shape = ".".join(("catalog", "schema", "store")[:parts])
        raise ValueError(f"{what} {full_name!r} is not a full name `{shape}`")
    return names


# --- namespace -----------------------------------------------------------------------------------


def metastore_summary() -> Call:
    return Call("GET", f"{UC}/metastore_summary")


def create_catalog(name: str, comment: str | None, properties: dict[str, str] | None) -> Call:
    return Call("POST", f"{UC}/catalogs", body=_set(name=name, comment=comment, properties=properties))


def get_catalog(name: str) -> Call:
    return Call("GET", f"{UC}/catalogs/{segment(name)}")


def list_catalogs(page_size: int | None) -> Call:
    return Call("GET", f"{UC}/catalogs", params={"max_results": page_size})


def update_catalog(name: str, **fields: Any) -> Call:
    return Call("PATCH", f"{UC}/catalogs/{segment(name)}", body=_set(**fields), idempotent=True)


def delete_catalog(name: str, force: bool) -> Call:
    return Call("DELETE", f"{UC}/catalogs/{segment(name)}", params={"force": "true" if force else None})


def create_schema(full_name: str, comment: str | None, properties: dict[str, str] | None) -> Call:
    catalog, name = split_name(full_name, 2, "schema")
    body = _set(name=name, catalog_name=catalog, comment=comment, properties=properties)
    return Call("POST", f"{UC}/schemas", body=body)


def get_schema(full_name: str) -> Call:
    return Call("GET", f"{UC}/schemas/{segment(full_name)}")


def list_schemas(catalog: str, page_size: int | None) -> Call:
    return Call("GET", f"{UC}/schemas", params={"catalog_name": catalog, "max_results": page_size})


def update_schema(full_name: str, **fields: Any) -> Call:
    return Call("PATCH", f"{UC}/schemas/{segment(full_name)}", body=_set(**fields), idempotent=True)


def delete_schema(full_name: str, force: bool) -> Call:
    return Call("DELETE", f"{UC}/schemas/{segment(full_name)}", params={"force": "true" if force else None})


def create_store(full_name: str, **fields: Any) -> Call:
    catalog, schema, name = split_name(full_name, 3, "memory store")
    body = _set(name=name, catalog_name=catalog, schema_name=schema, **fields)
    return Call("POST", f"{UC}/memory-stores", body=body)


def get_store(full_name: str) -> Call:
    return Call("GET", f"{UC}/memory-stores/{segment(full_name)}")


def list_stores(catalog: str, schema: str, page_size: int | None) -> Call:
    params = {"catalog_name": catalog, "schema_name": schema, "max_results": page_size}
    return Call("GET", f"{UC}/memory-stores", params=params)


def update_store(full_name: str, **fields: Any) -> Call:
    return Call("PATCH", f"{UC}/memory-stores/{segment(full_name)}", body=_set(**fields), idempotent=True)


def delete_store(full_name: str) -> Call:
    return Call("DELETE", f"{UC}/memory-stores/{segment(full_name)}")


# --- grants --------------------------------------------------------------------------------------


def _securable(securable_type: str, full_name: str) -> str:
    return f"{segment(securable_type.lower())}/{segment(full_name)}"


def get_permissions(securable_type: str, full_name: str, principal: str | None) -> Call:
    return Call(
        "GET", f"{UC}/permissions/{_securable(securable_type, full_name)}", params={"principal": principal}
    )


def update_permissions(
    securable_type: str,
    full_name: str,
    principal: str,
    add: Sequence[str],
    remove: Sequence[str],
    scopes: Sequence[str] | None = None,
) -> Call:
    """One change for `principal`; with `scopes` (READ/WRITE_MEMORY_STORE only) the privileges
    added are limited to those scope patterns (added to a limited grant's) and those removed lose
    them (docs/governance/scopes.md)."""
    if isinstance(add, str) or isinstance(remove, str):
        raise TypeError("add and remove are lists of privileges")
    if isinstance(scopes, str):
        raise TypeError("scopes is a list of scope patterns")
    change: dict[str, Any] = {"principal": principal, "add": list(add), "remove": list(remove)}
    if scopes is not None:
        change["scopes"] = list(scopes)
    # granting what is held, or revoking what is not, changes nothing (patterns too: adding one
    # held, or taking one away that is gone): safe to send twice
    return Call(
        "PATCH",
        f"{UC}/permissions/{_securable(securable_type, full_name)}",
        body={"changes": [change]},
        idempotent=True,
    )


def effective_permissions(securable_type: str, full_name: str, principal: str | None) -> Call:
    return Call(
        "GET",
        f"{UC}/effective-permissions/{_securable(securable_type, full_name)}",
        params={"principal": principal},
    )


# --- groups (SCIM) ------------------------------------------------------------------------------

GROUPS = "/api/2.0/preview/scim/v2/Groups"


def _members(members: Sequence[str]) -> list[dict[str, str]]:
    if isinstance(members, str):
        raise TypeError("members is a list of principal names (or group ids)")
    return [{"value": member} for member in members]


def create_group(name: str, members: Sequence[str]) -> Call:
    return Call("POST", GROUPS, body={"displayName": name, "members": _members(members)})


def find_group(name: str) -> Call:
    """The group of that name, as a list of at most one."""
    if '"' in name:
        raise ValueError(f"a group name to look up cannot hold a double quote: {name!r}")
    return Call("GET", GROUPS, params={"filter": f'displayName eq "{name}"'})


def list_groups(start_index: int) -> Call:
    return Call("GET", GROUPS, params={"startIndex": start_index})


def change_members(group_id: str, verb: str, members: Sequence[str]) -> Call:
    operation = {"op": verb, "path": "members", "value": _members(members)}
    # adding a member twice, or removing one who is gone, changes nothing: safe to send twice
    return Call("PATCH", f"{GROUPS}/{segment(group_id)}", body={"Operations": [operation]}, idempotent=True)


def delete_group(group_id: str) -> Call:
    return Call("DELETE", f"{GROUPS}/{segment(group_id)}")


# --- entries -------------------------------------------------------------------------------------


def _entries(full_name: str, suffix: str = "") -> str:
    return f"{UC}/memory-stores/{segment(full_name)}/entries{suffix}"


def _scopes(scope: str | Sequence[str]) -> dict[str, Any]:
    """One scope (`scope`) or several (`scopes`), as the list and search routes take them."""
    if isinstance(scope, str):
        return {"scope": scope}
    return {"scopes": list(scope)}


def write_entry(
    full_name: str,
    scope: str,
    path: str,
    *,
    contents: str | None,
    description: str | None,
    write_mode: str | None,
    session_id: str | None,
    metadata: dict[str, Any] | None,
    ttl_seconds: int | None,
    source_type: str | None,
    creation_reason: str | None,
    creation_source: str | None,
    derived_from: Sequence[dict[str, Any]] | None,
) -> Call:
    mode = write_mode.upper() if write_mode is not None else None
    if mode is not None and mode not in WRITE_MODES:
        raise ValueError(f"write_mode {write_mode!r} is not one of {', '.join(WRITE_MODES)}")
    body = _set(
        path=path,
        contents=contents,
        description=description,
        write_mode=mode,
        session_id=session_id,
        metadata=metadata,
        ttl_seconds=ttl_seconds,
        source_type=source_type,
        creation_reason=creation_reason,
        creation_source=creation_source,
        derived_from=list(derived_from) if derived_from is not None else None,
    )
    # an overwrite writes the same thing twice; an append adds lines only when they are not there
    return Call(
        "POST",
        _entries(full_name),
        params={"scope": scope},
        body=body,
        idempotent=mode in ("OVERWRITE", "APPEND"),
    )


def replace_entry(
    full_name: str,
    scope: str,
    path: str,
    *,
    contents: str | None,
    description: str | None,
    session_id: str | None,
    etag: str,
) -> Call:
    """A write that holds only while the entry is still at `etag` (the edit route's If-Match)."""
    body = _set(scope=scope, path=path, session_id=session_id, description=description)
    if contents is not None:
        body["replace_all"] = {"contents": contents}
    return Call("PATCH", _entries(full_name), body=body, headers=if_match(etag), idempotent=False)


def get_entry(full_name: str, scope: str, path: str, session_id: str | None) -> Call:
    return Call(
        "GET", _entries(full_name, ":get"), params={"scope": scope, "path": path, "session_id": session_id}
    )


def list_entries(
    full_name: str,
    scope: str | Sequence[str],
    path_prefix: str | None,
    session_id: str | None,
    page_size: int | None,
    where: dict[str, Any] | None = None,
) -> Call:
    params = {**_scopes(scope), "path_prefix": path_prefix, "session_id": session_id, "page_size": page_size}
    if where:  # the list's `filter` is JSON text in the query
        params["filter"] = json.dumps(where, separators=(",", ":"))
    return Call("GET", _entries(full_name), params=params)


def edit_entry(
    full_name: str,
    scope: str,
    path: str,
    *,
    session_id: str | None,
    description: str | None,
    str_replace: tuple[str, str] | None,
    insert: str | None,
    insert_line: int | None,
    replace_all: str | None,
    append: str | None,
    etag: str | None,
    metadata: dict[str, Any] | None = None,
    ttl_seconds: int | None = None,
) -> Call:
    body = _set(
        scope=scope,
        path=path,
        session_id=session_id,
        description=description,
        metadata=metadata,
        ttl_seconds=ttl_seconds,
    )
    if str_replace is not None:
        old, new = str_replace
        body["str_replace"] = {"old_str": old, "new_str": new}
    if insert is not None:
        body["insert"] = _set(insert_text=insert, insert_line=insert_line)
    if replace_all is not None:
        body["replace_all"] = {"contents": replace_all}
    if append is not None:
        body["append"] = {"text": append}
    # replacing everything (or only the description) twice leaves the same entry
    sets_only = str_replace is None and insert is None and append is None
    return Call(
        "PATCH", _entries(full_name), body=body, headers=if_match(etag), idempotent=sets_only and etag is None
    )


def delete_entry(full_name: str, scope: str, path: str, session_id: str | None, etag: str | None) -> Call:
    return Call(
        "DELETE",
        _entries(full_name),
        params={"scope": scope, "path": path, "session_id": session_id},
        headers=if_match(etag),
    )


def delete_scope(full_name: str, scope: str) -> Call:
    return Call("DELETE", _entries(full_name), params={"scope": scope, "all": "true"})


def search_entries(
    full_name: str,
    scope: str | Sequence[str],
    query: str,
    *,
    top_k: int | None,
    mode: str | None,
    min_score: float | None,
    path_prefix: str | None,
    session_id: str | None,
    where: dict[str, Any] | None = None,
) -> Call:
    if mode is not None and mode not in SEARCH_MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(SEARCH_MODES)}")
    body = _set(
        **_scopes(scope),
        query=query,
        top_k=top_k,
        mode=mode,
        min_score=min_score,
        path_prefix=path_prefix,
        session_id=session_id,
        filter=where or None,
    )
    return Call("POST", _entries(full_name, ":search"), body=body, idempotent=True)  # it only reads


def delete_matching_entries(
    full_name: str,
    scope: str | Sequence[str],
    query: str,
    *,
    mode: str | None,
    min_score: float | None,
    path_prefix: str | None,
    session_id: str | None,
    dry_run: bool,
) -> Call:
    """Forget by query: the entries a search for `query` answers at or above `min_score` (the
    server's default 0.5), at most 100 per call."""
    if mode is not None and mode not in SEARCH_MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(SEARCH_MODES)}")
    body = _set(
        **_scopes(scope),
        query=query,
        mode=mode,
        min_score=min_score,
        path_prefix=path_prefix,
        session_id=session_id,
        dry_run=True if dry_run else None,
    )
    # a dry run only reads; a delete sent twice would delete what matches then (more, if truncated)
    return Call("POST", _entries(full_name, ":deleteMatching"), body=body, idempotent=dry_run)


def entry_history(full_name: str, scope: str, path: str, session_id: str | None) -> Call:
    return Call(
        "GET",
        _entries(full_name, ":history"),
        params={"scope": scope, "path": path, "session_id": session_id},
    )


def restore_entry(full_name: str, scope: str, path: str, etag: str, session_id: str | None) -> Call:
    body = _set(scope=scope, path=path, session_id=session_id, etag=str(etag))
    return Call("POST", _entries(full_name, ":restore"), body=body)


# --- trust and review -------------------------------------------------------------------------


def _trust(full_name: str, suffix: str = "") -> str:
    return f"{UC}/memory-stores/{segment(full_name)}/trust-policy{suffix}"


def get_trust_policy(full_name: str) -> Call:
    return Call("GET", _trust(full_name))


def set_trust_policy(full_name: str, policy: dict[str, Any] | None) -> Call:
    """Set the store's trust policy; None removes it."""
    if policy is None:
        return Call("DELETE", _trust(full_name), idempotent=True)
    return Call("PUT", _trust(full_name), body=policy, idempotent=True)


def try_trust_policy(full_name: str, text: str, via: str, on_behalf_of: bool) -> Call:
    body = {"text": text, "via": via, "on_behalf_of": on_behalf_of}
    return Call("POST", _trust(full_name, ":test"), body=body, idempotent=True)


def quarantined_entries(full_name: str, scope: str | None) -> Call:
    return Call("GET", _entries(full_name, ":quarantined"), params={"scope": scope})


def review_entry(
    full_name: str,
    scope: str,
    path: str,
    decision: str,
    *,
    session_id: str | None,
    etag: str | None,
    reason: str | None,
) -> Call:
    if decision not in ("approve", "reject"):
        raise ValueError(f"decision {decision!r} is not approve or reject")
    body = _set(scope=scope, path=path, session_id=session_id, decision=decision, etag=etag, reason=reason)
    return Call("POST", _entries(full_name, ":review"), body=body)


# --- backup and restore -------------------------------------------------------------------------

ARCHIVE_TYPE = "application/x-ndjson"


def export_store(full_name: str, scope: str | None) -> Call:
    """The store's archive (JSON lines), streamed; `scope` limits it to one scope."""
    return Call("GET", f"{UC}/memory-stores/{segment(full_name)}/export", params={"scope": scope})


def import_store(full_name: str) -> Call:
    """An archive (the body, sent apart from the call) restored into the store; it is never sent
    twice: a second import finds the store full."""
    return Call(
        "POST",
        f"{UC}/memory-stores/{segment(full_name)}/import",
        headers={"content-type": ARCHIVE_TYPE},
        idempotent=False,
    )


# --- auditors ------------------------------------------------------------------------------------

AUDIT_FILTERS = (
    "start_time",
    "end_time",
    "principal",
    "action_name",
    "securable_full_name",
    "decision",
    "status_code",
    "scope",
    "order",
    "page_size",
)


def audit_events(filters: dict[str, Any]) -> Call:
    unknown = sorted(set(filters) - set(AUDIT_FILTERS))
    if unknown:
        raise TypeError(f"unknown audit filter {unknown[0]!r} (known: {', '.join(AUDIT_FILTERS)})")
    params = dict(filters)
    for key in ("start_time", "end_time"):
        params[key] = epoch_ms(params.get(key))
    return Call("GET", f"{UC}/system/audit", params=params)


def verify_audit() -> Call:
    return Call("GET", f"{UC}/system/audit:verify")


def lineage(
    full_name: str,
    direction: str | None,
    scope: str | None,
    path: str | None,
    session_id: str | None,
    depth: int | None,
) -> Call:
    params = {
        "securable_full_name": full_name,
        "direction": direction,
        "scope": scope,
        "path": path,
        "session_id": session_id,
        "depth": depth,
    }
    return Call("GET", f"{UC}/system/lineage", params=params)
