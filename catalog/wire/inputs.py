"""The request gate: what every route's inputs must satisfy before Litestar parses them, and the
text constraints the wire types share.

Rules (checked in this order by `check_request`, a `before_request` hook on every router):
1. Integer query parameters are written in decimal digits (`10`, `-1`): `1e3`, `10.0` or `0x10`
   are 400 naming the parameter. Their ranges are declared on the parameter (`Parameter(ge=, le=)`)
   and enforced by Litestar, so no integer reaches PostgreSQL unbounded.
2. A JSON body nested deeper than `MAX_JSON_DEPTH` levels is 400 before it is decoded (the
   decoder would recurse until it fails).
3. No text value or key in a body holds NUL (PostgreSQL text cannot store it): 400 naming it.
4. The body is decoded strictly into the route's type: a string where a number is expected (or a
   fraction where an integer is, a number where a string is) is 400 naming the field. A number
   with no fraction (`10.0`, `1e2`) is an integer, as JSON Schema counts it. Litestar's own
   decoding afterwards is lax, which is why this step exists.
"""

from __future__ import annotations

import re
import types
import typing
import weakref
from dataclasses import dataclass
from typing import Any, Union

import msgspec
from litestar import Request
from litestar.handlers import HTTPRouteHandler
from litestar.params import BodyKwarg, Parameter, ParameterKwarg

from catalog.errors import InvalidParameter, PayloadTooLarge

MAX_JSON_DEPTH = 64
# the most the connection layer takes of a request line and its headers together (431 beyond it)
MAX_HEAD_BYTES = 16 * 1024

# Text patterns shared by the wire types. They use only what ECMA-262 and Python's `re` read alike
# (no \d, \w or \s, whose meanings differ), because the OpenAPI document states them and the
# server enforces them.
NO_NUL = r"^[^\x00]*$"
# at least one character other than ASCII whitespace, and no NUL
NOT_BLANK = r"^[^\x00]*[^\x00\t\n\v\f\r ][^\x00]*$"
_NOT_BLANK = re.compile(NOT_BLANK)
# no C0 or C1 control characters (scopes, session ids)
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def blank(value: str) -> bool:
    """Empty, only ASCII whitespace, or holding NUL: what `NOT_BLANK` refuses."""
    return _NOT_BLANK.fullmatch(value) is None


def within(value: str | None, field: str, limit: int) -> str | None:
    """The one length rule for text fields (contents, descriptions, comments, property values):
    longer than `limit` characters is 413 PAYLOAD_TOO_LARGE naming the field."""
    if value is not None and len(value) > limit:
        raise PayloadTooLarge(f"{field} must be at most {limit} characters", field)
    return value


def has_control(value: str) -> bool:
    return _CONTROL.search(value) is not None


# --- the gate ------------------------------------------------------------------------------------------

_INTEGER = re.compile(r"-?[0-9]+")
# a JSON string (possessive, so no backtracking on long strings) or a bracket
_STRUCTURE = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
_OPEN = frozenset(b"[{")


@dataclass(frozen=True)
class _Inputs:
    integer_queries: tuple[str, ...]  # wire names of integer query parameters
    body: Any  # the type the JSON body decodes into, or None


