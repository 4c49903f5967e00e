"""One typed settings object, built once from the environment and passed into `create_app`.

Nothing in the package reads the environment at import time; tests build `Settings` directly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from catalog.machine import Limits

DEV_ISSUER = "memory-catalog-dev"
DEV_AUDIENCE = "memory-catalog"
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_WORKERS = 64  # worker processes of one `catalog serve`
# what a worker counts on when the default number of workers fits a memory limit (one held
# 250-500 MB after a load of searches and writes: docs/operations/sizing.md)
WORKER_MEMORY = 512 * 1024 * 1024

_TWO_PART = re.compile(r"^[A-Za-z0-9_-]{1,255}\.[A-Za-z0-9_-]{1,255}$")
_THREE_PART = re.compile(r"^[A-Za-z0-9_-]{1,255}\.[A-Za-z0-9_-]{1,255}\.[A-Za-z0-9_-]{1,255}$")


class SettingsError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


def about(env: str | None, doc: str, *, fold: bool = False) -> dict[str, Any]:
    """The metadata of a `Settings` field: the environment variable it is read from (None: it has
    none; it is set in code or by a command-line option), what it means (a sentence or two of
    Markdown) and whether its value is case-folded (`fold`: names, which are stored lowercase).
    `from_env` reads the variables and `docs/generate.py` writes docs/configuration.md from these,
    so the two cannot drift apart."""
    return {"env": env, "doc": doc, "fold": fold}


def _parse(name: str, kind: str, raw: str, fold: bool) -> Any:
    """The value of variable `name` (set, not empty) for a field of type `kind`."""
    if kind in ("int", "float"):
        try:
            return int(raw) if kind == "int" else float(raw)
        except ValueError:
            raise SettingsError(
                f"{name} must be a {'whole number' if kind == 'int' else 'number'}, not {raw!r}"
            ) from None
    if kind in ("Path", "Path | None"):
        return Path(raw)
    if kind in ("str", "str | None"):
        return raw.lower() if fold else raw
    raise TypeError(f"no parser for a setting of type {kind} ({name})")


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(
        default=Path(".data"),
        metadata=about(
            "CATALOG_DATA_DIR",
            "the embedded database (`<dir>/postgres`), the search index (`<dir>/index`) and the "
            "development keys (`<dir>/keys`); relative to the working directory",
        ),
    )
    database_url: str | None = field(
        default=None,
        metadata=about(
            "CATALOG_DATABASE_URL",
            "an external PostgreSQL with the `vector` extension; unset: the embedded one in the data dir",
        ),
    )
    admin: str = field(
        default="admin", metadata=about("CATALOG_ADMIN", "the principal that is metastore admin at bootstrap")
    )
    agents_schema: str = field(
        default="main.default",
        metadata=about(
            "CATALOG_AGENTS_SCHEMA",
            "the schema (`catalog.schema`) holding the stores of the agent-memory dialect "
            "(`/api/2.0/agents/...`); case-insensitive",
            fold=True,
        ),
    )
    jwt_issuer: str = field(
        default=DEV_ISSUER, metadata=about("CATALOG_JWT_ISSUER", "the `iss` claim every token must carry")
    )
    jwt_audience: str = field(
        default=DEV_AUDIENCE, metadata=about("CATALOG_JWT_AUDIENCE", "the `aud` claim every token must carry")
    )
    jwks_url: str | None = field(
        default=None,
        metadata=about(
            "CATALOG_JWKS_URL",
            "production: verify tokens against this JWKS (cached; a token with an unknown `kid` has it "
            "fetched again, at most every 10 s); not with `CATALOG_JWT_PUBLIC_KEY`",
        ),
    )
    jwt_public_key: str | None = field(
        default=None,
        metadata=about(
            "CATALOG_JWT_PUBLIC_KEY",
            "production: verify tokens against this PEM public key (the text, or a file path); not with "
            "`CATALOG_JWKS_URL`",
        ),
    )
    embedding_model: Path | None = field(
        default=None,
        metadata=about(
            "CATALOG_EMBEDDING_MODEL",
            "another ONNX sentence model (384 dimensions), with `CATALOG_EMBEDDING_TOKENIZER`; unset: the "
            "bundled all-MiniLM-L6-v2 int8 (after changing it, `catalog reindex --embeddings`)",
        ),
    )
    embedding_tokenizer: Path | None = field(
        default=None,
        metadata=about(
            "CATALOG_EMBEDDING_TOKENIZER",
            "the `tokenizer.json` of `CATALOG_EMBEDDING_MODEL` (both or neither)",
        ),
    )
    host: str = field(
        default="127.0.0.1", metadata=about(None, "the address `catalog serve` listens on (`--host`)")
    )
    port: int = field(
        default=8080, metadata=about(None, "the port `catalog serve` listens on (`--port`; 0: any free port)")
    )
    # `catalog serve --workers N` (catalog.cli.workers): N processes serving one port on one data dir
    workers: int = field(
        default=0,
        metadata=about(
            "CATALOG_WORKERS",
            "worker processes of `catalog serve` (`--workers`), which serve one port and share one "
            "full-text index: 0 = one per CPU core the server may use (its CPU affinity, at most its "
            "CPU limit; no more than a memory limit holds at 512 MiB each), 1 = one process, as a "
            "server before workers were; see [Sizing a machine](operations/sizing.md)",
        ),
    )
    event_loop: str = field(
        default="uvloop",
        metadata=about(
            "CATALOG_EVENT_LOOP",
            "the event loop `catalog serve` runs on: `uvloop` (libuv's: less CPU per request; the "
            "standard library's where uvloop is not installed) or `asyncio` (the standard library's)",
            fold=True,
        ),
    )
    max_body_bytes: int = field(
        default=MAX_BODY_BYTES,
        metadata=about(None, "the largest request body, in bytes (2 MiB); larger is 413 `PAYLOAD_TOO_LARGE`"),
    )
    # An MCP tool call may carry more than a REST body, so that a memory too long to keep is a
    # tool error the model reads ("contents: at most ... characters") rather than a failed request.
    mcp_max_body_bytes: int = field(
        default=16 * 1024 * 1024,
        metadata=about(None, "the largest body of an MCP request, in bytes (16 MiB)"),
    )
    # A store's archive (catalog/backup) is held in memory while it is checked and imported.
    import_max_body_bytes: int = field(
        default=256 * 1024 * 1024,
        metadata=about(
            "CATALOG_IMPORT_MAX_BYTES",
            "the largest archive `catalog import` may send (the body of `POST "
            ".../memory-stores/{name}/import`), in bytes (256 MiB; the server holds it in memory while "
            "it imports it); larger is 413 `PAYLOAD_TOO_LARGE`",
        ),
    )
    page_default: int = field(
        default=100, metadata=about(None, "the items of a list page when the request names no size (or 0)")
    )
    page_cap: int = field(
        default=1000,
        metadata=about(None, "the most items of a list page (a larger size asked for means this)"),
    )
    log_format: str = field(
        default="auto",
        metadata=about(
            "CATALOG_LOG_FORMAT",
            "`plain` (one readable line per event), `json` (JSON lines), or `auto`: plain when stderr is a "
            "terminal, JSON otherwise",
            fold=True,
        ),
    )
    # limits (0 turns a limit off; see docs/operations/limits.md)
    rate_limit: float = field(
        default=0.0,
        metadata=about(
            "CATALOG_RATE_LIMIT",
            "requests per second per principal (per server process); more are answered 429 "
            "`REQUEST_LIMIT_EXCEEDED` with `Retry-After` (0 = no limit)",
        ),
    )
    rate_burst: int = field(
        default=0,
        metadata=about(
            "CATALOG_RATE_BURST",
            "requests a principal may send at once under `CATALOG_RATE_LIMIT` (0 = twice the rate, "
            "at least 1)",
        ),
    )
    request_timeout: float = field(
        default=60.0,
        metadata=about(
            "CATALOG_REQUEST_TIMEOUT",
            "seconds a request may take; then 504 `DEADLINE_EXCEEDED` (0 = no limit)",
        ),
    )
    max_concurrent_requests: int = field(
        default=256,
        metadata=about(
            "CATALOG_MAX_CONCURRENT_REQUESTS",
            "requests in progress at once; more are answered 503 `TEMPORARILY_UNAVAILABLE` (0 = no limit)",
        ),
    )
    max_connections: int = field(
        default=1024,
        metadata=about(
            "CATALOG_MAX_CONNECTIONS",
            "open client connections; more are answered 503 and closed (0 = no limit)",
        ),
    )
    # open connections from one client address (so no one client takes the whole budget); behind
    # a load balancer every connection comes from its address: raise or turn off (0) there
    max_connections_per_client: int = field(
        default=128,
        metadata=about(
            "CATALOG_MAX_CONNECTIONS_PER_CLIENT",
            "open connections from one client address; more are answered 503 and closed (0 = no limit; "
            "raise it behind a load balancer, whose address every connection then has)",
        ),
    )
    first_byte_timeout: float = field(
        default=5.0,
        metadata=about(
            "CATALOG_FIRST_BYTE_TIMEOUT", "seconds a new connection may stay silent before it is closed"
        ),
    )
    header_timeout: float = field(
        default=10.0,
        metadata=about(
            "CATALOG_HEADER_TIMEOUT",
            "seconds a client may take to send a request's line and headers; then 408 `REQUEST_TIMEOUT`",
        ),
    )
    body_timeout: float = field(
        default=30.0,
        metadata=about(
            "CATALOG_BODY_TIMEOUT",
            "seconds a client may pause while sending a request body; then 408 `REQUEST_TIMEOUT`",
        ),
    )
    # the drain before a shut-down (catalog.web.serving.Drain): longer than a load balancer
    # takes to see /healthz fail (its check interval times its fall count, plus a check's timeout)
    drain_seconds: float = field(
        default=5.0,
        metadata=about(
            "CATALOG_DRAIN_SECONDS",
            "seconds `catalog serve` goes on accepting and serving requests after SIGTERM or SIGINT "
            "while `/healthz` answers 503 `draining`, so that a load balancer takes it out of rotation "
            "first (answers carry `Connection: close` meanwhile); then it closes its listening socket, "
            "finishes the requests in progress and exits 0. Make it longer than the balancer needs to "
            "see two failed checks: for 5 s, HAProxy `option httpchk GET /healthz`, `http-check expect "
            "status 200` and `default-server inter 1s fall 2` (HAProxy's defaults, `inter 2s fall 3`, "
            "need about 7 s: raise this to 8). No wait when nothing has asked `/healthz` since the "
            "server started; a second signal ends the wait; 0 = stop at once",
        ),
    )
    # the upstream model (catalog.llm): an OpenAI-compatible Chat Completions endpoint, or none
    llm_base_url: str | None = field(
        default=None,
        metadata=about(
            "CATALOG_LLM_BASE_URL",
            "an OpenAI-compatible Chat Completions endpoint with function calling "
            "(`http://127.0.0.1:11434/v1` for Ollama, `http://127.0.0.1:8000/v1` for vLLM, "
            "`http://127.0.0.1:8080/v1` for llama.cpp's server, or a hosted API); unset: responses and "
            "extraction answer 501 `NOT_IMPLEMENTED`",
        ),
    )
    llm_api_key: str | None = field(
        default=None,
        repr=False,
        metadata=about("CATALOG_LLM_API_KEY", "sent upstream as `Authorization: Bearer ...`; never logged"),
    )
    llm_model: str | None = field(
        default=None,
        metadata=about(
            "CATALOG_LLM_MODEL",
            "the model asked for; unset: the `model` a response request names (extraction then needs it set)",
        ),
    )
    llm_timeout: float = field(
        default=120.0,
        metadata=about("CATALOG_LLM_TIMEOUT", "seconds one upstream call may take (0 = no limit)"),
    )
    llm_max_retries: int = field(
        default=2,
        metadata=about(
            "CATALOG_LLM_MAX_RETRIES",
            "retries of one upstream call on 408/409/429/5xx and connection failures, with backoff (or "
            "the upstream's `Retry-After`, at most 10 s)",
        ),
    )
    llm_max_steps: int = field(
        default=8,
        metadata=about(
            "CATALOG_LLM_MAX_STEPS",
            "model calls one response or extraction may make (tool rounds, 1 to 64); the last is offered "
            "no tools, so the model answers",
        ),
    )
    # a route that waits for the model (responses, extraction) may take this long instead of
    # `request_timeout`
    llm_request_timeout: float = field(
        default=600.0,
        metadata=about(
            "CATALOG_LLM_REQUEST_TIMEOUT",
            "seconds a request that waits for the model (responses, extraction) may take, instead of "
            "`CATALOG_REQUEST_TIMEOUT`",
        ),
    )
    # a SCHEDULED memory pipeline runs when this many seconds passed since its last run was created
    pipeline_interval: float = field(
        default=86400.0,
        metadata=about(
            "CATALOG_PIPELINE_INTERVAL",
            "seconds between the runs of a `SCHEDULED` memory pipeline (counted from the creation of "
            "its last run)",
        ),
    )
    # a scope with at least this many entries gets a vector index of its own (catalog.search.
    # scope_index), looked for every `scope_index_interval` seconds; 0 turns this off
    scope_index_min: int = field(
        default=50_000,
        metadata=about(
            "CATALOG_SCOPE_INDEX_MIN",
            "a scope with at least this many entries gets a vector index of its own (a partial HNSW "
            "index, built with `CREATE INDEX CONCURRENTLY`; dropped below half of it); 0 turns this off",
        ),
    )
    scope_index_interval: float = field(
        default=600.0,
        metadata=about(
            "CATALOG_SCOPE_INDEX_INTERVAL",
            "seconds between two looks for scopes that need (or no longer need) their own vector index",
        ),
    )
    # the store (`catalog.schema.store`) a conversation created without `memory_store` belongs
    # to, in the caller's scope; None: such a create is refused
    default_conversation_store: str | None = field(
        default=None,
        metadata=about(
            "CATALOG_DEFAULT_CONVERSATION_STORE",
            "a store's full name (`catalog.schema.store`): a conversation created without `memory_store` "
            "(as the OpenAI Agents SDK's `OpenAIConversationsSession()` creates one) belongs to it, in the "
            "`scope` the request names, else the caller's own (`on_behalf_of`, else `sub`), with the usual "
            "privileges and scope binding; unset: such a create is 400 naming `memory_store` and this "
            "setting",
            fold=True,
        ),
    )

    # tracing (catalog.telemetry) is off unless the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
    # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set: the OTEL_* variables are OpenTelemetry's, read
    # when `catalog serve` starts (docs/operations/observability.md)
    trace_scopes: str = field(
        default="off",
        metadata=about(
            "CATALOG_TRACE_SCOPES",
            "with tracing on (the standard `OTEL_EXPORTER_OTLP_ENDPOINT`: see "
            "[Observability](operations/observability.md)), `off`: no span attribute names a scope; "
            "`pseudonyms`: the audit append spans carry the pseudonyms (`ps_...`) of the scopes and end "
            "users their events hold, as the audit log holds them (erasing a subject unlinks them alike)",
            fold=True,
        ),
    )

    def __post_init__(self) -> None:
        if self.jwks_url and self.jwt_public_key:
            raise SettingsError("set only one of CATALOG_JWKS_URL and CATALOG_JWT_PUBLIC_KEY")
        if not self.admin.strip():
            raise SettingsError("CATALOG_ADMIN must not be empty")
        if not _TWO_PART.match(self.agents_schema):
            raise SettingsError("CATALOG_AGENTS_SCHEMA must be '<catalog>.<schema>'")
        if (self.embedding_model is None) != (self.embedding_tokenizer is None):
            raise SettingsError(
                "set both CATALOG_EMBEDDING_MODEL and CATALOG_EMBEDDING_TOKENIZER, or neither"
            )
        if not 0 <= self.port < 65536:
            raise SettingsError("port must be between 0 (any free port) and 65535")
        if self.log_format not in ("auto", "json", "plain"):
            raise SettingsError("CATALOG_LOG_FORMAT must be auto, json or plain")
        if self.llm_base_url is not None and not re.match(r"^https?://[^\s/]+", self.llm_base_url):
            raise SettingsError("CATALOG_LLM_BASE_URL must be an http(s) URL, e.g. http://127.0.0.1:11434/v1")
        if not 1 <= self.llm_max_steps <= 64:
            raise SettingsError("CATALOG_LLM_MAX_STEPS must be between 1 and 64")
        if not self.pipeline_interval > 0:
            raise SettingsError("CATALOG_PIPELINE_INTERVAL must be a positive number of seconds")
        if self.drain_seconds < 0:
            raise SettingsError("CATALOG_DRAIN_SECONDS must not be negative (0: stop at once)")
        if self.event_loop not in ("uvloop", "asyncio"):
            raise SettingsError("CATALOG_EVENT_LOOP must be 'uvloop' or 'asyncio'")
        if not 0 <= self.workers <= MAX_WORKERS:
            raise SettingsError(f"CATALOG_WORKERS must be between 0 (one per core) and {MAX_WORKERS}")
        if not self.scope_index_interval > 0:
            raise SettingsError("CATALOG_SCOPE_INDEX_INTERVAL must be a positive number of seconds")
        if self.default_conversation_store is not None and not _THREE_PART.match(
            self.default_conversation_store
        ):
            raise SettingsError("CATALOG_DEFAULT_CONVERSATION_STORE must be '<catalog>.<schema>.<store>'")
        if self.trace_scopes not in ("off", "pseudonyms"):
            raise SettingsError("CATALOG_TRACE_SCOPES must be off or pseudonyms")
        for name, value in (
            ("CATALOG_RATE_LIMIT", self.rate_limit),
            ("CATALOG_RATE_BURST", self.rate_burst),
            ("CATALOG_REQUEST_TIMEOUT", self.request_timeout),
            ("CATALOG_MAX_CONCURRENT_REQUESTS", self.max_concurrent_requests),
            ("CATALOG_MAX_CONNECTIONS", self.max_connections),
            ("CATALOG_MAX_CONNECTIONS_PER_CLIENT", self.max_connections_per_client),
            ("CATALOG_FIRST_BYTE_TIMEOUT", self.first_byte_timeout),
            ("CATALOG_HEADER_TIMEOUT", self.header_timeout),
            ("CATALOG_BODY_TIMEOUT", self.body_timeout),
            ("CATALOG_LLM_TIMEOUT", self.llm_timeout),
            ("CATALOG_LLM_MAX_RETRIES", self.llm_max_retries),
            ("CATALOG_LLM_REQUEST_TIMEOUT", self.llm_request_timeout),
            ("CATALOG_SCOPE_INDEX_MIN", self.scope_index_min),
            ("CATALOG_IMPORT_MAX_BYTES", self.import_max_body_bytes),
        ):
            if value < 0:
                raise SettingsError(f"{name} must not be negative (0 turns the limit off)")

    def workers_for(self, found: Limits) -> int:
        """The worker processes `catalog serve` runs under `found` (`catalog.machine.limits()`, read
        once at its start): `workers`, or when 0 one per CPU core a process of these limits may use
        (its affinity, at most its CPU quota), as many as its memory limit, if any, holds at
        WORKER_MEMORY each (at least one)."""
        if self.workers:
            return self.workers
        count = min(found.cores, MAX_WORKERS)
        if found.memory is not None:
            count = min(count, max(1, found.memory // WORKER_MEMORY))
        return count

    @property
    def burst(self) -> int:
        return self.rate_burst or max(1, int(self.rate_limit * 2))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """The settings the environment names (every field's `env` variable; an unset or empty one
        keeps the default), then `overrides` that are not None (the command line's options)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = f.metadata.get("env")
            raw = env.get(name) if name else None
            if name and raw not in (None, ""):
                values[f.name] = _parse(name, str(f.type), raw, f.metadata.get("fold", False))
        settings = cls(**values)
        clean = {k: v for k, v in overrides.items() if v is not None}
        return replace(settings, **clean) if clean else settings  # type: ignore[arg-type]

    @property
    def dev_mode(self) -> bool:
        """Development mode: tokens are signed with the data dir's own key."""
        return not (self.jwks_url or self.jwt_public_key)

    @property
    def postgres_dir(self) -> Path:
        return self.data_dir.resolve() / "postgres"

    @property
    def index_dir(self) -> Path:
        return self.data_dir.resolve() / "index"

    @property
    def keys_dir(self) -> Path:
        return self.data_dir.resolve() / "keys"
