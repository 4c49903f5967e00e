"""Traces over OTLP/HTTP (protobuf), on when the standard OpenTelemetry variables name a collector
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), off otherwise. The
`OTEL_*` variables are OpenTelemetry's own: they are read when `catalog serve` starts
(`configure`), the endpoints here and the rest by the SDK.

Rules:
- off (the default), nothing is set up: no exporter, no connection, no span; each seam measures
  its histogram and nothing else, and `span()` is one comparison;
- on, `configure()` installs the SDK's tracer provider as the process's global one (so the MCP
  package's own `tools/call` spans are exported too), with a batch span processor and the
  OTLP/HTTP exporter; the SDK reads the other standard variables itself (sampler, headers,
  timeout, compression, certificates, the batch processor's delays and sizes, resource
  attributes), and the provider is flushed when the process exits;
- a request is a root span (or continues the caller's trace: `traceparent`); every other span is
  a child and is made only inside a sampled trace, so background work (embedding passes, index
  passes, the audit writer's batches) makes no traces of its own;
- no attribute holds a query, contents, a path, a scope or an exception message (a message may
  quote any of them): a failure is named by its class (`error.type`). With
  `CATALOG_TRACE_SCOPES=pseudonyms`, the audit append spans carry the scopes' pseudonyms, as the
  audit log holds them (`catalog.recorder.pseudonyms`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.context import Context as TraceContext
from opentelemetry.trace import Span, SpanKind, StatusCode

from catalog import __version__
from catalog.settings import Settings

log = logging.getLogger("catalog.telemetry")

SERVICE_NAME = "memory-catalog"
PROTOCOL = "http/protobuf"


@dataclass
class _State:
    tracer: trace.Tracer | None = None
    provider: Any = None  # the SDK's TracerProvider, once on
    scope_pseudonyms: bool = False


STATE = _State()


def traces_endpoint(environ: Mapping[str, str]) -> str | None:
    """Where spans are sent: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
    `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` (as the OpenTelemetry specification has an
    OTLP/HTTP exporter read them); None: tracing is off."""
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def configure(settings: Settings, environ: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on if the environment names an OTLP endpoint (once per process); whether it
    is on. `OTEL_SDK_DISABLED=true` and `OTEL_TRACES_EXPORTER=none` keep it off."""
    if STATE.tracer is not None:
        return True
    env = os.environ if environ is None else environ
    endpoint = traces_endpoint(env)
    if endpoint is None:
        return False
    if not re.match(r"^https?://[^\s/]+", endpoint):
        log.error("tracing off: the OTLP endpoint must be an http(s) URL, e.g. http://127.0.0.1:4318")
        return False
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if "none" in {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}:
        return False
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol.strip() != PROTOCOL:
        log.warning("traces are exported over OTLP/HTTP with protobuf only; %s is not used", protocol)

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read by the SDK; the service's own name else
    resource = Resource.create({"service.version": __version__})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER (parent-based)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    STATE.provider = provider
    STATE.tracer = provider.get_tracer("catalog", __version__)
    STATE.scope_pseudonyms = settings.trace_scopes == "pseudonyms"
    where = urlsplit(endpoint)  # logged without any user or password the URL may hold
    port = f":{where.port}" if where.port else ""
    log.info(
        "tracing on",
        extra={
            "otlp_endpoint": f"{where.scheme}://{where.hostname}{port}{where.path}",
            "service_name": resource.attributes.get("service.name"),
        },
    )
    return True


def shutdown() -> None:
    """Export what is waiting and stop (the provider also does it when the process exits)."""
    if STATE.provider is not None:
        STATE.provider.shutdown()


def enabled() -> bool:
    return STATE.tracer is not None


def in_trace() -> bool:
    """Whether a span made now would be kept: tracing is on and a sampled trace is current."""
    if STATE.tracer is None:
        return False
    context = trace.get_current_span().get_span_context()
    return context.is_valid and context.trace_flags.sampled


def failed(span: Span, exc: BaseException) -> None:
    """Mark a span failed by the exception's class (never its message: it may quote contents)."""
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(StatusCode.ERROR)


# what `span()` and `server_span()` answer when no span is made: one shared context that holds None
NO_SPAN: AbstractContextManager[None] = nullcontext()


def span(
    name: str, attributes: Mapping[str, Any] | None = None, kind: SpanKind = SpanKind.INTERNAL
) -> AbstractContextManager[Span | None]:
    """A child span of the current one, current inside the block (None: no trace to add to)."""
    tracer = STATE.tracer
    if tracer is None or not in_trace():
        return NO_SPAN
    return _child_span(tracer, name, attributes, kind)


@contextmanager
def _child_span(
    tracer: trace.Tracer, name: str, attributes: Mapping[str, Any] | None, kind: SpanKind
) -> Iterator[Span]:
    with tracer.start_as_current_span(
        name, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            failed(current, exc)
            raise


def server_span(
    name: str, carrier: Mapping[str, str], attributes: Mapping[str, Any]
) -> AbstractContextManager[Span | None]:
    """A request's span: a child of the caller's `traceparent` in `carrier` (the request's
    headers), else a root. None when tracing is off."""
    tracer = STATE.tracer
    if tracer is None:
        return NO_SPAN
    parent: TraceContext = propagate.extract(carrier)
    return tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` (and `tracestate`) to outgoing headers."""
    if in_trace():
        propagate.inject(headers)


def log_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span, in hex, for a log line; None outside a trace."""
    if STATE.tracer is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)
