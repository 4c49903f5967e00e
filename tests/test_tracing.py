"""Traces, end to end: `catalog serve` in a subprocess exports OTLP/HTTP (protobuf) to a real
receiver started here (POST /v1/traces, decoded with opentelemetry-proto's
ExportTraceServiceRequest). A write, a search, MCP tool calls and responses from an upstream
model are traced as the semantic conventions name them, with their parents; an incoming
`traceparent` (HTTP header, MCP `params._meta`) is continued; no attribute holds a query,
contents, a path or a scope; the log lines carry the trace; with CATALOG_TRACE_SCOPES=pseudonyms
the audit log's pseudonyms are added; and with no endpoint set, nothing is sent at all."""

from __future__ import annotations

import gzip
import json
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from rest import UC, bearer
from scripted_llm import Reply, prompt_words

from catalog import telemetry
from catalog.settings import Settings

STORE = "main.default.traced"
SERVER, CLIENT, INTERNAL = 2, 3, 1  # Span.SpanKind values of the protocol
DEFAULT_OTLP_PORT = 4318


# --- a real OTLP/HTTP receiver --------------------------------------------------------------------


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    events: tuple[dict[str, Any], ...]
    resource: dict[str, Any]
    scope: str
    status_code: int


@dataclass
class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every connection is counted, every export
    decoded."""

    port: int = 0
    spans: list[ReceivedSpan] = field(default_factory=list)
    posts: list[tuple[str, str]] = field(default_factory=list)  # (path, content type)
    connections: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._received(self.path, self.headers.get("content-type", ""), body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                accepted = super().get_request()
                with receiver._lock:
                    receiver.connections += 1
                return accepted

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _received(self, path: str, content_type: str, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=tuple(
                                {"name": e.name, **{a.key: _value(a.value) for a in e.attributes}}
                                for e in span.events
                            ),
                            resource=resource,
                            scope=scope_spans.scope.name,
                            status_code=span.status.code,
                        )
                    )
        with self._lock:
            self.posts.append((path, content_type))
            self.spans.extend(found)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, what: str, found: Callable[[], Any], within: float = 30.0) -> Any:
        deadline = time.monotonic() + within
        while not (value := found()):
            if time.monotonic() > deadline:
                with self._lock:
                    names = sorted({s.name for s in self.spans})
                raise AssertionError(f"gave up waiting for {what}; received: {names}")
            time.sleep(0.05)
        return value

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _otel_variables() -> dict[str, str]:
    """The test's own environment less any OTEL_ variable a developer has set."""
    return {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}


