"""The instrumentation seams: each opens a span (when a trace is current) and observes its
histogram or counter, so that a call site carries one line (a decorator or a `with`).

Span names and attributes follow OpenTelemetry's semantic conventions (HTTP server, database
client, GenAI); what the conventions do not name is under `catalog.`. docs/operations/
observability.md lists every span, attribute and metric.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ParamSpec, TypeVar

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, StatusCode

from catalog.event_params import Kept, keys_of
from catalog.telemetry import tracing
from catalog.telemetry.instruments import Counter, Histogram

P = ParamSpec("P")
R = TypeVar("R")

LONG_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)

HTTP_DURATION = Histogram(
    "http_server_request_duration_seconds",
    "time from a request's arrival to the end of its answer",
    ("http_request_method", "http_route", "http_response_status_code"),
)
MEMORY_OPERATION = Histogram(
    "catalog_memory_operation_duration_seconds",
    "time of one memory operation (search_memory, create_memory, ...), its authorization included, and "
    "for a change its audit event",
    ("operation",),
)
SEARCH_LEG = Histogram(
    "catalog_search_leg_duration_seconds",
    "time of one search leg: keyword (BM25 over the full-text index) or semantic (the query's vector "
    "awaited, then pgvector)",
    ("leg",),
)
FUSION = Histogram(
    "catalog_search_fusion_duration_seconds",
    "time a hybrid search takes to score the candidates of both legs together",
)
EMBEDDING = Histogram(
    "catalog_embedding_duration_seconds",
    "time an embed call waits for its vectors (the queue and the model runs): urgent for a search's "
    "query, background for the embedding worker's batches",
    ("queue",),
)
AUDIT_APPEND = Histogram(
    "catalog_audit_append_duration_seconds",
    "time of one audit append (one statement: a change's event with its commit, or a batch of events)",
)
AUDIT_CHAIN_HELD = Counter(
    "catalog_audit_chain_held_total",
    "batches of reads' audit events that found the audit chain's lock held by another transaction "
    "(other processes appending): that batch and the next 10 s of batches went as a change's event does",
)
DENIALS = Counter(
    "catalog_authorization_denials_total",
    "authorization decisions that denied an action",
    ("action",),
)
PIPELINE_RUN = Histogram(
    "catalog_pipeline_run_duration_seconds",
    "time from a memory pipeline run's start to its end (over every attempt), by outcome, for the "
    "runs this process ended",
    ("outcome",),
    buckets=LONG_BUCKETS,
)
ERASURES = Counter(
    "catalog_erasures_total",
    "erasures done (each in one transaction, answered when complete: none is ever pending)",
    ("kind",),
)

# --- HTTP --------------------------------------------------------------------------------------------

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
ASGIApp = Callable[[Any, Any, Any, Any], Awaitable[None]]


def _method(value: Any) -> str:
    method = str(value or "").upper()
    return method if method in METHODS else "_OTHER"


def _carrier(scope: Mapping[str, Any]) -> dict[str, str]:
    return {
        key.decode("latin-1"): value.decode("latin-1")
        for key, value in scope.get("headers") or []
        if key in (b"traceparent", b"tracestate", b"baggage")
    }


def http_server(call: ASGIApp) -> ASGIApp:
    """For an ASGI `__call__(self, scope, receive, send)`: each HTTP request is a server span
    (`{method} {route}`, continuing an incoming `traceparent`) and one observation of
    `http_server_request_duration_seconds`. The route is the template the router matched
    (`scope["path_template"]`), never the path: the path and the query are not recorded."""

    @functools.wraps(call)
    async def serve(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await call(self, scope, receive, send)
            return
        started = time.perf_counter()
        method = _method(scope.get("method"))
        status: int | None = None
        failure: BaseException | None = None

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        attributes = {
            "http.request.method": method,
            "url.scheme": str(scope.get("scheme", "http")),
            "network.protocol.version": str(scope.get("http_version", "1.1")),
        }
        with tracing.server_span(method, _carrier(scope), attributes) as span:
            try:
                await call(self, scope, receive, sending)
            except BaseException as exc:
                failure = exc
                raise
            finally:
                # 499: the client went away before anything was answered (as the request log says)
                code = status if status is not None else (500 if failure is not None else 499)
                route = str(scope.get("path_template") or "")
                if span is not None:
                    _end_http(span, scope, method, route, code)
                HTTP_DURATION.observe(time.perf_counter() - started, method, route, str(code))

    return serve


def _end_http(span: Span, scope: Mapping[str, Any], method: str, route: str, status: int) -> None:
    span.set_attribute("http.response.status_code", status)
    if route:
        span.set_attribute("http.route", route)
        span.update_name(f"{method} {route}")
    request_id = (scope.get("state") or {}).get("request_id")
    if request_id:
        span.set_attribute("catalog.request_id", str(request_id))
    if status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(StatusCode.ERROR)


# --- PostgreSQL ----------------------------------------------------------------------------------------

OPERATIONS = frozenset(
    {
        "SELECT",
        "INSERT",
        "UPDATE",
        "DELETE",
        "WITH",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
        "SET",
        "LOCK",
        "COPY",
        "CREATE",
        "DROP",
        "ALTER",
        "TRUNCATE",
        "NOTIFY",
        "LISTEN",
        "UNLISTEN",
        "VALUES",
        "EXPLAIN",
        "SHOW",
        "DO",
        "CALL",
        "ANALYZE",
        "VACUUM",
        "REINDEX",
    }
)
_FIRST_WORD = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/|\()*([A-Za-z]+)", re.S)


def db_operation(query: str) -> str:
    """The statement's first keyword (`SELECT`, `INSERT`, ...; `OTHER` for anything else): the
    only part of a statement a span holds."""
    found = _FIRST_WORD.match(query)
    word = found.group(1).upper() if found else ""
    return word if word in OPERATIONS else "OTHER"


def _query_done(record: Any) -> None:
    """asyncpg's query logger: a client span for the statement that just ran (timed by asyncpg),
    in the trace that ran it."""
    tracer = tracing.STATE.tracer
    if tracer is None or not tracing.in_trace():
        return
    end = time.time_ns()
    operation = db_operation(record.query)
    attributes: dict[str, Any] = {"db.system.name": "postgresql", "db.operation.name": operation}
    database = getattr(record.conn_params, "database", None)
    if database:
        attributes["db.namespace"] = str(database)
    address = record.conn_addr
    if isinstance(address, tuple) and len(address) >= 2:
        attributes["server.address"], attributes["server.port"] = str(address[0]), int(address[1])
    span = tracer.start_span(
        operation if operation != "OTHER" else "postgresql",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        start_time=end - int(record.elapsed * 1e9),
    )
    if record.exception is not None:
        sqlstate = getattr(record.exception, "sqlstate", None)
        if sqlstate:
            span.set_attribute("db.response.status_code", str(sqlstate))
        tracing.failed(span, record.exception)
    span.end(end_time=end)


def watch_queries(conn: Any) -> None:
    """Trace the connection's statements (an asyncpg connection; nothing when tracing is off)."""
    if tracing.enabled():
        conn.add_query_logger(_query_done)


