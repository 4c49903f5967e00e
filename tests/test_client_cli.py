"""The `catalog` command's remote commands, run as a person runs them (a subprocess) against a
running server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
from conftest import free_port
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings

REPO = Path(__file__).resolve().parents[1]


def token_for(live, sub: str) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub)


def catalog(live, *args: str, who: str | None = "admin", **env: str) -> subprocess.CompletedProcess[str]:
    """`catalog ARGS` with CATALOG_URL set to the server and CATALOG_TOKEN to `who`'s token."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    environment["CATALOG_URL"] = live.url
    if who is not None:
        environment["CATALOG_TOKEN"] = token_for(live, who)
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args],
        env=environment,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def failed(result: subprocess.CompletedProcess[str], code: str) -> str:
    """The one error line's message, after checking that the command failed with `code`."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.stderr
    prefix = f"error: {code}: "
    assert result.stderr.startswith(prefix), result.stderr
    return result.stderr[len(prefix) :].strip()


def rows(table: str) -> list[list[str]]:
    """A plain table's rows (after its header), cells split on runs of two spaces or more."""
    import re

    lines = table.strip("\n").splitlines()
    return [re.split(r"\s{2,}", line.strip()) for line in lines[1:]]


def fields(text: str) -> dict[str, str]:
    """`name: value` lines."""
    return {
        name.strip(): value.strip() for name, _, value in (line.partition(":") for line in text.splitlines())
    }


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_a_new_admin_grants_a_team_read_access_to_a_store(live):
    cat = unique("c")
    store = f"{cat}.s.store"
    team = unique("data-team")
    ok(catalog(live, "catalogs", "create", cat))
    ok(catalog(live, "schemas", "create", f"{cat}.s"))
    shown = ok(catalog(live, "stores", "create", store, "--description", "what support learned"))
    assert fields(shown)["memory store"] == store and fields(shown)["description"] == "what support learned"
    assert [r[0] for r in rows(ok(catalog(live, "stores", "list", "--catalog", cat, "--schema", "s")))] == [
        store
    ]
    assert fields(ok(catalog(live, "groups", "create", team, "--member", "alice")))["members"] == "alice"
    assert fields(ok(catalog(live, "groups", "show", team)))["group"] == team

    added = ok(catalog(live, "grants", "add", "memory_store", store, team, "READ_MEMORY_STORE"))
    assert rows(added) == [[team, "READ_MEMORY_STORE"]]
    assert rows(ok(catalog(live, "grants", "show", "memory_store", store))) == [[team, "READ_MEMORY_STORE"]]
    # to reach a store, the team needs USE on its catalog and schema (main.default has them for everyone)
    ok(catalog(live, "grants", "add", "catalog", cat, team, "USE_CATALOG"))
    ok(catalog(live, "grants", "add", "schema", f"{cat}.s", team, "use schema"))
    wrote = ok(
        catalog(
            live,
            "entries",
            "put",
            store,
            "--scope",
            "shared",
            "/faq.md",
            "--contents",
            "Refunds take five days.",
        )
    )
    assert wrote.startswith("wrote /faq.md in scope shared (etag ")

    got = ok(catalog(live, "entries", "get", store, "--scope", "shared", "/faq.md", who="alice"))
    head, _, contents = got.partition("\n\n")
    assert contents == "Refunds take five days.\n" and fields(head)["path"] == "/faq.md"
    found = rows(
        ok(
            catalog(
                live,
                "entries",
                "search",
                store,
                "--scope",
                "shared",
                "refunds",
                "--mode",
                "keyword",
                who="alice",
            )
        )
    )
    assert [r[1] for r in found] == ["/faq.md"] and 0 < float(found[0][0]) <= 1
    listed = rows(ok(catalog(live, "entries", "list", store, "--scope", "shared", who="alice")))
    assert [r[0] for r in listed] == ["/faq.md"]
    failed(
        catalog(live, "entries", "put", store, "--scope", "shared", "/x.md", "--contents", "no", who="alice"),
        "PERMISSION_DENIED",
    )
    why = rows(ok(catalog(live, "grants", "effective", "memory_store", store, "--principal", "alice")))
    assert [team, "READ_MEMORY_STORE", "this object"] in why

    assert rows(ok(catalog(live, "grants", "remove", "memory_store", store, team, "READ_MEMORY_STORE"))) == []
    assert rows(ok(catalog(live, "grants", "show", "memory_store", store))) == []
    failed(
        catalog(live, "entries", "get", store, "--scope", "shared", "/faq.md", who="alice"),
        "PERMISSION_DENIED",
    )


