from __future__ import annotations

import re
from pathlib import Path

import pytest

from catalog import settings as settings_module
from catalog.settings import Settings, SettingsError

REPO = Path(__file__).resolve().parents[1]


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
    assert defaults.default_conversation_store is None
    named = Settings.from_env({"CATALOG_DEFAULT_CONVERSATION_STORE": "Main.Default.Chat-History"})
    assert named.default_conversation_store == "main.default.chat-history"


@pytest.mark.parametrize(
    "env",
    [
        {"CATALOG_JWKS_URL": "https://x", "CATALOG_JWT_PUBLIC_KEY": "/k.pem"},
        {"CATALOG_AGENTS_SCHEMA": "justone"},
        {"CATALOG_ADMIN": "  "},
        {"CATALOG_PIPELINE_INTERVAL": "0"},
        {"CATALOG_PIPELINE_INTERVAL": "daily"},
        {"CATALOG_DEFAULT_CONVERSATION_STORE": "main.default"},
        {"CATALOG_DEFAULT_CONVERSATION_STORE": "main.default.a.b"},
        {"CATALOG_DEFAULT_CONVERSATION_STORE": "main.default.no spaces"},
    ],
)
def test_bad_settings_name_the_variable(env):
    with pytest.raises(SettingsError, match="CATALOG_"):
        Settings.from_env(env)


def test_every_variable_read_is_in_the_readmes_configuration_table():
    read = set(re.findall(r"CATALOG_[A-Z_]+", Path(settings_module.__file__).read_text()))
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Configuration") :]
    table = table[: table.index("\n\n", table.index("| variable |"))]
    documented = set(re.findall(r"`(CATALOG_[A-Z_]+)`", table))
    assert read - documented == set()
