"""The memory tools, defined once: their names, what they teach a model, their arguments, and
what each does, as entry operations run by `catalog.entries.service` (so a tool call is
authorized, held to the store's scope binding, validated and audited exactly like its REST twin).
The MCP server (`catalog.dialects.mcp`) serves them; any other tool-calling surface uses `TOOLS`
and `call` too.

A tool never takes a scope: trusted code binds the tools to one store and one scope (`Bound`)
before a model sees them, and names the channel they are called through (`Bound.channel`: the
writes' provenance, and what the store's trust policy judges them as: a model's). A memory the
store's trust policy holds for review is never read to a model: searches and lists leave it out,
and `get_memory` answers its author that it is held, without its text. Every memory a tool answers
says who wrote it (`provenance`: person, application, model or unknown).

A tool's failure is a `ToolError` whose message tells the model what to do next; it also carries
the status and error code the REST twin would have answered, for the audit event.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import operations as ops
from catalog.entries import service as entries
from catalog.entries.provenance import class_of_row
from catalog.entries.repo import EntryRow
from catalog.entries.schemas import MAX_CONTENTS, MAX_DESCRIPTION, MAX_QUERY, MAX_TOP_K
from catalog.errors import (
    Aborted,
    AlreadyExists,
    CatalogError,
    FieldError,
    NotFound,
    PermissionDenied,
)
from catalog.wire import Input
from catalog.wire.entry_keys import MAX_PATH

LIST_LIMIT = 100  # memories listed by one list_memories call
SEARCH_DEFAULT = 5
EXCERPT = 2000  # characters of each memory's contents a search answers (get_memory has the rest)


MCP = ops.Channel(via="mcp")  # the channel of the MCP server's tool calls (a model's)


@dataclass(frozen=True)
class Bound:
    """Where a model's tools act: one memory store and one scope, chosen by trusted code from the
    verified token (never by the model)."""

    principal: Principal
    store: str  # catalog.schema.store
    scope: str
    # a dry run: the write tools check what they would do (privileges, paths, edits) and answer it,
    # and write nothing
    dry_run: bool = False
    source_type: str | None = None  # what new memories are marked with (e.g. written by extraction)
    # the conversation or session items the writes are derived from (lineage), set by the code
    # that authorized reading them
    origin: ops.TranscriptSource | None = None
    # where the calls come from (the writes' provenance): a model through MCP unless the code that
    # runs the calls says which (responses, extraction, a pipeline) and which model
    channel: ops.Channel = MCP


class ToolError(Exception):
    """A tool call that failed in a way the model can act on."""

    def __init__(self, message: str, status: int = 400, error_code: str = "INVALID_PARAMETER_VALUE") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_code = error_code


# --- arguments ----------------------------------------------------------------------------------------

Path = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_PATH,
        description="The memory's path, e.g. /memories/preferences.md (stable: one memory per topic)",
    ),
]
Description = Annotated[
    str,
    msgspec.Meta(
        max_length=MAX_DESCRIPTION,
        description="The memory in one line: what someone skimming a list of memories needs to know",
    ),
]
Contents = Annotated[
    str,
    msgspec.Meta(max_length=MAX_CONTENTS, description="The memory's details, one fact per line"),
]


class SearchArgs(Input):
    query: Annotated[
        str,
        msgspec.Meta(min_length=1, max_length=MAX_QUERY, description="What to look for, in natural language"),
    ]
    top_k: Annotated[
        int, msgspec.Meta(ge=1, le=MAX_TOP_K, description="How many memories to return (default 5)")
    ] = SEARCH_DEFAULT


class SaveArgs(Input):
    path: Path
    description: Description
    contents: Contents | None = None


class PathArgs(Input):
    path: Path


class DeleteArgs(Input):
    path: Path | None = None
    query: (
        Annotated[
            str,
            msgspec.Meta(
                min_length=1,
                max_length=MAX_QUERY,
                description="Instead of path: delete every memory that matches this, in natural language "
                "(e.g. the divorce); at most 100 at a time",
            ),
        ]
        | None
    ) = None


class ListArgs(Input):
    path_prefix: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=MAX_PATH,
                description="Only memories whose path starts with this, e.g. /memories/",
            ),
        ]
        | None
    ) = None


class StrReplace(Input):
    old_str: Annotated[
        str, msgspec.Meta(min_length=1, description="Text that occurs exactly once in the memory")
    ]
    new_str: Annotated[str, msgspec.Meta(description="What replaces it (empty removes it)")]


class Insert(Input):
    insert_text: Annotated[str, msgspec.Meta(description="The line(s) to insert")]
    insert_line: (
        Annotated[
            int,
            msgspec.Meta(ge=0, description="Insert before this line (0 = at the top); absent: at the end"),
        ]
        | None
    ) = None


class ReplaceAll(Input):
    contents: Contents


class UpdateArgs(Input):
    path: Path
    description: Description | None = None
    str_replace: StrReplace | None = None
    insert: Insert | None = None
    replace_all: ReplaceAll | None = None


# --- answers -----------------------------------------------------------------------------------------


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _memory(row: EntryRow, *, contents: bool = True, excerpt: int | None = None) -> dict[str, Any]:
    memory: dict[str, Any] = {"path": row.path, "description": row.description}
    if contents:
        text = row.contents or ""
        if excerpt is not None and len(text) > excerpt:
            text = text[:excerpt] + f"\n[... {len(row.contents or '') - excerpt} more characters: get_memory]"
        memory["contents"] = text
    if row.session_id:
        memory["session_id"] = row.session_id
    memory["updated_at"] = _time(row.updated_at)
    memory["updated_by"] = row.updated_by
    memory["provenance"] = class_of_row(row.provenance)  # who wrote it: person, application, model
    return memory


HELD = (
    "held for review: the memory store's trust policy keeps it from every search and list until "
    "one of its managers approves it"
)


def _written(written: entries.Written, verb: str) -> dict[str, Any]:
    row = written.row
    result = f"{verb} {row.path}" + (f"; {HELD}" if row.held else "")
    if not written.readable:  # may write but not read: acknowledge, tell nothing of what it holds
        return {"result": result, "path": row.path}
    return {"result": result, "memory": _memory(row)}


# --- the tools ---------------------------------------------------------------------------------------


async def _search(ctx: Context, bound: Bound, args: SearchArgs) -> dict[str, Any]:
    op = ops.Search(store=bound.store, scopes=(bound.scope,), query=args.query, top_k=args.top_k)
    found = await entries.search(ctx, bound.principal, op)
    answer: dict[str, Any] = {
        "memories": [{**_memory(row, excerpt=EXCERPT), "score": score} for row, score in found.hits]
    }
    if not found.hits:
        answer["result"] = "no memory matches; save one if this is worth remembering"
    if found.degraded:  # the model should not conclude that nothing is kept
        answer["degraded"] = list(found.degraded)
        answer["note"] = "the search may have missed memories (an index is behind); try again later"
    return answer


async def _would(ctx: Context, bound: Bound, path: str) -> EntryRow | None:
    """A dry run's check: may the caller write here, and what is at `path` now (None: nothing)."""
    await entries.resolve_store(ctx, bound.principal, bound.store, "entries.write", [bound.scope])
    try:
        return await entries.get(
            ctx, bound.principal, ops.Get(store=bound.store, target=ops.ByKey(scope=bound.scope, path=path))
        )
    except NotFound:
        return None