def test_grants_limited_to_scopes_on_the_command_line(live):
    """`--scope` limits what `grants add` grants (and takes patterns away with `grants remove`);
    `grants show` and `grants effective` print the patterns in a SCOPES column."""
    store = f"main.default.{unique('scoped')}"
    ann = unique("ann")
    ok(catalog(live, "stores", "create", store))
    for scope in ("team-a", "team-a:x", "team-b"):
        ok(
            catalog(
                live, "entries", "put", store, "--scope", scope, "/n.md", "--contents", f"note of {scope}"
            )
        )

    read, write = "READ_MEMORY_STORE", "WRITE_MEMORY_STORE"
    added = ok(
        catalog(
            live,
            "grants",
            "add",
            "memory_store",
            store,
            ann,
            read,
            write,
            "--scope",
            "team-a",
            "--scope",
            "team-a:*",
        )
    )
    assert added.splitlines()[0].split() == ["PRINCIPAL", "PRIVILEGES", "SCOPES"]
    assert rows(added) == [[ann, f"{read}, {write}", "team-a, team-a:*"]]
    ok(catalog(live, "grants", "add", "memory_store", store, ann, "MANAGE"))
    ok(catalog(live, "grants", "remove", "memory_store", store, ann, write, "--scope", "team-a:*"))
    # a row per limit: every scope (SCOPES empty) first
    assert rows(ok(catalog(live, "grants", "show", "memory_store", store))) == [
        [ann, "MANAGE"],
        [ann, write, "team-a"],
        [ann, read, "team-a, team-a:*"],
    ]
    shown = json.loads(
        ok(catalog(live, "grants", "show", "memory_store", store, "--principal", ann, "--json"))
    )
    assert shown["privilege_assignments"][0]["scopes"] == {read: ["team-a", "team-a:*"], write: ["team-a"]}
    why = rows(ok(catalog(live, "grants", "effective", "memory_store", store, "--principal", ann)))
    assert [ann, read, "this object", "team-a, team-a:*"] in why and [ann, "MANAGE", "this object"] in why

    # the limit holds: ann reads team-a's scopes, writes team-a only
    got = ok(catalog(live, "entries", "get", store, "--scope", "team-a:x", "/n.md", who=ann))
    assert got.endswith("note of team-a:x\n")
    assert "not scope 'team-b'" in failed(
        catalog(live, "entries", "get", store, "--scope", "team-b", "/n.md", who=ann), "PERMISSION_DENIED"
    )
    failed(
        catalog(live, "entries", "put", store, "--scope", "team-a:x", "/w.md", "--contents", "x", who=ann),
        "PERMISSION_DENIED",
    )
    # only READ and WRITE take patterns
    assert "may be limited to scopes" in failed(
        catalog(live, "grants", "add", "memory_store", store, ann, "MANAGE", "--scope", "team-a"),
        "INVALID_PARAMETER_VALUE",
    )
    # granted again without --scope: every scope
    ok(catalog(live, "grants", "add", "memory_store", store, ann, read))
    assert [ann, read, "this object"] in rows(
        ok(catalog(live, "grants", "effective", "memory_store", store, "--principal", ann))
    )
    assert "--scope PATTERN" in ok(catalog(live, "grants", "add", "-h"))


