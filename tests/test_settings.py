from __future__ import annotations

from pathlib import Path

import pytest

from catalog.settings import Settings, SettingsError


def test_settings_from_env_reads_the_contract_variables():
    s = Settings.from_env(
        {
            "CATALOG_DATA_DIR": "/srv/cat",
            "CATALOG_DATABASE_URL": "postgresql://u@h/db",
            "CATALOG_ADMIN": "root",
            "CATALOG_AGENTS_SCHEMA": "Agents.Memory",
            "CATALOG_JWT_ISSUER": "https://idp",
            "CATALOG_JWT_AUDIENCE": "catalog",
            "CATALOG_JWKS_URL": "https://idp/jwks",
        }
    )
    assert s.data_dir == Path("/srv/cat") and s.database_url == "postgresql://u@h/db"
    assert s.admin == "root" and s.agents_schema == "agents.memory"
    assert not s.dev_mode and s.database_url
    defaults = Settings.from_env({})
    assert defaults.dev_mode and defaults.database_url is None and defaults.admin == "admin"
    assert defaults.postgres_dir == Path(".data").resolve() / "postgres"
    assert defaults.pipeline_interval == 86400
    assert Settings.from_env({"CATALOG_PIPELINE_INTERVAL": "3600"}).pipeline_interval == 3600


@pytest.mark.parametrize(
    "env",
    [
        {"CATALOG_JWKS_URL": "https://x", "CATALOG_JWT_PUBLIC_KEY": "/k.pem"},
        {"CATALOG_AGENTS_SCHEMA": "justone"},
        {"CATALOG_ADMIN": "  "},
        {"CATALOG_PIPELINE_INTERVAL": "0"},
        {"CATALOG_PIPELINE_INTERVAL": "daily"},
    ],
)
def test_bad_settings_name_the_variable(env):
    with pytest.raises(SettingsError, match="CATALOG_"):
        Settings.from_env(env)