def _dry(verb: str, path: str, description: str | None, contents: str | None) -> dict[str, Any]:
    memory = {"path": path, "description": description, "contents": contents or ""}
    return {"result": f"would {verb} {path} (a dry run: nothing is written)", "memory": memory}


async def _save(ctx: Context, bound: Bound, args: SaveArgs) -> dict[str, Any]:
    key = ops.ByKey(scope=bound.scope, path=args.path)
    if bound.dry_run:
        if await _would(ctx, bound, args.path) is not None:
            raise ToolError(
                f"a memory already exists at {args.path}; read it with get_memory and change it with "
                "update_memory instead of saving a duplicate",
                409,
                AlreadyExists.error_code,
            )
        return _dry("save", args.path, args.description, args.contents)
    op = ops.Write(
        store=bound.store,
        key=key,
        contents=args.contents,
        description=args.description,
        source_type=bound.source_type,
        origin=bound.origin,
        channel=bound.channel,
    )
    try:
        written = await entries.write(ctx, bound.principal, op)
    except AlreadyExists:
        raise ToolError(
            f"a memory already exists at {args.path}; read it with get_memory and change it with "
            "update_memory instead of saving a duplicate",
            409,
            AlreadyExists.error_code,
        ) from None
    return _written(written, "saved")


async def _get(ctx: Context, bound: Bound, args: PathArgs) -> dict[str, Any]:
    # a held memory is found for its author (and a manager) only, and is not read to the model
    target = ops.ByKey(scope=bound.scope, path=args.path)
    row = await entries.get(
        ctx, bound.principal, ops.Get(store=bound.store, target=target, include_quarantined=True)
    )
    if row.held:
        message = f"the memory at {args.path} is {HELD}; it cannot be read until then"
        raise ToolError(message, 409, "RESOURCE_CONFLICT")
    return {"memory": _memory(row)}