def test_json_prints_the_apis_answer_and_options_go_before_or_after(live):
    store = f"main.default.{unique('json')}"
    ok(catalog(live, "stores", "create", store))
    answer = httpx.get(
        f"{live.url}{UC}/memory-stores/{store}",
        headers={"Authorization": f"Bearer {token_for(live, 'admin')}"},
    ).json()
    assert json.loads(ok(catalog(live, "--json", "stores", "show", store))) == answer
    assert json.loads(ok(catalog(live, "stores", "show", store, "--json"))) == answer
    listed = json.loads(
        ok(catalog(live, "stores", "list", "--catalog", "main", "--schema", "default", "--json"))
    )
    assert store in [s["full_name"] for s in listed["memory_stores"]] and "next_page_token" not in listed

    # --url and --token win over the environment, before or after the subcommand
    elsewhere = {"CATALOG_URL": f"http://127.0.0.1:{free_port()}", "CATALOG_TOKEN": "not-a-token"}
    token = token_for(live, "admin")
    before = catalog(
        live, "--url", live.url, "--token", token, "--json", "stores", "show", store, **elsewhere
    )
    after = catalog(live, "stores", "show", store, "--url", live.url, "--token", token, "--json", **elsewhere)
    assert json.loads(ok(before)) == json.loads(ok(after)) == answer

    written = json.loads(
        ok(catalog(live, "--json", "entries", "put", store, "--scope", "u", "/a.md", "--contents", "hi"))
    )
    assert (written["path"], written["contents"], written["created_by"]) == ("/a.md", "hi", "admin")
    grants = json.loads(
        ok(catalog(live, "grants", "add", "memory_store", store, "team", "READ_MEMORY_STORE", "--json"))
    )
    assert grants == {"privilege_assignments": [{"principal": "team", "privileges": ["READ_MEMORY_STORE"]}]}


def test_metadata_and_filters_on_the_command_line(live):
    store = f"main.default.{unique('meta')}"
    ok(catalog(live, "stores", "create", store))
    for path, topic in (("/tea.md", "drinks"), ("/cake.md", "food")):
        ok(
            catalog(
                live,
                "entries",
                "put",
                store,
                "--scope",
                "u",
                path,
                "--contents",
                f"likes {path[1:-3]}",
                "--metadata",
                json.dumps({"topic": topic}),
            )
        )
    listed = json.loads(
        ok(catalog(live, "--json", "entries", "list", store, "--scope", "u", "--filter", '{"topic": "food"}'))
    )
    assert [(e["path"], e["metadata"]) for e in listed["entries"]] == [("/cake.md", {"topic": "food"})]
    found = json.loads(
        ok(
            catalog(
                live,
                "--json",
                "entries",
                "search",
                store,
                "--scope",
                "u",
                "likes",
                "--mode",
                "keyword",
                "--filter",
                '{"topic": "drinks"}',
            )
        )
    )
    assert [h["memory_entry"]["path"] for h in found["results"]] == ["/tea.md"]
    assert "not a JSON object" in failed(
        catalog(live, "entries", "list", store, "--scope", "u", "--filter", "[1]"), "USAGE"
    )


def test_forget_deletes_what_matches_a_query(live):
    store = f"main.default.{unique('forget')}"
    ok(catalog(live, "stores", "create", store))
    for path, contents in (
        ("/divorce.md", "The divorce from Sam was finalised in May"),
        ("/lawyer.md", "The divorce lawyer is Ms Park"),
        ("/food.md", "Likes ramen and green tea"),
    ):
        ok(catalog(live, "entries", "put", store, "--scope", "u", path, "--contents", contents))
    forget = ["entries", "forget", store, "--scope", "u", "the divorce"]

    dry = ok(catalog(live, *forget, "--dry-run"))
    head, table = dry.split("\n", 1)
    assert head == "would delete 2 entries in scope u (a dry run: nothing deleted)"
    assert sorted(row[0] for row in rows(table)) == ["/divorce.md", "/lawyer.md"]
    listed = json.loads(ok(catalog(live, "--json", "entries", "list", store, "--scope", "u")))
    assert len(listed["entries"]) == 3

    # a floor no entry reaches in keyword mode (none holds "papers"), then the real thing as JSON
    narrow = ["entries", "forget", store, "--scope", "u", "divorce papers", "--mode", "keyword"]
    assert ok(catalog(live, *narrow, "--min-score", "1")) == (
        "no entry in scope u matches the query: nothing deleted\n"
    )
    answer = json.loads(ok(catalog(live, "--json", *forget)))
    assert sorted(e["path"] for e in answer["deleted"]) == ["/divorce.md", "/lawyer.md"]
    assert answer["truncated"] is False and {e["scope"] for e in answer["deleted"]} == {"u"}
    listed = json.loads(ok(catalog(live, "--json", "entries", "list", store, "--scope", "u")))
    assert [e["path"] for e in listed["entries"]] == ["/food.md"]

    # what the server refuses, what the command refuses, and who may not
    assert "min_score" in failed(catalog(live, *forget, "--min-score", "0"), "INVALID_PARAMETER_VALUE")
    assert "--mode" in failed(catalog(live, *forget, "--mode", "fuzzy"), "USAGE")
    failed(catalog(live, *forget, who="mallory"), "PERMISSION_DENIED")


