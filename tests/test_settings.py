from __future__ import annotations

import re
from dataclasses import fields
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
        {"CATALOG_EVENT_LOOP": "trio"},
    ],
)
def test_bad_settings_name_the_variable(env):
    with pytest.raises(SettingsError, match="CATALOG_"):
        Settings.from_env(env)


def test_every_field_says_its_variable_and_what_it_means():
    """The fields are the one source of the variables: `from_env` reads them and docs/generate.py
    writes docs/configuration.md from them."""
    for f in fields(Settings):
        assert set(f.metadata) == {"env", "doc", "fold"}, f.name
        assert f.metadata["doc"].strip(), f"{f.name}: say what it means (`doc`)"
        env = f.metadata["env"]
        assert env is None or re.fullmatch(r"CATALOG_[A-Z_]+", env), f.name
    variables = [f.metadata["env"] for f in fields(Settings) if f.metadata["env"]]
    assert len(variables) == len(set(variables))
    # every variable the module names (its error messages too) is a field's
    named = set(re.findall(r"CATALOG_[A-Z_]+", Path(settings_module.__file__).read_text()))
    assert named - set(variables) == set()


# a value each variable's checks accept, and what the field then holds (names are case-folded)
SAMPLES = {
    "int": ("7", 7),
    "float": ("2.5", 2.5),
    "str": ("Some-Value", "Some-Value"),
    "Path": ("/some/where", Path("/some/where")),
    "agents_schema": ("Agents.Memory", "agents.memory"),
    "log_format": ("JSON", "json"),
    "llm_base_url": ("http://127.0.0.1:11434/v1", "http://127.0.0.1:11434/v1"),
    "default_conversation_store": ("Main.Default.Chat", "main.default.chat"),
    "trace_scopes": ("Pseudonyms", "pseudonyms"),
    "event_loop": ("AsyncIO", "asyncio"),
}


@pytest.mark.parametrize("f", [f for f in fields(Settings) if f.metadata["env"]], ids=lambda f: f.name)
def test_each_variable_sets_its_field_and_empty_keeps_the_default(f):
    raw, expected = SAMPLES.get(f.name) or SAMPLES[str(f.type).removesuffix(" | None")]
    env = {f.metadata["env"]: raw}
    if f.name.startswith("embedding_"):  # both or neither
        env = {"CATALOG_EMBEDDING_MODEL": "/m.onnx", "CATALOG_EMBEDDING_TOKENIZER": "/t.json", **env}
    assert getattr(Settings.from_env(env), f.name) == expected
    assert getattr(Settings.from_env({f.metadata["env"]: ""}), f.name) == f.default


def test_configuration_page_lists_every_variable():
    page = (REPO / "docs" / "configuration.md").read_text()
    for f in fields(Settings):
        if f.metadata["env"]:
            assert f"`{f.metadata['env']}`" in page, (
                f"{f.metadata['env']}: run .venv/bin/python docs/generate.py"
            )


def test_the_server_runs_on_uvloop_unless_told_otherwise():
    import asyncio

    import uvloop

    from catalog.cli import event_loop_factory

    assert event_loop_factory(Settings.from_env({})) is uvloop.new_event_loop
    assert event_loop_factory(Settings.from_env({"CATALOG_EVENT_LOOP": "asyncio"})) is None
    with asyncio.Runner(loop_factory=event_loop_factory(Settings.from_env({}))) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