async def _list(ctx: Context, bound: Bound, args: ListArgs) -> dict[str, Any]:
    op = ops.List(
        store=bound.store,
        scopes=(bound.scope,),
        path_prefix=args.path_prefix,
        page_size=LIST_LIMIT,
        max_page=LIST_LIMIT,
    )
    page = await entries.list_entries(ctx, bound.principal, op)
    listed: dict[str, Any] = {"memories": [_memory(row, contents=False) for row in page.rows]}
    if not page.rows:
        listed["result"] = "no memories" + (f" under {args.path_prefix}" if args.path_prefix else " yet")
    if page.next_page_token is not None:
        listed["result"] = f"the first {LIST_LIMIT} memories; narrow the list with path_prefix"
    return listed


async def _update(ctx: Context, bound: Bound, args: UpdateArgs) -> dict[str, Any]:
    given = [name for name in ("str_replace", "insert", "replace_all") if getattr(args, name) is not None]
    if len(given) > 1:
        raise ToolError(f"give one of str_replace, insert and replace_all, not {' and '.join(given)}")
    change: ops.Change | None = None
    if args.str_replace is not None:
        change = ops.StrReplace(old=args.str_replace.old_str, new=args.str_replace.new_str)
    elif args.insert is not None:
        change = ops.Insert(text=args.insert.insert_text, line=args.insert.insert_line)
    elif args.replace_all is not None:
        change = ops.ReplaceAll(contents=args.replace_all.contents)
    elif args.description is None:
        raise ToolError("nothing to change: give description, str_replace, insert or replace_all")
    target = ops.ByKey(scope=bound.scope, path=args.path)
    if bound.dry_run:
        row = await _would(ctx, bound, args.path)
        if row is None:
            raise NotFound(f"no entry at {args.path}")
        contents = entries.apply_change(row.contents, change)
        return _dry("update", args.path, args.description or row.description, contents)
    op = ops.Edit(
        store=bound.store,
        target=target,
        change=change,
        description=args.description,
        origin=bound.origin,
        channel=bound.channel,
    )
    return _written(await entries.edit(ctx, bound.principal, op), "updated")


