"""Tracing and metrics, through one seam: each instrumented step opens a span (OpenTelemetry, off
unless `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set) and observes
a histogram or counter that `GET /metrics` renders (`catalog.metrics`), so each call site carries
one line. See docs/operations/observability.md."""

from catalog.telemetry.instruments import REGISTRY, Counter, Family, Histogram, Sample, families, text_format
from catalog.telemetry.seams import (
    audit_append,
    audit_chain_held,
    audit_queued,
    authorization,
    chat_end,
    chat_headers,
    chat_start,
    db_operation,
    embedding,
    erasure,
    http_server,
    memory_operation,
    pipeline_run_end,
    search_fusion,
    search_leg,
    watch_queries,
)
from catalog.telemetry.tracing import configure, enabled, log_ids, shutdown, traces_endpoint

__all__ = [
    "REGISTRY",
    "Counter",
    "Family",
    "Histogram",
    "Sample",
    "audit_append",
    "audit_chain_held",
    "audit_queued",
    "authorization",
    "chat_end",
    "chat_headers",
    "chat_start",
    "configure",
    "db_operation",
    "embedding",
    "enabled",
    "erasure",
    "families",
    "http_server",
    "log_ids",
    "memory_operation",
    "pipeline_run_end",
    "search_fusion",
    "search_leg",
    "shutdown",
    "text_format",
    "traces_endpoint",
    "watch_queries",
]
