"""The maintenance step of memory pipelines, against a live server whose upstream model is a
scripted OpenAI-compatible server: a run with `maintain` reviews the memories of its sessions'
scopes and merges, splits and supersedes them through tools that write the states and the lineage
as the pipeline's creator; a dry run writes nothing and reports what it would do; a held store is
left alone; a refused or bad tool call is told to the model and the step goes on."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from rest import UC, bearer
from scripted_llm import Call, Reply

AGENTS = "/api/2.0/agents"
DEADLINE = 90.0  # seconds a run may take before a test gives up (no timing is asserted)


@pytest.fixture(scope="module")
def live(database_url, tmp_path_factory, live_server, llm):
    server = live_server(
        tmp_path_factory.mktemp("maintenance"),
        env={
            "CATALOG_DATABASE_URL": database_url,
            "CATALOG_LLM_BASE_URL": llm.url,
            "CATALOG_LLM_MAX_RETRIES": "0",
        },
    )
    try:
        yield server
    finally:
        server.stop()


MEMORIES = {
    "/tea.md": "likes green tea",
    "/tea-morning.md": "drinks green tea every morning",
    "/notes.md": "allergic to peanuts\nworks at the harbour office\nplays the cello on sundays",
    "/city-old.md": "lives in Paris",
    "/city.md": "moved to Berlin in May",
}


def setup(live, name: str, actor: str = "ann", **policy: Any) -> tuple[str, str]:
    """A session store with one session of `actor`, a memory store holding MEMORIES in that
    scope, and a pipeline between them; (the pipeline's name, the memory store's full name)."""
    h = bearer(live)
    r = httpx.post(
        f"{live.url}{AGENTS}/session-stores", headers=h, params={"session_store_name": f"{name}-s"}, json={}
    )
    assert r.status_code == 200, r.text
    r = httpx.post(
        f"{live.url}{AGENTS}/session-stores/{name}-s/sessions",
        headers=h,
        params={"session_id": "one"},
        json={"actor_id": actor},
    )
    assert r.status_code == 200, r.text
    r = httpx.post(
        f"{live.url}{AGENTS}/session-stores/{name}-s/sessions/one/items:append",
        headers=h,
        json={"items": [{"data": {"role": "user", "content": "hello"}}]},
    )
    assert r.status_code == 200, r.text
    r = httpx.post(
        f"{live.url}{AGENTS}/memory-stores",
        headers=h,
        params={"managed_memory_store_id": f"{name}-m"},
        json={},
    )
    assert r.status_code == 200, r.text
    for path, text in MEMORIES.items():
        r = httpx.post(
            f"{live.url}{AGENTS}/memory-stores/{name}-m/entries",
            headers=h,
            json={"actor_id": actor, "path": path, "content": text},
        )
        assert r.status_code == 200, r.text
    body = {
        "session_store": f"{name}-s",
        "memory_store": f"{name}-m",
        "dreamer_policy": {"model": "distiller", **policy},
    }
    r = httpx.post(f"{live.url}{AGENTS}/memory-pipelines", headers=h, json=body)
    assert r.status_code == 200, r.text
    return r.json()["name"], f"main.default.{name}-m"


def run(live, pipeline: str, **body: Any) -> dict:
    r = httpx.post(f"{live.url}{AGENTS}/{pipeline}/run", headers=bearer(live), json=body)
    assert r.status_code == 200, r.text
    return run_named(live, r.json()["name"])


def run_named(live, name: str) -> dict:
    """The run once it ended, polling with a deadline."""
    deadline = time.monotonic() + DEADLINE
    while True:
        got = httpx.get(f"{live.url}{AGENTS}/{name}", headers=bearer(live)).json()
        assert "state" in got, (got, live.problems())
        if got["state"] in ("SUCCEEDED", "FAILED"):
            return got
        assert time.monotonic() < deadline, f"run did not end: {got}\n{live.problems()}"
        time.sleep(0.2)


def entry(live, store: str, path: str, scope: str = "ann") -> dict:
    r = httpx.get(
        f"{live.url}{UC}/memory-stores/{store}/entries:get",
        headers=bearer(live),
        params={"scope": scope, "path": path},
    )
    assert r.status_code == 200, r.text
    return r.json()


def active(live, store: str, scope: str = "ann") -> dict[str, str]:
    r = httpx.get(
        f"{live.url}{UC}/memory-stores/{store}/entries", headers=bearer(live), params={"scope": scope}
    )
    assert r.status_code == 200, r.text
    return {e["path"]: e.get("state", "active") for e in r.json()["entries"]}


CONSOLIDATE = [
    Reply("nothing to extract"),  # the session's extraction
    Call(
        "merge_memories",
        {
            "paths": ["/tea.md", "/tea-morning.md"],
            "into": {"path": "/drinks.md", "description": "drinks", "contents": "green tea, every morning"},
        },
    ),
    Call(
        "split_memory",
        {
            "path": "/notes.md",
            "parts": [
                {"path": "/health.md", "contents": "allergic to peanuts"},
                {"path": "/work.md", "contents": "works at the harbour office"},
                {"path": "/hobbies.md", "contents": "plays the cello on sundays"},
            ],
        },
    ),
    Call("supersede_memory", {"path": "/city-old.md", "by": "/city.md"}),
    Reply("merged the tea memories, split the notes, superseded the old city"),
]


def test_a_run_merges_splits_and_supersedes_with_lineage(live, llm):
    pipeline, store = setup(live, "mt-one", maintain=True)
    got = httpx.get(f"{live.url}{AGENTS}/{pipeline}", headers=bearer(live)).json()
    assert got["dreamer_policy"]["maintain"] is True
    llm.script(*CONSOLIDATE)
    done = run(live, pipeline)
    assert done["state"] == "SUCCEEDED" and done["maintain"] is True, done
    report = done["maintenance"]
    assert (report["dry_run"], report["scopes_reviewed"]) == (False, 1), report
    assert (report["merged"], report["split"], report["superseded"]) == (2, 1, 1), report
    assert [a["action"] for a in report["actions"]] == ["merged", "split", "superseded"]
    # the model read the scope's memories, their contents included
    listing = llm.requests[1]["messages"][1]["content"]
    assert "/notes.md" in listing and "plays the cello on sundays" in listing

    assert active(live, store) == {
        "/city.md": "active",
        "/drinks.md": "active",
        "/health.md": "active",
        "/hobbies.md": "active",
        "/work.md": "active",
    }
    for path in ("/tea.md", "/tea-morning.md"):
        got = entry(live, store, path)
        assert got["state"] == "merged" and got["superseded_by"]["path"] == "/drinks.md", got
    notes = entry(live, store, "/notes.md")
    assert notes["state"] == "superseded" and notes["superseded_by"]["path"] == "/health.md"
    old = entry(live, store, "/city-old.md")
    assert old["state"] == "superseded" and old["superseded_by"]["path"] == "/city.md"
    drinks = entry(live, store, "/drinks.md")
    assert drinks["contents"] == "green tea, every morning" and drinks["created_by"] == "admin"
    # lineage: the merged memory is derived from both sources, each part from the original
    r = httpx.get(
        f"{live.url}{UC}/system/lineage",
        headers=bearer(live),
        params={"securable_full_name": store, "scope": "ann", "path": "/drinks.md", "direction": "upstream"},
    )
    assert r.status_code == 200, r.text
    assert {e["source"]["path"] for e in r.json()["edges"]} == {"/tea.md", "/tea-morning.md"}
    r = httpx.get(
        f"{live.url}{UC}/system/lineage",
        headers=bearer(live),
        params={"securable_full_name": store, "scope": "ann", "path": "/notes.md", "direction": "downstream"},
    )
    assert {e["target"]["path"] for e in r.json()["edges"]} == {"/health.md", "/work.md", "/hobbies.md"}
    # every tool call is an audit event of its own, as the pipeline's creator
    r = httpx.get(
        f"{live.url}{UC}/system/audit",
        headers=bearer(live),
        params={"securable_full_name": store, "page_size": 1000, "order": "asc"},
    )
    request_id = f"run-{_run_id(live, done)}"
    events = [e for e in r.json()["events"] if e["request_id"] == request_id]
    tools = [
        e["request_params"].get("tool") for e in events if e["request_params"].get("step") == "maintenance"
    ]
    assert tools == ["merge_memories", "split_memory", "supersede_memory"], events
    phases = [e["request_params"].get("phase") for e in events if e["action_name"] == "pipelines.run"]
    assert phases == ["start", "maintain", "end"]
    assert all(e["principal"] == "admin" for e in events)


def _run_id(live, run: dict) -> str:
    """The run's id (its audit events' request id is run-<id>), from the database via the audit
    log: the run's first event names it in its parameters."""
    r = httpx.get(
        f"{live.url}{UC}/system/audit",
        headers=bearer(live),
        params={"action_name": "pipelines.run", "page_size": 1000},
    )
    for event in r.json()["events"]:
        if event["request_params"].get("run") == run["name"]:
            return str(event["request_id"]).removeprefix("run-")
    raise AssertionError(f"no event of {run['name']}")