async def _delete(ctx: Context, bound: Bound, args: DeleteArgs) -> dict[str, Any]:
    if args.path is not None and args.query is not None:
        raise ToolError("give path or query, not both")
    if args.path is None and args.query is None:
        raise ToolError("give path (one memory) or query (the memories that match it)")
    if args.query is not None:
        return await _forget(ctx, bound, args.query)
    assert args.path is not None
    if bound.dry_run:
        if await _would(ctx, bound, args.path) is None:
            raise NotFound(f"no entry at {args.path}")
        return {"result": f"would delete {args.path} (a dry run: nothing is written)"}
    op = ops.Delete(
        store=bound.store, target=ops.ByKey(scope=bound.scope, path=args.path), channel=bound.channel
    )
    await entries.delete(ctx, bound.principal, op)
    return {"result": f"deleted {args.path}"}


async def _forget(ctx: Context, bound: Bound, query: str) -> dict[str, Any]:
    """Delete by query: the memories of the bound scope that search_memory finds for it at the
    recommended floor, at most 100; answers their paths."""
    op = ops.DeleteMatching(
        store=bound.store, scopes=(bound.scope,), query=query, dry_run=bound.dry_run, channel=bound.channel
    )
    forgotten = await entries.delete_matching(ctx, bound.principal, op)
    paths = [row.path for row in forgotten.rows]
    if not paths:
        return {"result": "no memory matches the query; nothing was deleted", "deleted": []}
    verb = "would delete" if bound.dry_run else "deleted"
    result = f"{verb} {len(paths)} {'memory' if len(paths) == 1 else 'memories'} matching the query"
    if bound.dry_run:
        result += " (a dry run: nothing is written)"
    answer: dict[str, Any] = {"result": result, "deleted": paths}
    if forgotten.truncated:
        answer["truncated"] = True
        answer["note"] = f"more than {len(paths)} memories matched: call delete_memory again for the rest"
    return answer


