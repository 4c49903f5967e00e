"""Entry keys: the scope, session and path that name an entry in a store, validated the same way
wherever an entry is named (entries in both dialects, lineage, auditors' queries).

Rules: a scope and a session id are 1-256 characters without control characters ('' stands for
"no session"); a path is absolute, at most 1,024 characters, without control characters and
without empty, '.' or '..' segments; a request names at most 20 scopes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec
from litestar.params import Parameter, QueryParameter

from catalog.errors import InvalidParameter
from catalog.wire.inputs import MAX_SCOPE, NO_CONTROL, has_control
from catalog.wire.names import MAX_FULL_NAME, STORE_FULL_NAME_PATTERN

MAX_PATH = 1024
MAX_SESSION = 256
MAX_SCOPES = 20

# An absolute path of segments that are neither empty, '.' nor '..', without control characters.
_SEGMENT = (
    r"([^/\x00-\x1f\x7f.][^/\x00-\x1f\x7f]*|\.[^/\x00-\x1f\x7f.][^/\x00-\x1f\x7f]*|\.\.[^/\x00-\x1f\x7f]+)"
)
PATH_PATTERN = rf"^(/{_SEGMENT})+$"
PREFIX_PATTERN = r"^(/[^\x00]*)?$"
SESSION_PATTERN = NO_CONTROL

# --- in bodies (msgspec) -------------------------------------------------------------------------

EntryPath = Annotated[
    str,
    msgspec.Meta(
        max_length=MAX_PATH,
        pattern=PATH_PATTERN,
        description="an absolute path ('/notes/a.md'): no empty, '.' or '..' segments, no control characters",
    ),
]
PathPrefix = Annotated[
    str, msgspec.Meta(max_length=MAX_PATH, pattern=PREFIX_PATTERN, description="'' or a path prefix from '/'")
]
SessionId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_SESSION,
        pattern=SESSION_PATTERN,
        description="a session within the scope: 1-256 characters, no control characters",
    ),
]

# --- in query strings (Litestar parameters) -----------------------------------------------------

SCOPE_SCHEMA = {"minLength": 1, "maxLength": MAX_SCOPE, "pattern": NO_CONTROL}
_SCOPE_TEXT = "whose memories (a user, an agent, a team): 1-256 characters, no control characters"
# `scope` is a name Litestar reserves (the ASGI scope), so the query parameter is mapped explicitly;
# its rules are checked by `validate_scope`, which names `scope`.
ScopeParam = Annotated[
    str | None, QueryParameter(name="scope", description=_SCOPE_TEXT, schema_extra=SCOPE_SCHEMA)
]
RequiredScopeParam = Annotated[
    str, QueryParameter(name="scope", description=_SCOPE_TEXT, schema_extra=SCOPE_SCHEMA)
]
StoreFullNameParam = Annotated[
    str,
    Parameter(pattern=STORE_FULL_NAME_PATTERN, max_length=MAX_FULL_NAME, description="catalog.schema.store"),
]
PathParam = Annotated[
    str,
    Parameter(
        pattern=PATH_PATTERN,
        max_length=MAX_PATH,
        description="an absolute path: no empty, '.' or '..' segments, no control characters",
    ),
]
SessionParam = Annotated[
    str | None,
    Parameter(
        min_length=1,
        max_length=MAX_SESSION,
        pattern=SESSION_PATTERN,
        description="a session within the scope",
    ),
]

# --- validation ------------------------------------------------------------------------------------


def validate_path(path: str | None, field: str = "path") -> str:
    if not path:
        raise InvalidParameter(f"{field} is required", field)
    if len(path) > MAX_PATH:
        raise InvalidParameter(f"{field} must be at most {MAX_PATH} characters", field)
    if not path.startswith("/"):
        raise InvalidParameter(f"{field} must be absolute (start with '/')", field)
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise InvalidParameter(f"{field} must not contain control characters", field)
    for segment in path[1:].split("/"):
        if segment in ("", ".", ".."):
            raise InvalidParameter(f"{field} must not contain empty, '.' or '..' segments", field)
    return path


def validate_path_prefix(prefix: str | None, field: str = "path_prefix") -> str | None:
    if prefix is None or prefix == "":
        return None
    if len(prefix) > MAX_PATH or not prefix.startswith("/"):
        raise InvalidParameter(f"{field} must start with '/' and be at most {MAX_PATH} characters", field)
    return prefix


def _name_like(value: str | None, field: str, limit: int) -> str:
    if value is None or value == "":
        raise InvalidParameter(f"{field} is required and must not be empty", field)
    if not value.strip():
        raise InvalidParameter(f"{field} must not be blank", field)
    if len(value) > limit:
        raise InvalidParameter(f"{field} must be at most {limit} characters", field)
    if has_control(value):
        raise InvalidParameter(f"{field} must not contain control characters", field)
    return value


def validate_scope(scope: str | None, field: str = "scope") -> str:
    return _name_like(scope, field, MAX_SCOPE)


def validate_scopes(
    scope: str | None,
    scopes: Sequence[str] | None,
    names: tuple[str, str] = ("scope", "scopes"),
) -> list[str]:
    """`scope` and/or `scopes` as one list without repeats (at least one, at most MAX_SCOPES);
    `names`: the two fields as the request names them (`actor_id`, `actor_ids`)."""
    one, many = names
    found: list[str] = []
    if scope is not None:
        found.append(validate_scope(scope, one))
    for i, item in enumerate(scopes or []):
        found.append(validate_scope(item, f"{many}[{i}]"))
    if not found:
        raise InvalidParameter(f"{one} (or {many}) is required", one)
    unique = list(dict.fromkeys(found))
    if len(unique) > MAX_SCOPES:
        raise InvalidParameter(f"at most {MAX_SCOPES} {many} per request", many)
    return unique


def validate_session(session_id: str | None, field: str = "session_id") -> str:
    """'' stands for "no session"."""
    return "" if session_id is None else _name_like(session_id, field, MAX_SESSION)