# --- memory operations (GenAI) ------------------------------------------------------------------------

MAX_NAME = 767


def _store_name(args: Sequence[Any]) -> str | None:
    """The store an operation acts on, from its third argument (after the context and the
    principal): a full name, an operation with `.store`, or a create body (catalog, schema, name)."""
    if len(args) < 3:
        return None
    target = args[2]
    if isinstance(target, str):
        name = target
    elif isinstance(getattr(target, "store", None), str):
        name = target.store
    elif all(isinstance(getattr(target, f, None), str) for f in ("catalog_name", "schema_name", "name")):
        name = f"{target.catalog_name}.{target.schema_name}.{target.name}"
    else:
        return None
    return name.lower()[:MAX_NAME]


def _described(span: Span, result: Any) -> None:
    """What a search answered, by count and leg names only (`gen_ai.memory.record.count`: the
    hits)."""
    hits = getattr(result, "hits", None)
    if isinstance(hits, list):
        span.set_attribute("gen_ai.memory.record.count", len(hits))
    degraded = getattr(result, "degraded", None)
    if isinstance(degraded, tuple) and degraded:
        span.set_attribute("catalog.search.degraded", [str(leg) for leg in degraded])


def memory_operation(name: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """For a service function `(ctx, principal, target, ...)`: a GenAI memory operation span
    (`gen_ai.operation.name` = `name`, `gen_ai.memory.store.id` = the store's full name; for a
    search, `gen_ai.retrieval.top_k` = the hits asked for and `gen_ai.memory.record.count` = the
    hits answered, the names of the GenAI conventions as released in semantic-conventions-genai)
    and one observation of `catalog_memory_operation_duration_seconds`."""

    def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                if not tracing.in_trace():
                    return await fn(*args, **kwargs)
                store = _store_name(args)
                attributes: dict[str, Any] = {"gen_ai.operation.name": name}
                if store is not None:
                    attributes["gen_ai.memory.store.id"] = store
                mode = getattr(args[2], "mode", None) if len(args) > 2 else None
                if name == "search_memory" and isinstance(mode, str):
                    attributes["catalog.search.mode"] = mode
                top_k = getattr(args[2], "top_k", None) if len(args) > 2 else None
                if name == "search_memory" and isinstance(top_k, int):
                    attributes["gen_ai.retrieval.top_k"] = top_k
                with tracing.span(f"{name} {store}" if store else name, attributes) as span:
                    result = await fn(*args, **kwargs)
                    if span is not None and name == "search_memory":
                        _described(span, result)
                    return result
            finally:
                MEMORY_OPERATION.observe(time.perf_counter() - started, name)

        return run

    return wrap


def erasure(kind: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Count an erasure of `kind` once it has committed (the function returned)."""

    def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            result = await fn(*args, **kwargs)
            ERASURES.inc(kind)
            return result

        return run

    return wrap


# --- embeddings and search ---------------------------------------------------------------------------


def embedding(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """For `Embedder.embed(self, texts, *, background=False, query=False)`: an `embeddings` span
    (`gen_ai.request.model`: the encoder's `model_name`) and one observation of
    `catalog_embedding_duration_seconds`."""

    @functools.wraps(fn)
    async def run(self: Any, texts: Sequence[str], *, background: bool = False, query: bool = False) -> R:
        started = time.perf_counter()
        try:
            if not tracing.in_trace():
                return await fn(self, texts, background=background, query=query)
            encoder = getattr(self, "encoder", None)
            model = str(getattr(encoder, "model_name", None) or type(encoder).__name__)
            attributes = {
                "gen_ai.operation.name": "embeddings",
                "gen_ai.request.model": model,
                "catalog.embedding.texts": len(texts),
                "catalog.embedding.queue": "background" if background else "urgent",
            }
            with tracing.span(f"embeddings {model}", attributes):
                return await fn(self, texts, background=background, query=query)
        finally:
            if texts:
                EMBEDDING.observe(time.perf_counter() - started, "background" if background else "urgent")

    return run


def search_leg(leg: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """For a search leg `(self, query)` answering (..., candidates, complete): a `search {leg}`
    span (the corpus, the candidates' count, whether the leg saw every committed write) and one
    observation of `catalog_search_leg_duration_seconds`."""

    def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                query = args[1] if len(args) > 1 else None
                corpus = getattr(getattr(query, "corpus", None), "name", None)
                attributes: dict[str, Any] = {"catalog.search.leg": leg}
                if isinstance(corpus, str):
                    attributes["catalog.search.corpus"] = corpus
                with tracing.span(f"search {leg}", attributes) as span:
                    result = await fn(*args, **kwargs)
                    if span is not None and isinstance(result, tuple) and len(result) >= 2:
                        candidates, complete = result[-2], result[-1]
                        if isinstance(candidates, list):
                            span.set_attribute("catalog.search.candidates", len(candidates))
                        if isinstance(complete, bool):
                            span.set_attribute("catalog.search.complete", complete)
                    return result
            finally:
                SEARCH_LEG.observe(time.perf_counter() - started, leg)

        return run

    return wrap


@contextmanager
def search_fusion() -> Iterator[None]:
    """The scoring of a hybrid search's candidates: a `search fusion` span and one observation of
    `catalog_search_fusion_duration_seconds`."""
    started = time.perf_counter()
    try:
        with tracing.span("search fusion", {"catalog.search.leg": "fusion"}):
            yield
    finally:
        FUSION.observe(time.perf_counter() - started)


# --- authorization and audit ---------------------------------------------------------------------------


def authorization(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """For `Authorizer.check(self, principal, action, securable) -> Decision`: an `authorize
    {action}` span (the action, the securable's type, the decision) and a count of the denials
    by action in `catalog_authorization_denials_total`."""

    @functools.wraps(fn)
    async def run(self: Any, principal: Any, action: Any, securable: Any) -> R:
        name = str(getattr(action, "name", action))
        attributes = {"catalog.authz.action": name}
        kind = getattr(getattr(securable, "type", None), "value", None)
        if isinstance(kind, str):
            attributes["catalog.securable.type"] = kind
        with tracing.span(f"authorize {name}", attributes) as span:
            decision = await fn(self, principal, action, securable)
            allowed = bool(getattr(decision, "allowed", True))
            if span is not None:
                span.set_attribute("catalog.authz.decision", "allow" if allowed else "deny")
            if not allowed:
                DENIALS.inc(name)
            return decision

    return run


SCOPE_KEYS = keys_of(Kept.SCOPE, Kept.SCOPES)  # the parameters holding scopes and end users
PSEUDONYMIZED = "_pseudonymized"  # the mark catalog.recorder.pseudonyms leaves on an event


def _pseudonyms(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The pseudonyms of the scopes and end users the events hold, once pseudonymized."""
    found: set[str] = set()
    for event in events:
        if not event.get(PSEUDONYMIZED):
            continue
        params = event.get("request_params") or {}
        values = [params.get(key) for key in SCOPE_KEYS] + [event.get("on_behalf_of")]
        for value in values:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and item.startswith("ps_"):
                    found.add(item)
    return sorted(found)


def _note_pseudonyms(span: Span | None, events: Sequence[Mapping[str, Any]]) -> None:
    if span is not None and tracing.STATE.scope_pseudonyms:
        pseudonyms = _pseudonyms(events)
        if pseudonyms:
            span.set_attribute("catalog.scope.pseudonyms", pseudonyms)


def audit_append(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """For `append_on(conn, events, ...)`: an `audit append` span (how many events) and one
    observation of `catalog_audit_append_duration_seconds`."""

    @functools.wraps(fn)
    async def run(conn: Any, events: list[dict[str, Any]], *args: Any, **kwargs: Any) -> R:
        started = time.perf_counter()
        try:
            with tracing.span("audit append", {"catalog.audit.events": len(events)}) as span:
                result = await fn(conn, events, *args, **kwargs)
                _note_pseudonyms(span, events)
                return result
        finally:
            AUDIT_APPEND.observe(time.perf_counter() - started)

    return run


def audit_chain_held() -> None:
    """A batch of reads' events found the audit chain's lock held (`catalog_audit_chain_held_total`)."""
    AUDIT_CHAIN_HELD.inc()


def audit_queued(event: Mapping[str, Any]) -> AbstractContextManager[None]:
    """A request waiting for its event to be appended by the audit writer's next batch: an
    `audit append` span in the request's trace (the batch's own statement has no trace)."""
    if not tracing.in_trace():
        return tracing.NO_SPAN
    return _audit_queued(event)


@contextmanager
def _audit_queued(event: Mapping[str, Any]) -> Iterator[None]:
    with tracing.span("audit append", {"catalog.audit.events": 1, "catalog.audit.queued": True}) as span:
        yield
        _note_pseudonyms(span, [event])


# --- pipeline runs ---------------------------------------------------------------------------------------


def pipeline_run_end(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """For the statement that ends a pipeline run (it answers the ended run, or None): one
    observation of `catalog_pipeline_run_duration_seconds` by the run's final state."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        ended = await fn(*args, **kwargs)
        state = getattr(ended, "state", None)
        finish = getattr(ended, "ended_at", None)
        start = getattr(ended, "started_at", None) or getattr(ended, "created_at", None)
        if isinstance(state, str) and isinstance(finish, int) and isinstance(start, int):
            PIPELINE_RUN.observe(max(0.0, (finish - start) / 1000), state.lower())
        return ended

    return run


# --- the upstream model (chat) -------------------------------------------------------------------------


def chat_start(model: str, server: str | None, *, stream: bool) -> Span | None:
    """A GenAI `chat {model}` client span for one upstream call (its retries included), started
    now and not made current (a streamed answer outlives the call that starts it); None outside
    a trace. End it with `chat_end`."""
    tracer = tracing.STATE.tracer
    if tracer is None or not tracing.in_trace():
        return None
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model[:MAX_NAME]}
    if server:
        attributes["server.address"] = server
    if stream:
        attributes["catalog.llm.stream"] = True
    return tracer.start_span(f"chat {model[:MAX_NAME]}", kind=SpanKind.CLIENT, attributes=attributes)


def chat_headers(span: Span | None) -> dict[str, str]:
    """The `traceparent` an upstream call carries (the chat span's), or none."""
    headers: dict[str, str] = {}
    if span is not None:
        propagate.inject(headers, context=trace.set_span_in_context(span))
    return headers


def chat_end(
    span: Span | None,
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    finish_reason: str | None = None,
    error: BaseException | None = None,
) -> None:
    """End a chat span with the answer's token usage and finish reason, or its failure."""
    if span is None:
        return
    if input_tokens is not None:
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    if output_tokens is not None:
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason[:64]])
    if error is not None:
        tracing.failed(span, error)
    span.end()