def test_a_dry_run_writes_nothing_and_reports_what_it_would_do(live, llm):
    pipeline, store = setup(live, "mt-dry")
    llm.script(*CONSOLIDATE)
    done = run(live, pipeline, maintain=True, dry_run=True)
    report = done["maintenance"]
    assert report["dry_run"] is True and (report["merged"], report["split"], report["superseded"]) == (
        2,
        1,
        1,
    )
    assert [a.get("written") for a in report["actions"]][:2] == [
        ["/drinks.md"],
        ["/health.md", "/work.md", "/hobbies.md"],
    ]
    assert active(live, store) == {path: "active" for path in MEMORIES}
    assert entry(live, store, "/tea.md")["etag"] == "1"


def test_without_maintain_a_run_does_no_maintenance(live, llm):
    pipeline, _ = setup(live, "mt-none")
    llm.script(Reply("nothing"))
    done = run(live, pipeline)
    assert done["state"] == "SUCCEEDED" and "maintenance" not in done and not done.get("maintain")
    assert len(llm.requests) == 1  # the extraction only
    r = httpx.post(f"{live.url}{AGENTS}/{pipeline}/run", headers=bearer(live), json={"dry_run": True})
    assert r.status_code == 400 and r.json()["details"][0]["field"] == "dry_run", r.text


