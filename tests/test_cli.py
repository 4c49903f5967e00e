"""`catalog serve`, `token` and `db-url` as a user runs them, on an embedded PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
import psutil
from rest import UC

from catalog.db import running_url


def _postmasters(pgdata) -> int:
    count = 0
    for proc in psutil.process_iter(attrs=["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and "-D" in cmdline and str(pgdata) in cmdline:
            count += 1
    return count


async def _count_catalogs(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM catalogs"))
    finally:
        await conn.close()


def test_serve_token_db_url_and_restart_on_the_embedded_database(tmp_path, live_server):
    data_dir = tmp_path / "data"
    pgdata = data_dir / "postgres"
    server = live_server(data_dir)
    try:
        assert server.first_line == f"listening on http://127.0.0.1:{server.port}"
        minted = server.cli("token", "--sub", "admin")
        assert minted.returncode == 0, minted.stderr
        assert minted.stderr == ""  # the server's own key: nothing to warn about
        headers = {"Authorization": f"Bearer {minted.stdout.strip()}"}
        r = httpx.post(f"{server.url}{UC}/catalogs", headers=headers, json={"name": "persisted"})
        assert r.status_code == 200, r.text
        # db-url works while the server runs and starts no second PostgreSQL
        db_url = server.cli("db-url")
        assert db_url.returncode == 0, db_url.stderr
        assert _postmasters(pgdata) == 1
        assert asyncio.run(_count_catalogs(db_url.stdout.strip())) == 2  # main + persisted
        version_mtime = (pgdata / "PG_VERSION").stat().st_mtime
    finally:
        assert server.stop() == 0
    assert running_url(pgdata) is None  # stopped cleanly with the server
    assert _postmasters(pgdata) == 0

    again = live_server(data_dir)
    try:
        assert (pgdata / "PG_VERSION").stat().st_mtime == version_mtime  # reused, not re-initialised
        headers = {"Authorization": f"Bearer {again.cli('token', '--sub', 'admin').stdout.strip()}"}
        assert httpx.get(f"{again.url}{UC}/catalogs/persisted", headers=headers).status_code == 200
        # a token minted before the restart stays valid: the dev key persisted too
        assert (
            httpx.get(
                f"{again.url}{UC}/catalogs/persisted", headers={"Authorization": minted_header(minted)}
            ).status_code
            == 200
        )
    finally:
        assert again.stop() == 0


def minted_header(result) -> str:
    return f"Bearer {result.stdout.strip()}"


def test_token_command_refuses_bad_input_and_production_mode(tmp_path):
    import subprocess
    import sys

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        import os

        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")},
            "CATALOG_DATA_DIR": str(tmp_path),
            **(env or {}),
        }
        return subprocess.run(
            [sys.executable, "-m", "catalog", *args], env=full_env, capture_output=True, text=True
        )

    assert run("token", "--sub", "").returncode == 2
    assert run("token", "--sub", "a", "--ttl", "0").returncode == 2
    prod = run("token", "--sub", "a", env={"CATALOG_JWKS_URL": "https://idp.example/jwks"})
    assert prod.returncode == 2 and "development mode" in prod.stderr
    ok = run("token", "--sub", "a", "--on-behalf-of", "u1")
    assert ok.returncode == 0 and ok.stdout.count(".") == 2


def test_a_token_signed_with_a_key_no_server_uses_is_minted_with_a_warning(tmp_path):
    """Run outside the server's data dir (another directory's ./.data), `catalog token` makes a
    key of its own: it says so, since every server answers that token 'bad token signature'."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}

    def token() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "catalog", "token", "--sub", "admin"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )

    first = token()
    assert first.returncode == 0 and first.stdout.count(".") == 2  # the token, on stdout alone
    assert first.stderr.startswith("catalog token: warning: no server has run on the data dir ")
    assert str((tmp_path / ".data").resolve()) in first.stderr and "bad token signature" in first.stderr
    assert (tmp_path / ".data" / "keys" / "dev_ed25519.pem").exists()
    again = token()  # the key exists now: whoever made it, nothing new to say
    assert again.returncode == 0 and again.stderr == ""


def test_every_command_says_what_it_does():
    """`catalog COMMAND --help` starts with a description line, for every command and group."""
    import argparse

    from catalog.cli import build_parser

    def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield (*path, name), sub
                    yield from commands(sub, (*path, name))

    found = list(commands(build_parser()))
    assert len(found) > 30
    missing = [" ".join(path) for path, sub in found if not (sub.description or "").strip()]
    assert missing == []
