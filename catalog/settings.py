"""One typed settings object, built once from the environment and passed into `create_app`.

Nothing in the package reads the environment at import time; tests build `Settings` directly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

DEV_ISSUER = "memory-catalog-dev"
DEV_AUDIENCE = "memory-catalog"
MAX_BODY_BYTES = 2 * 1024 * 1024

_TWO_PART = re.compile(r"^[A-Za-z0-9_-]{1,255}\.[A-Za-z0-9_-]{1,255}$")


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
    page_default: int = 100
    page_cap: int = 1000

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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value not in (None, "") else None

        settings = cls(
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
    def embedded(self) -> bool:
        return self.database_url is None

    @property
    def postgres_dir(self) -> Path:
        return self.data_dir.resolve() / "postgres"

    @property
    def index_dir(self) -> Path:
        return self.data_dir.resolve() / "index"

    @property
    def keys_dir(self) -> Path:
        return self.data_dir.resolve() / "keys"