def test_a_held_store_is_left_alone(live, llm):
    pipeline, store = setup(live, "mt-held", maintain=True)
    r = httpx.patch(f"{live.url}{UC}/memory-stores/{store}", headers=bearer(live), json={"legal_hold": True})
    assert r.status_code == 200, r.text
    llm.script(Reply("nothing to extract"))
    done = run(live, pipeline)
    assert done["maintenance"]["held"] is True and done["maintenance"]["actions"] == [], done
    assert len(llm.requests) == 1  # no model call for the step
    assert active(live, store) == {path: "active" for path in MEMORIES}


def test_bad_and_refused_tool_calls_are_told_to_the_model(live, llm):
    pipeline, store = setup(live, "mt-bad", maintain=True)
    llm.script(
        Reply("nothing to extract"),
        Call("merge_memories", {"paths": ["/tea.md"], "into": {"path": "/x.md", "contents": "x"}}),
        Call("supersede_memory", {"path": "/nope.md", "by": "/city.md"}),
        Call(
            "split_memory",
            {
                "path": "/notes.md",
                "parts": [{"path": "/city.md", "contents": "a"}, {"path": "/b.md", "contents": "b"}],
            },
        ),
        Call("drop_everything", {}),
        Call("supersede_memory", {"path": "/city-old.md", "by": "/city.md"}),
        Reply("done"),
    )
    done = run(live, pipeline)
    report = done["maintenance"]
    assert (report["merged"], report["split"], report["superseded"]) == (0, 0, 1), report
    answers = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert "error" in answers[0] and "paths" in answers[0]  # too few paths
    assert "no memory at /nope.md" in answers[1]
    assert "already exists at /city.md" in answers[2]
    assert "no tool named 'drop_everything'" in answers[3]
    assert "superseded" in answers[4] and "error" not in answers[4]
    assert entry(live, store, "/city-old.md")["state"] == "superseded"
    assert active(live, store)["/notes.md"] == "active"


def _with_bob(live, name: str) -> tuple[str, str]:
    """`setup`, plus a session of bob's and an old memory of his: (pipeline, memory store)."""
    h = bearer(live)
    pipeline, store = setup(live, name)
    r = httpx.post(
        f"{live.url}{AGENTS}/session-stores/{name}-s/sessions",
        headers=h,
        params={"session_id": "two"},
        json={"actor_id": "bob"},
    )
    assert r.status_code == 200, r.text
    r = httpx.post(
        f"{live.url}{AGENTS}/session-stores/{name}-s/sessions/two/items:append",
        headers=h,
        json={"items": [{"data": {"role": "user", "content": "hi"}}]},
    )
    assert r.status_code == 200, r.text
    for path, text in (("/city-old.md", "lives in Rome"), ("/city.md", "moved to Oslo")):
        r = httpx.post(
            f"{live.url}{AGENTS}/memory-stores/{name}-m/entries",
            headers=h,
            json={"actor_id": "bob", "path": path, "content": text},
        )
        assert r.status_code == 200, r.text
    return pipeline, store


def _grant(live, changes: dict[str, list[dict[str, Any]]]) -> None:
    for name, change in changes.items():
        kind = "catalog" if name == "main" else "memory_store"
        r = httpx.patch(
            f"{live.url}{UC}/permissions/{kind}/{name}", headers=bearer(live), json={"changes": change}
        )
        assert r.status_code == 200, r.text


