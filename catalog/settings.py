"""One typed settings object, built once from the environment and passed into `create_app`.

Nothing in the package reads the environment at import time; tests build `Settings` directly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DEV_ISSUER = "memory-catalog-dev"
DEV_AUDIENCE = "memory-catalog"
MAX_BODY_BYTES = 2 * 1024 * 1024

_TWO_PART = re.compile(r"^[A-Za-z0-9_-]{1,255}\.[A-Za-z0-9_-]{1,255}$")
_THREE_PART = re.compile(r"^[A-Za-z0-9_-]{1,255}\.[A-Za-z0-9_-]{1,255}\.[A-Za-z0-9_-]{1,255}$")


class SettingsError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path(".data")
    database_url: str | None = None
    admin: str = "admin"
    agents_schema: str = "main.default"
    jwt_issuer: str = DEV_ISSUER
    jwt_audience: str = DEV_AUDIENCE
    jwks_url: str | None = None
    jwt_public_key: str | None = None
    embedding_model: Path | None = None  # another ONNX sentence model (384 dimensions)
    embedding_tokenizer: Path | None = None  # its tokenizer.json
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = MAX_BODY_BYTES
    # An MCP tool call may carry more than a REST body, so that a memory too long to keep is a
    # tool error the model reads ("contents: at most ... characters") rather than a failed request.
    mcp_max_body_bytes: int = 16 * 1024 * 1024
    page_default: int = 100
    page_cap: int = 1000
    log_format: str = "auto"  # auto: plain text on a terminal, JSON lines otherwise
    # limits (0 turns a limit off; see README "Limits under load")
    rate_limit: float = 0.0  # requests per second per principal (per server process); 0 = off
    rate_burst: int = 0  # requests a principal may send at once; 0 = twice the rate (at least 1)
    request_timeout: float = 60.0  # seconds a request may take before it is answered 504
    max_concurrent_requests: int = 256  # requests in progress at once; more are answered 503
    max_connections: int = 1024  # open client connections; more are answered 503 and closed
    # open connections from one client address (so no one client takes the whole budget); behind
    # a load balancer every connection comes from its address: raise or turn off (0) there
    max_connections_per_client: int = 128
    first_byte_timeout: float = 5.0  # seconds a new connection may stay silent before it is closed
    header_timeout: float = 10.0  # seconds a client may take to send a request's line and headers
    body_timeout: float = 30.0  # seconds a client may pause while sending a request body
    # seconds `catalog serve` goes on serving after SIGTERM/SIGINT while /healthz answers 503
    # (catalog.web.serving.Drain): longer than a load balancer takes to see /healthz fail
    drain_seconds: float = 5.0
    # the upstream model (catalog.llm): an OpenAI-compatible Chat Completions endpoint, or none
    llm_base_url: str | None = None
    llm_api_key: str | None = field(default=None, repr=False)
    llm_model: str | None = None
    llm_timeout: float = 120.0  # seconds one upstream call may take
    llm_max_retries: int = 2  # retries of one upstream call (429, 5xx, connection failures)
    llm_max_steps: int = 8  # model calls one response or extraction may make (tool rounds)
    # a route that waits for the model (responses, extraction) may take this long instead of
    # `request_timeout`
    llm_request_timeout: float = 600.0
    # a SCHEDULED memory pipeline runs when this many seconds passed since its last run was created
    pipeline_interval: float = 86400.0
    # a scope with at least this many entries gets a vector index of its own (catalog.search.
    # scope_index), looked for every `scope_index_interval` seconds; 0 turns this off
    scope_index_min: int = 50_000
    scope_index_interval: float = 600.0
    # the store (`catalog.schema.store`) a conversation created without `memory_store` belongs
    # to, in the caller's scope; None: such a create is refused
    default_conversation_store: str | None = None

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
        if not self.scope_index_interval > 0:
            raise SettingsError("CATALOG_SCOPE_INDEX_INTERVAL must be a positive number of seconds")
        if self.default_conversation_store is not None and not _THREE_PART.match(
            self.default_conversation_store
        ):
            raise SettingsError("CATALOG_DEFAULT_CONVERSATION_STORE must be '<catalog>.<schema>.<store>'")
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
        ):
            if value < 0:
                raise SettingsError(f"{name} must not be negative (0 turns the limit off)")

    @property
    def burst(self) -> int:
        return self.rate_burst or max(1, int(self.rate_limit * 2))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value not in (None, "") else None

        def number(name: str, default: float, kind: type = float) -> Any:
            raw = get(name)
            if raw is None:
                return default
            try:
                return kind(raw)
            except ValueError:
                raise SettingsError(
                    f"{name} must be a {'whole number' if kind is int else 'number'}, not {raw!r}"
                ) from None

        settings = cls(
            log_format=(get("CATALOG_LOG_FORMAT") or "auto").lower(),
            rate_limit=number("CATALOG_RATE_LIMIT", 0.0),
            rate_burst=number("CATALOG_RATE_BURST", 0, int),
            request_timeout=number("CATALOG_REQUEST_TIMEOUT", 60.0),
            max_concurrent_requests=number("CATALOG_MAX_CONCURRENT_REQUESTS", 256, int),
            max_connections=number("CATALOG_MAX_CONNECTIONS", 1024, int),
            max_connections_per_client=number("CATALOG_MAX_CONNECTIONS_PER_CLIENT", 128, int),
            first_byte_timeout=number("CATALOG_FIRST_BYTE_TIMEOUT", 5.0),
            header_timeout=number("CATALOG_HEADER_TIMEOUT", 10.0),
            body_timeout=number("CATALOG_BODY_TIMEOUT", 30.0),
            drain_seconds=number("CATALOG_DRAIN_SECONDS", 5.0),
            llm_base_url=get("CATALOG_LLM_BASE_URL"),
            llm_api_key=get("CATALOG_LLM_API_KEY"),
            llm_model=get("CATALOG_LLM_MODEL"),
            llm_timeout=number("CATALOG_LLM_TIMEOUT", 120.0),
            llm_max_retries=number("CATALOG_LLM_MAX_RETRIES", 2, int),
            llm_max_steps=number("CATALOG_LLM_MAX_STEPS", 8, int),
            llm_request_timeout=number("CATALOG_LLM_REQUEST_TIMEOUT", 600.0),
            pipeline_interval=number("CATALOG_PIPELINE_INTERVAL", 86400.0),
            scope_index_min=number("CATALOG_SCOPE_INDEX_MIN", 50_000, int),
            scope_index_interval=number("CATALOG_SCOPE_INDEX_INTERVAL", 600.0),
            default_conversation_store=(get("CATALOG_DEFAULT_CONVERSATION_STORE") or "").lower() or None,
            data_dir=Path(get("CATALOG_DATA_DIR") or ".data"),
            database_url=get("CATALOG_DATABASE_URL"),
            admin=get("CATALOG_ADMIN") or "admin",
            agents_schema=(get("CATALOG_AGENTS_SCHEMA") or "main.default").lower(),
            jwt_issuer=get("CATALOG_JWT_ISSUER") or DEV_ISSUER,
            jwt_audience=get("CATALOG_JWT_AUDIENCE") or DEV_AUDIENCE,
            jwks_url=get("CATALOG_JWKS_URL"),
            jwt_public_key=get("CATALOG_JWT_PUBLIC_KEY"),
            embedding_model=Path(m) if (m := get("CATALOG_EMBEDDING_MODEL")) else None,
            embedding_tokenizer=Path(t) if (t := get("CATALOG_EMBEDDING_TOKENIZER")) else None,
        )
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