# (the request's context, what the call is bound to, the arguments): a `Bound` store and scope for
# the memory tools; whatever a caller with tools of its own binds them to (the maintenance step:
# the scope under review)
Run = Callable[[Context, Any, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    args: type[Input]
    run: Run
    read_only: bool
    destructive: bool = False

    @property
    def input_schema(self) -> dict[str, Any]:
        return input_schema(self.args)


TOOLS: tuple[Tool, ...] = (
    Tool(
        "search_memory",
        "Search memory",
        "Search long-term memory for memories relevant to a query (keywords and meaning). Call it "
        "before answering whenever earlier conversations may matter, and before saving, to find the "
        "memory a new fact belongs to. Answers the best matches with their paths and contents.",
        SearchArgs,
        _search,
        read_only=True,
    ),
    Tool(
        "save_memory",
        "Save a memory",
        "Save a new memory at a path that does not exist yet. Use one stable path per topic, "
        "/memories/<topic>.md; the description is the memory in one line, the contents hold the "
        "details, one fact per line. If a memory on the topic exists, use update_memory instead. "
        "Never save secrets (passwords, keys, tokens, card numbers).",
        SaveArgs,
        _save,
        read_only=False,
    ),
    Tool(
        "get_memory",
        "Read a memory",
        "Read one memory in full by its path (as shown by list_memories or search_memory).",
        PathArgs,
        _get,
        read_only=True,
    ),
    Tool(
        "list_memories",
        "List memories",
        "List the memories kept (paths and one-line descriptions, no contents), optionally under a "
        "path prefix. Use it to reuse an existing topic instead of inventing a near-duplicate.",
        ListArgs,
        _list,
        read_only=True,
    ),
    Tool(
        "update_memory",
        "Update a memory",
        "Change an existing memory: a new one-line description, and/or one change to its contents: "
        "str_replace (old_str must occur exactly once; read the memory first), insert (a line at "
        "insert_line, or at the end), or replace_all (new contents). Prefer it to saving a duplicate.",
        UpdateArgs,
        _update,
        read_only=False,
        destructive=True,
    ),
    Tool(
        "delete_memory",
        "Delete a memory",
        "Delete a memory that is wrong, obsolete, or that the person asked you to forget: give its "
        "path, or instead a query to delete every memory that matches it (what search_memory finds "
        "as relevant, at most 100 at a time; the answer lists the paths deleted). Prefer a path when "
        "you know it; search first if unsure what a query would reach.",
        DeleteArgs,
        _delete,
        read_only=False,
        destructive=True,
    ),
)

BY_NAME = {tool.name: tool for tool in TOOLS}


# --- calling -----------------------------------------------------------------------------------------

_FIELD = re.compile(r"`\$\.?([^`]*)`")


def _argument_error(exc: msgspec.ValidationError) -> ToolError:
    """msgspec's message with the argument named the way the model wrote it."""
    text = str(exc)
    where = _FIELD.search(text)
    field = where.group(1) if where else ""
    text = _FIELD.sub(lambda m: f"`{m.group(1)}`", text).replace(" - at ``", "")
    if "unknown field" in text and "scope" in text:
        text += " (the scope is chosen by the application, never by a tool argument)"
    return ToolError(f"invalid arguments{f' ({field})' if field else ''}: {text}")


def _explain(
    exc: CatalogError, tool: Tool, arguments: dict[str, Any], tools: Mapping[str, Tool]
) -> ToolError:
    """A service error as the model should read it."""
    path = arguments.get("path")
    message = exc.message
    if isinstance(exc, NotFound) and path is not None:
        message = f"no memory at {path}"
        if "list_memories" in tools and "search_memory" in tools:
            message += "; use list_memories or search_memory to find the right path"
    elif isinstance(exc, NotFound):
        message = f"{message}; the memory store may have been deleted"
    elif isinstance(exc, Aborted):
        message = f"{message}: the memory changed meanwhile; read it again with get_memory and retry"
    elif isinstance(exc, PermissionDenied):
        message = f"not allowed to {tool.title.lower()}: {message}"
    elif isinstance(exc, FieldError) and exc.field and exc.field not in message:
        message = f"{exc.field}: {message}"
    # a tool acts on a memory store: a missing entry or store is NOT_FOUND, as on its REST twin
    code = exc.memory_store_error_code if isinstance(exc, NotFound) else exc.error_code
    return ToolError(message, exc.status_code, code)


def _nul(value: Any, where: str = "") -> str | None:
    """The first argument holding a NUL character (PostgreSQL text cannot hold one)."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _nul(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    return None


async def call(
    ctx: Context,
    bound: Any,
    name: str,
    arguments: dict[str, Any] | None,
    tools: Mapping[str, Tool] = BY_NAME,
) -> dict[str, Any]:
    """Run one call of a tool of `tools` (the memory tools unless given), bound to `bound` (a
    `Bound` for the memory tools); a `ToolError` when it fails in a way the model can act on
    (anything else is a fault of the server and propagates)."""
    tool = tools.get(name)
    if tool is None:
        raise ToolError(
            f"no tool named {name[:64]!r}; the tools are {', '.join(tools)}", 404, NotFound.error_code
        )
    arguments = arguments or {}
    field = _nul(arguments)
    if field is not None:
        raise ToolError(f"invalid arguments ({field}): must not contain NUL characters")
    try:
        args = msgspec.convert(arguments, tool.args)
    except msgspec.ValidationError as exc:
        raise _argument_error(exc) from None
    try:
        return await tool.run(ctx, bound, args)
    except CatalogError as exc:
        if exc.status_code >= 500:
            raise
        raise _explain(exc, tool, arguments, tools) from None


# --- schemas -------------------------------------------------------------------------------------------


def input_schema(args: type[Input]) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments, self-contained (no `$ref`), as tool-calling models
    and MCP clients expect it."""
    (schema,), components = msgspec.json.schema_components([args], ref_template="#/$defs/{name}")

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                return inline(components[ref.rsplit("/", 1)[1]])
            return {key: inline(value) for key, value in node.items() if key != "title"}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    resolved: dict[str, Any] = inline(schema)
    resolved["additionalProperties"] = False
    return resolved