def test_a_creator_limited_to_some_scopes_has_no_pipeline_and_its_runs_stop(live, llm):
    """A run reaches every scope: a principal whose WRITE is limited to scope `ann` may not
    create a pipeline; one whose grant is narrowed after creating it has its runs fail, naming
    it, before any session is read or memory reviewed."""
    pipeline, store = _with_bob(live, "mt-mia")
    r = httpx.delete(f"{live.url}{AGENTS}/{pipeline}", headers=bearer(live))
    assert r.status_code == 200, r.text
    _grant(
        live,
        {
            "main": [{"principal": "mia", "add": ["USE_CATALOG", "USE_SCHEMA"]}],
            "main.default.mt-mia-s": [{"principal": "mia", "add": ["READ_MEMORY_STORE"]}],
            store: [
                {"principal": "mia", "add": ["READ_MEMORY_STORE"]},
                {"principal": "mia", "add": ["WRITE_MEMORY_STORE"], "scopes": ["ann"]},
            ],
        },
    )
    body = {
        "session_store": "mt-mia-s",
        "memory_store": "mt-mia-m",
        "dreamer_policy": {"model": "distiller", "maintain": True},
    }
    r = httpx.post(f"{live.url}{AGENTS}/memory-pipelines", headers=bearer(live, "mia"), json=body)
    assert r.status_code == 403 and "every scope" in r.json()["message"], r.text

    # with WRITE in every scope mia creates it; then her WRITE is narrowed to ann again
    _grant(live, {store: [{"principal": "mia", "add": ["WRITE_MEMORY_STORE"]}]})
    r = httpx.post(f"{live.url}{AGENTS}/memory-pipelines", headers=bearer(live, "mia"), json=body)
    assert r.status_code == 200, r.text
    created = r.json()["name"]
    _grant(live, {store: [{"principal": "mia", "remove": ["WRITE_MEMORY_STORE"]}]})
    _grant(live, {store: [{"principal": "mia", "add": ["WRITE_MEMORY_STORE"], "scopes": ["ann"]}]})
    llm.script(
        Reply("nothing to extract"), Call("supersede_memory", {"path": "/city-old.md", "by": "/city.md"})
    )
    r = httpx.post(f"{live.url}{AGENTS}/{created}/run", headers=bearer(live), json={})
    assert r.status_code == 200, r.text
    done = run_named(live, r.json()["name"])
    assert done["state"] == "FAILED" and "mia may not" in done["error"], done
    assert done["sessions_total"] == 0 and "maintenance" not in done, done
    assert llm.requests == []  # nothing reached the model
    assert entry(live, store, "/city-old.md", scope="bob")["state"] == "active"
    assert entry(live, store, "/city-old.md")["state"] == "active"


def test_a_report_is_held_to_the_readers_scopes(live, llm):
    """A reader of scope `ann` only reads a run's maintenance report without bob's actions, paths
    or failure; a reader of every scope reads it whole."""
    pipeline, store = _with_bob(live, "mt-rep")
    _grant(
        live,
        {
            "main": [{"principal": "rita", "add": ["USE_CATALOG", "USE_SCHEMA"]}],
            store: [{"principal": "rita", "add": ["READ_MEMORY_STORE"], "scopes": ["ann"]}],
        },
    )
    llm.script(
        Reply("nothing to extract"),  # ann's session
        Reply("nothing to extract"),  # bob's
        Call("supersede_memory", {"path": "/city-old.md", "by": "/city.md"}),  # ann's review
        Reply("done"),
        Call("supersede_memory", {"path": "/city-old.md", "by": "/city.md"}),  # bob's review
        Call("merge_memories", {"paths": ["/city.md", "/nope.md"], "into": {"path": "/x", "contents": "x"}}),
        Reply("done"),
    )
    done = run(live, pipeline, maintain=True)
    whole = done["maintenance"]
    assert [a["scope"] for a in whole["actions"]] == ["ann", "bob"], whole
    assert whole["scopes_reviewed"] == 2 and whole["superseded"] == 2 and not whole.get("partial")

    r = httpx.get(f"{live.url}{AGENTS}/{done['name']}", headers=bearer(live, "rita"))
    assert r.status_code == 200, r.text
    held = r.json()["maintenance"]
    assert held["partial"] is True and [a["scope"] for a in held["actions"]] == ["ann"], held
    assert (held["scopes_reviewed"], held["superseded"], held["merged"]) == (1, 1, 0), held
    assert "bob" not in r.text
    r = httpx.get(f"{live.url}{AGENTS}/{pipeline}/runs", headers=bearer(live, "rita"))
    assert r.status_code == 200, r.text
    assert r.json()["pipeline_runs"][0]["maintenance"] == held and "bob" not in r.text