@pytest.fixture(scope="module")
def traced(database_url, tmp_path_factory, live_server, receiver, llm):
    with pytest.MonkeyPatch.context() as mp:
        for name in _otel_variables():
            mp.delenv(name)
        server = live_server(
            tmp_path_factory.mktemp("traced"),
            env={
                "CATALOG_DATABASE_URL": database_url,
                "CATALOG_LLM_BASE_URL": llm.url,
                "CATALOG_LLM_MAX_RETRIES": "0",
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
        )
    try:
        r = httpx.post(
            f"{server.url}{UC}/memory-stores",
            headers=bearer(server),
            json={"name": "traced", "catalog_name": "main", "schema_name": "default"},
        )
        assert r.status_code == 200, r.text
        yield server
    finally:
        server.stop()


def traceparent() -> tuple[str, str, str]:
    """(header value, trace id, parent span id) of a sampled caller's span."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_id == parent.span_id]


def under(spans: list[ReceivedSpan], span: ReceivedSpan, ancestor: ReceivedSpan) -> bool:
    by_id = {s.span_id: s for s in spans}
    current: ReceivedSpan | None = span
    while current is not None:
        if current.parent_id == ancestor.span_id:
            return True
        current = by_id.get(current.parent_id)
    return False


def texts(span: ReceivedSpan) -> list[str]:
    """Every string a span carries: its name, attribute keys and values, events, resource."""
    out = [span.name]

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for k, v in value.items():
                out.append(k)
                walk(v)

    for part in (span.attributes, *span.events, span.resource):
        walk(part)
    return out


def log_lines(live: Any) -> list[dict[str, Any]]:
    lines = []
    for line in live.log_path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


def mcp_call(live: Any, tool: str, arguments: dict[str, Any], headers: dict[str, str], meta: Any = None):
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    r = httpx.post(
        f"{live.url}/mcp/memory-stores/{STORE}",
        headers={**headers, "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params},
    )
    assert r.status_code == 200, r.text
    assert not r.json()["result"].get("isError"), r.text
    return r


# --- the spans -----------------------------------------------------------------------------------


def test_a_write_a_search_and_tool_calls_are_traced_without_their_text(traced, receiver):
    tag = uuid.uuid4().hex[:10]
    scope, path = f"scope-{tag}", f"/secret-{tag}.md"
    contents, query, tool_query = f"contents-{tag} tea at night", f"query-{tag} tea", f"tool-{tag} tea"
    secret = (scope, path, contents, query, tool_query, tag)

    header, write_trace, caller = traceparent()
    r = httpx.post(
        f"{traced.url}{UC}/memory-stores/{STORE}/entries",
        headers={**bearer(traced), "traceparent": header},
        json={"scope": scope, "path": path, "contents": contents},
    )
    assert r.status_code == 200, r.text
    write_request = r.headers["x-request-id"]

    header, search_trace, _ = traceparent()
    r = httpx.post(
        f"{traced.url}{UC}/memory-stores/{STORE}/entries:search",
        headers={**bearer(traced), "traceparent": header},
        json={"scope": scope, "query": query, "mode": "hybrid"},
    )
    assert r.status_code == 200 and r.json()["results"], r.text

    # a tool call whose _meta carries the caller's trace, and one without
    meta_header, tool_trace, tool_caller = traceparent()
    tools = bearer(traced, "admin", on_behalf_of=scope)
    mcp_call(traced, "search_memory", {"query": tool_query}, tools, {"traceparent": meta_header})
    plain = mcp_call(traced, "search_memory", {"query": tool_query}, tools)

    # the write: the HTTP server span continues the caller's trace
    spans = receiver.wait_for(
        "the write's trace",
        lambda: (s := receiver.trace(write_trace)) and any(x.kind == SERVER for x in s) and s,
    )
    http = one(spans, f"POST {UC}/memory-stores/{{full_name}}/entries")
    assert http.kind == SERVER and http.parent_id == caller
    assert http.attributes["http.request.method"] == "POST"
    assert http.attributes["http.route"] == f"{UC}/memory-stores/{{full_name}}/entries"
    assert http.attributes["http.response.status_code"] == 200
    assert http.attributes["catalog.request_id"] == write_request
    assert "url.path" not in http.attributes and "url.query" not in http.attributes
    assert http.resource["service.name"] == "memory-catalog"
    created = one(spans, f"create_memory {STORE}")
    assert created.parent_id == http.span_id and created.kind == INTERNAL
    assert created.attributes["gen_ai.operation.name"] == "create_memory"
    assert created.attributes["gen_ai.memory.store.id"] == STORE
    authorized = one(spans, "authorize entries.write")
    assert authorized.parent_id == created.span_id
    assert authorized.attributes["catalog.authz.decision"] == "allow"
    assert authorized.attributes["catalog.securable.type"] == "MEMORY_STORE"
    appended = one(spans, "audit append")
    assert appended.parent_id == created.span_id and appended.attributes["catalog.audit.events"] == 1
    queries = [s for s in spans if s.attributes.get("db.system.name") == "postgresql"]
    assert queries and all(s.kind == CLIENT for s in queries)
    assert {"BEGIN", "INSERT", "SELECT"} <= {s.attributes["db.operation.name"] for s in queries}
    assert all(under(spans, s, http) for s in queries) and any(under(spans, s, created) for s in queries)
    assert any(s.parent_id == appended.span_id for s in queries)  # the append's own statements
    assert all(
        set(s.attributes)
        <= {"db.system.name", "db.operation.name", "db.namespace", "server.address", "server.port"}
        for s in queries
    )

    # the search: the operation, its embedding, both legs and the fusion
    spans = receiver.wait_for(
        "the search's trace",
        lambda: (s := receiver.trace(search_trace)) and any(x.kind == SERVER for x in s) and s,
    )
    http = one(spans, f"POST {UC}/memory-stores/{{full_name}}/entries:search")
    searched = one(spans, f"search_memory {STORE}")
    assert searched.parent_id == http.span_id
    assert searched.attributes["gen_ai.operation.name"] == "search_memory"
    assert searched.attributes["gen_ai.memory.store.id"] == STORE
    assert searched.attributes["catalog.search.mode"] == "hybrid"
    # the GenAI conventions' names as released: the hits answered, and the hits asked for
    assert searched.attributes["gen_ai.memory.record.count"] == len(r.json()["results"]) >= 1
    assert searched.attributes["gen_ai.retrieval.top_k"] == 10  # the default
    assert "catalog.search.hits" not in searched.attributes
    embedded = next(s for s in spans if s.attributes.get("gen_ai.operation.name") == "embeddings")
    assert embedded.parent_id == searched.span_id
    assert embedded.name == f"embeddings {embedded.attributes['gen_ai.request.model']}"
    assert embedded.attributes["gen_ai.request.model"]
    for leg in ("keyword", "semantic"):
        span = one(spans, f"search {leg}")
        assert span.parent_id == searched.span_id
        assert span.attributes["catalog.search.complete"] is True
        assert span.attributes["catalog.search.candidates"] >= 1
    assert one(spans, "search fusion").parent_id == searched.span_id
    assert one(spans, "authorize entries.read").parent_id == searched.span_id
    # a read's event is appended by the writer's next batch: the request waits for it
    queued = one(spans, "audit append")
    assert queued.parent_id == http.span_id and queued.attributes["catalog.audit.queued"] is True

    # the tool call with _meta.traceparent continues that trace
    spans = receiver.wait_for(
        "the tool call's trace",
        lambda: (
            (s := receiver.trace(tool_trace)) and any(x.name == f"search_memory {STORE}" for x in s) and s
        ),
    )
    called = one(spans, "tools/call search_memory")
    assert called.parent_id == tool_caller and called.kind == SERVER
    assert called.attributes["mcp.method.name"] == "tools/call"
    assert called.attributes["gen_ai.tool.name"] == "search_memory"
    assert one(spans, f"search_memory {STORE}").parent_id == called.span_id
    # the one without _meta is a child of its HTTP request's span
    request_span = receiver.wait_for(
        "the plain tool call's request span",
        lambda: next(
            (
                s
                for s in receiver.spans
                if s.attributes.get("catalog.request_id") == plain.headers["x-request-id"]
            ),
            None,
        ),
    )
    assert request_span.name == "POST /mcp/memory-stores/{full_name}"
    spans = receiver.wait_for(
        "the plain tool call's trace",
        lambda: (
            (s := receiver.trace(request_span.trace_id))
            and any(x.name == "tools/call search_memory" for x in s)
            and s
        ),
    )
    assert one(spans, "tools/call search_memory").parent_id == request_span.span_id

    # no query, contents, path or scope anywhere, in any trace of this test
    ours = (write_trace, search_trace, tool_trace, request_span.trace_id)
    everything = [s for t in ours for s in receiver.trace(t)]
    leaked = [(s.name, t) for s in everything for t in texts(s) if any(x in t for x in secret)]
    assert leaked == []
    assert not any("catalog.scope.pseudonyms" in s.attributes for s in everything)  # off by default

    # every log line of the write's request carries its trace, with the HTTP span's id
    written = receiver.trace(write_trace)
    http = one(written, f"POST {UC}/memory-stores/{{full_name}}/entries")
    lines = [line for line in log_lines(traced) if line.get("request_id") == write_request]
    assert lines and all(
        line["trace_id"] == write_trace and line["span_id"] == http.span_id for line in lines
    )
    assert receiver.posts and {p for p, _ in receiver.posts} == {"/v1/traces"}
    assert {c for _, c in receiver.posts} == {"application/x-protobuf"}


def test_upstream_model_calls_are_chat_spans_with_token_usage(traced, receiver, llm):
    words = f"input-{uuid.uuid4().hex[:10]}"
    for stream in (False, True):
        llm.reset()
        llm.script(Reply("fine thanks"))
        header, trace_id, _ = traceparent()
        r = httpx.post(
            f"{traced.url}/ai-gateway/mlflow/v1/responses",
            headers={**bearer(traced), "traceparent": header},
            json={"model": "house-model", "input": f"how are you {words}", "stream": stream},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        spans = receiver.wait_for(
            "the response's trace",
            lambda t=trace_id: (s := receiver.trace(t)) and any(x.kind == SERVER for x in s) and s,
        )
        chat = one(spans, "chat house-model")
        http = next(s for s in spans if s.kind == SERVER)
        assert chat.kind == CLIENT and under(spans, chat, http)
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "house-model"
        assert chat.attributes["gen_ai.usage.input_tokens"] == prompt_words(llm.requests[0])
        assert chat.attributes["gen_ai.usage.output_tokens"] == 2
        assert chat.attributes["gen_ai.response.finish_reasons"] == ["stop"]
        assert chat.attributes.get("catalog.llm.stream", False) is stream
        assert chat.attributes["server.address"] == "127.0.0.1"
        # the upstream call carries the chat span's context
        assert llm.headers[0]["traceparent"] == f"00-{trace_id}-{chat.span_id}-01"
        assert not [t for s in spans for t in texts(s) if words in t or "fine thanks" in t]


def test_scope_pseudonyms_only_when_asked_and_as_the_audit_log_holds_them(
    database_url, tmp_path_factory, live_server, receiver, traced
):
    with pytest.MonkeyPatch.context() as mp:
        for name in _otel_variables():
            mp.delenv(name)
        server = live_server(
            tmp_path_factory.mktemp("pseudonyms"),
            env={
                "CATALOG_DATABASE_URL": database_url,
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                "OTEL_SERVICE_NAME": "catalog-pseudonyms",
                "CATALOG_TRACE_SCOPES": "pseudonyms",
            },
        )
    try:
        scope = f"subject-{uuid.uuid4().hex[:10]}:notes"
        user = bearer(server, "admin", on_behalf_of=scope)  # the event's end user: a pseudonym too
        write, write_trace, _ = traceparent()
        r = httpx.post(
            f"{server.url}{UC}/memory-stores/{STORE}/entries",
            headers={**user, "traceparent": write},
            json={"scope": scope, "path": "/p.md", "contents": "x"},
        )
        assert r.status_code == 200, r.text
        read, read_trace, _ = traceparent()
        r = httpx.get(
            f"{server.url}{UC}/memory-stores/{STORE}/entries:get",
            headers={**user, "traceparent": read},
            params={"scope": scope, "path": "/p.md"},
        )
        assert r.status_code == 200, r.text
        r = httpx.get(
            f"{server.url}{UC}/system/audit", headers=bearer(server), params={"scope": scope, "order": "asc"}
        )
        assert r.status_code == 200, r.text
        events = [e for e in r.json()["events"] if e["action_name"].startswith("entries.")]
        assert [e["action_name"] for e in events] == ["entries.write", "entries.read"]
        for event, trace_id in zip(events, (write_trace, read_trace), strict=True):
            spans = receiver.wait_for(
                "the request's trace",
                lambda t=trace_id: (s := receiver.trace(t)) and any(x.kind == SERVER for x in s) and s,
            )
            assert spans[0].resource["service.name"] == "catalog-pseudonyms"
            held = {event["on_behalf_of"], event["request_params"].get("scope", event["on_behalf_of"])}
            assert all(p.startswith("ps_") for p in held)
            assert set(one(spans, "audit append").attributes["catalog.scope.pseudonyms"]) == held
            assert not [t for s in spans for t in texts(s) if "subject-" in t]
    finally:
        server.stop()


# --- off ---------------------------------------------------------------------------------------------


def _receiver_on_the_default_port() -> Receiver:
    """A receiver where an exporter with no endpoint configured would send: localhost:4318 (a
    free port when that one is taken)."""
    try:
        return Receiver(port=DEFAULT_OTLP_PORT)
    except OSError:
        return Receiver()


def test_with_no_endpoint_nothing_is_sent_and_no_log_line_names_a_trace(
    database_url, tmp_path, live_server, traced
):
    """(`traced` made the store.)"""
    idle = _receiver_on_the_default_port()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name in _otel_variables():
                mp.delenv(name)
            # the other variables alone turn nothing on
            server = live_server(
                tmp_path / "untraced",
                env={
                    "CATALOG_DATABASE_URL": database_url,
                    "OTEL_BSP_SCHEDULE_DELAY": "50",
                    "OTEL_SERVICE_NAME": "untraced",
                    "OTEL_TRACES_SAMPLER": "always_on",
                },
            )
        try:
            header, _, _ = traceparent()
            r = httpx.post(
                f"{server.url}{UC}/memory-stores/{STORE}/entries",
                headers={**bearer(server), "traceparent": header},
                json={"scope": "quiet", "path": "/q.md", "contents": "quiet"},
            )
            assert r.status_code == 200, r.text
            r = httpx.post(
                f"{server.url}{UC}/memory-stores/{STORE}/entries:search",
                headers=bearer(server),
                json={"scope": "quiet", "query": "quiet"},
            )
            assert r.status_code == 200, r.text
            mcp_call(
                server, "search_memory", {"query": "quiet"}, bearer(server, "admin", on_behalf_of="quiet")
            )
            time.sleep(1.0)  # twenty batch delays
            r = httpx.get(f"{server.url}/metrics", headers=bearer(server))
            assert r.status_code == 200 and "http_server_request_duration_seconds_count{" in r.text
        finally:
            server.stop()  # an exporter would flush at exit
        assert idle.connections == 0 and idle.spans == []
        lines = log_lines(server)
        assert [line for line in lines if line.get("message") == "request"]
        assert not [line for line in lines if "trace_id" in line or "span_id" in line]
        assert not [line for line in lines if line.get("message") == "tracing on"]
    finally:
        idle.close()


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "127.0.0.1:4318/v1/traces"},
    ],
    ids=["nothing", "no-endpoint", "sdk-disabled", "exporter-none", "not-a-url"],
)
def test_tracing_stays_off(environ):
    assert telemetry.configure(Settings(), environ) is False
    assert not telemetry.enabled()


def test_the_endpoint_is_read_as_the_specification_says():
    assert telemetry.traces_endpoint({}) is None
    assert (
        telemetry.traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
        == "http://c:4318/v1/traces"
    )
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x",
    }
    assert telemetry.traces_endpoint(both) == "http://t/x"


def test_a_statement_is_named_by_its_first_keyword_only():
    assert telemetry.db_operation("SELECT 1") == "SELECT"
    assert telemetry.db_operation("  -- a comment\n/* more */ (select a FROM t)") == "SELECT"
    assert telemetry.db_operation("with x AS (DELETE FROM t RETURNING *) SELECT * FROM x") == "WITH"
    assert telemetry.db_operation("'; DROP TABLE x") == "OTHER"
    assert telemetry.db_operation("") == "OTHER"