def test_every_failure_is_one_error_line_and_exit_1(live):
    store = f"main.default.{unique('err')}"
    ok(catalog(live, "stores", "create", store))
    assert "does not exist" in failed(
        catalog(live, "stores", "show", "main.default.nothing_here"), "NOT_FOUND"
    )
    # arguments the server refuses
    failed(
        catalog(live, "entries", "search", store, "--scope", "u", "q", "--top-k", "500"),
        "INVALID_PARAMETER_VALUE",
    )
    failed(catalog(live, "stores", "create", "main.default.bad!name"), "INVALID_PARAMETER_VALUE")
    failed(catalog(live, "grants", "add", "memory_store", store, "team", "FLY"), "INVALID_PARAMETER_VALUE")
    failed(catalog(live, "stores", "create", store), "ALREADY_EXISTS")
    # arguments the command refuses itself
    assert "--scope" in failed(catalog(live, "entries", "put", store, "/a.md"), "USAGE")
    failed(catalog(live, "stores", "create", "no_dots"), "USAGE")
    failed(catalog(live, "grants", "show", "table", "x"), "USAGE")
    failed(catalog(live, "audit", "events", "--since", "yesterday"), "USAGE")
    # who may not, who is not known, and no server at all
    failed(catalog(live, "stores", "show", store, who="mallory"), "PERMISSION_DENIED")
    failed(catalog(live, "stores", "show", store, "--token", "not-a-token"), "UNAUTHENTICATED")
    assert "CATALOG_TOKEN" in failed(catalog(live, "stores", "show", store, who=None), "UNAUTHENTICATED")
    # an empty --token (`--token "$ALICE"` with ALICE unset) is refused, not CATALOG_TOKEN's admin
    for where in (["--token", "", "stores", "show", store], ["stores", "show", store, "--token", ""]):
        assert "--token" in failed(catalog(live, *where), "USAGE")
    nowhere = f"http://127.0.0.1:{free_port()}"
    assert nowhere in failed(catalog(live, "stores", "show", store, "--url", nowhere), "CONNECTION_FAILED")


def test_audit_events_and_verify_on_the_server(live):
    who = unique("auditee")
    for _ in range(3):
        ok(catalog(live, "catalogs", "list", who=who))
    events = rows(ok(catalog(live, "audit", "events", "--principal", who)))
    assert len(events) == 3 and {e[2] for e in events} == {who}
    assert [int(e[0]) for e in events] == sorted((int(e[0]) for e in events), reverse=True)
    assert len(rows(ok(catalog(live, "audit", "events", "--principal", who, "--limit", "2")))) == 2
    assert len(rows(ok(catalog(live, "audit", "events", "--principal", who, "--since", "1h")))) == 3
    assert rows(ok(catalog(live, "audit", "events", "--principal", who, "--since", "2999-01-01"))) == []
    answer = json.loads(ok(catalog(live, "audit", "events", "--principal", who, "--json", "--limit", "0")))
    assert [e["seq"] for e in answer["events"]] == [int(e[0]) for e in events]
    action = answer["events"][0]["action_name"]
    assert len(rows(ok(catalog(live, "audit", "events", "--principal", who, "--action", action)))) == 3
    failed(catalog(live, "audit", "events", who=who), "PERMISSION_DENIED")

    verified = ok(catalog(live, "audit", "verify"))
    assert verified.startswith("ok ") and verified.endswith(" events\n")
    assert json.loads(ok(catalog(live, "audit", "verify", "--json")))["ok"] is True