def _integer(annotation: Any) -> bool:
    if annotation is int:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _integer(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_integer(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return False


# what each route takes, read once per route (an app's handlers go with it)
_INPUTS: weakref.WeakKeyDictionary[HTTPRouteHandler, _Inputs] = weakref.WeakKeyDictionary()


def inputs_of(handler: HTTPRouteHandler) -> _Inputs:
    """What the gate checks for one route (from its signature, which Litestar parsed once). Path
    parameters are all strings here, so the integers are query parameters."""
    try:
        inputs = _INPUTS.get(handler)
    except TypeError:  # a handler that cannot be weakly referred to (Litestar's own OPTIONS)
        return _inputs_of(handler)
    if inputs is None:
        inputs = _INPUTS[handler] = _inputs_of(handler)
    return inputs


def _inputs_of(handler: HTTPRouteHandler) -> _Inputs:
    queries, body = [], None
    for name, field in handler.parsed_fn_signature.parameters.items():
        kwarg = field.kwarg_definition
        if isinstance(kwarg, BodyKwarg) or name == "data":
            body = field.annotation
        elif (
            isinstance(kwarg, ParameterKwarg)
            and not kwarg.header
            and not kwarg.cookie
            and _integer(field.annotation)
        ):
            queries.append(kwarg.query or kwarg.name or name)
    return _Inputs(tuple(queries), body)


async def check_request(request: Request[Any, Any, Any]) -> None:
    """The `before_request` hook: see the module docstring. Returns None (the route goes on)."""
    inputs = inputs_of(request.route_handler)
    for name in inputs.integer_queries:
        for value in request.query_params.getall(name, []):
            if not _INTEGER.fullmatch(value):
                raise InvalidParameter(f"{name} must be an integer written in decimal digits", name)
    if inputs.body is None:
        return
    body = await request.body()
    if not body:
        return  # Litestar answers the missing body
    check_json(body, inputs.body)


def check_json(body: bytes, type_: Any) -> Any:
    """Rules 2-4 on one JSON document; returns it decoded into `type_`."""
    if nested_deeper_than(body, MAX_JSON_DEPTH):
        raise InvalidParameter(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        document = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidParameter(f"the request body is not valid JSON: {exc}") from None
    document, where = _normalized(document)
    if where is not None:
        raise InvalidParameter(f"`{where}` must not contain NUL characters (\\u0000)", where)
    try:
        return msgspec.convert(document, type_, strict=True)
    except msgspec.ValidationError as exc:
        message, field = _problem(str(exc))
        where = f" (field `{field}`)" if field else ""
        raise InvalidParameter(f"invalid request: {message}{where}", field) from None


def nested_deeper_than(body: bytes, limit: int) -> bool:
    if body.count(b"[") + body.count(b"{") <= limit:  # cannot nest deeper than it has brackets
        return False
    depth = 0
    for match in _STRUCTURE.finditer(body):
        char = match.group()[0]
        if char == 0x22:  # a string: brackets inside it do not count
            continue
        if char in _OPEN:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _normalized(value: Any, path: str = "") -> tuple[Any, str | None]:
    """The document with whole numbers as integers, and where its first NUL is (a dotted path
    with [i] for items), if it holds one. Its depth is bounded already (rule 2)."""
    if isinstance(value, float):
        return (int(value) if value.is_integer() else value), None
    if isinstance(value, str):
        return value, ((path or "body") if "\x00" in value else None)
    if isinstance(value, list):
        items = []
        for i, item in enumerate(value):
            item, where = _normalized(item, f"{path}[{i}]")
            if where is not None:
                return value, where
            items.append(item)
        return items, None
    if isinstance(value, dict):
        fields = {}
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if "\x00" in key:
                return value, child.replace("\x00", "\ufffd")
            item, where = _normalized(item, child)
            if where is not None:
                return value, where
            fields[key] = item
        return fields, None
    return value, None


# (a key of an object that is wrong is reported "at `key` in `$.path`": the object is named)
_AT = re.compile(r"^(?P<message>.*?)(?: - at (?:`key` in )?`\$(?P<path>[^`]*)`)?$", re.DOTALL)
_NAMED = re.compile(r"(?:missing required|contains unknown) field `(?P<name>[^`]+)`")


def _problem(error: str) -> tuple[str, str | None]:
    """msgspec's "Expected `int`, got `str` - at `$.top_k`" → ("Expected `int`, got `str`", "top_k")."""
    match = _AT.match(error)
    message, path = (match["message"], match["path"] or "") if match else (error, "")
    named = _NAMED.search(message)
    if named:
        path = f"{path}.{named['name']}"
    field = path.lstrip(".")
    return message, field or None


# --- shared field types ----------------------------------------------------------------------------------

MAX_SCOPE = 256
MAX_PRINCIPAL = 255


def name_like(value: object, limit: int) -> typing.TypeGuard[str]:
    """Whether `value` may name a scope, a session or a principal: a string of 1-`limit`
    characters, not only whitespace, without control characters (`catalog.wire.entry_keys`
    answers which rule a request broke; a token's claims are only accepted or not)."""
    return isinstance(value, str) and bool(value.strip()) and len(value) <= limit and not has_control(value)


Scope = typing.Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_SCOPE,
        pattern=NO_CONTROL,
        description="whose memories (a user, an agent, a team): 1-256 characters, no control characters",
    ),
]
PrincipalName = typing.Annotated[
    str,
    msgspec.Meta(
        max_length=MAX_PRINCIPAL,
        pattern=NOT_BLANK,
        description="a principal (token subject) or group name: 1-255 characters, not only whitespace",
    ),
]


def integer(ge: int, le: int, description: str) -> Any:
    """A bounded integer query parameter (`Parameter(ge=, le=)`; a lower bound of 0 is written into
    the schema too, where Litestar's generator drops falsy bounds)."""
    return Parameter(ge=ge, le=le, description=description, schema_extra={"minimum": ge})
