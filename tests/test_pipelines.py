"""Memory pipelines through the AgentKit transport (`databricks_agentkit._api_client`, what
`agentbricks memory pipeline` calls) against live servers whose upstream model is a scripted
OpenAI-compatible server: pipelines are created, read, listed, updated and deleted; a run extracts
the sessions that changed and skips the others; one run at a time; a failing session is counted
and the run goes on; a crashed run is resumed by another process without redoing what was done,
and a run stopped half-way through a session counts, once resumed, every entry it wrote;
runs act, and are audited, as the pipeline's creator; a scheduled pipeline runs by itself."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks_agentbricks.errors import AgentCliError
from databricks_agentkit import AgentKitClient
from databricks_agentkit._api_client import _AgentBricksApiClient
from rest import UC
from scripted_llm import Call, Fail, Reply, ScriptedLLM

from catalog.auth import mint_dev_token
from catalog.settings import Settings

PIPELINES = "/api/2.0/agents/memory-pipelines"
DEADLINE = 90.0  # seconds a run may take to finish before a test gives up (no timing is asserted)
# what `agentbricks memory pipeline run` looks for in an ABORTED error
ACTIVE_RUN = re.compile(r"memory-pipelines/[^/\s]+/runs/[0-9]+")


def _server(live_server, data_dir, database_url: str, llm_url: str) -> Any:
    # no CATALOG_LLM_MODEL: each pipeline names its model (dreamer_policy.model)
    return live_server(
        data_dir,
        env={
            "CATALOG_DATABASE_URL": database_url,
            "CATALOG_LLM_BASE_URL": llm_url,
            "CATALOG_LLM_MAX_RETRIES": "0",
        },
    )


@pytest.fixture(scope="module")
def live(database_url, tmp_path_factory, live_server, llm):
    server = _server(live_server, tmp_path_factory.mktemp("pipelines"), database_url, llm.url)
    try:
        yield server
    finally:
        server.stop()


def token(live, sub: str) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub)


def kit(live, sub: str = "admin") -> AgentKitClient:
    return AgentKitClient(WorkspaceClient(host=live.url, token=token(live, sub), auth_type="pat"))


def api(live, sub: str = "admin") -> _AgentBricksApiClient:
    """The transport the `agentbricks memory pipeline` commands use."""
    return _AgentBricksApiClient(
        workspace_client=WorkspaceClient(host=live.url, token=token(live, sub), auth_type="pat")
    )


def headers(live, sub: str = "admin") -> dict[str, str]:
    return {"Authorization": f"Bearer {token(live, sub)}"}


def memories(live, store: str, actor: str) -> dict[str, dict]:
    r = httpx.get(
        f"{live.url}/api/2.0/agents/memory-stores/{store}/entries",
        headers=headers(live),
        params={"actor_id": actor},
    )
    assert r.status_code == 200, r.text
    return {m["path"]: m for m in r.json().get("managed_memory_entries", [])}


def stores(live, name: str, sessions: dict[str, str] | None = None) -> tuple[Any, Any]:
    """A session store `<name>-sessions` holding one session per (id: actor) with one message,
    and a memory store `<name>-memory`."""
    client = kit(live)
    session_store = client.session_stores.create(f"{name}-sessions")
    memory_store = client.memory_stores.create(f"{name}-memory")
    for sid, actor in (sessions or {}).items():
        session_store.add(actor_id=actor, session_id=sid).append_items(
            [{"role": "user", "content": f"{actor} says: remember {sid}."}]
        )
    return session_store, memory_store


def pipeline(live, name: str, sub: str = "admin", **policy: Any) -> dict:
    return api(live, sub).create_memory_pipeline(
        session_store=f"{name}-sessions", memory_store=f"{name}-memory", model="distiller", **policy
    )


def save(path: str) -> list[Any]:
    """One session's extraction: the model saves one memory, then says it is done."""
    return [
        Call("save_memory", {"path": path, "description": path, "contents": f"about {path}"}),
        Reply("done"),
    ]


def wait_for(live, run_name: str, sub: str = "admin", done: Callable[[dict], bool] | None = None) -> dict:
    """The run once it ended (or `done` says so), polling with a deadline."""
    finished = done or (lambda run: run["state"] in ("SUCCEEDED", "FAILED"))
    deadline = time.monotonic() + DEADLINE
    while True:
        run = api(live, sub).get_memory_pipeline_run(run_name)
        if finished(run):
            return run
        assert time.monotonic() < deadline, f"run did not end: {run}\n{live.problems()}"
        time.sleep(0.2)


def run_to_end(live, name: str, sub: str = "admin") -> dict:
    started = api(live, sub).run_memory_pipeline(name)
    assert started["state"] in ("PENDING", "RUNNING"), started
    return wait_for(live, started["name"], sub)


def counts(run: dict) -> tuple[int, int, int, int, int]:
    return (
        run["sessions_total"],
        run["sessions_extracted"],
        run["sessions_skipped"],
        run["sessions_failed"],
        run["entries_written"],
    )


def audit_events(live, **params: Any) -> list[dict]:
    r = httpx.get(f"{live.url}{UC}/system/audit", headers=headers(live), params={"page_size": 200, **params})
    assert r.status_code == 200, r.text
    return r.json()["events"]


def sql(database_url: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    async def go() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(database_url)
        try:
            return await conn.fetch(statement, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


# --- the pipeline resource ---------------------------------------------------------------------------


def test_a_pipeline_is_created_read_listed_updated_and_deleted(live):
    stores(live, "crud")
    client = api(live)
    created = client.create_memory_pipeline(
        session_store="crud-sessions",
        memory_store="memory-stores/crud-memory",
        model="distiller",
        display_name="Nightly",
        instructions="Keep it short.",
        trigger="manual",
    )
    assert re.fullmatch(r"memory-pipelines/[0-9a-f-]{36}", created["name"])
    assert created["session_store"] == "session-stores/crud-sessions"
    assert created["memory_store"] == "memory-stores/crud-memory"
    assert created["display_name"] == "Nightly" and created["creator"] == "admin"
    assert created["dreamer_policy"] == {
        "model": "distiller",
        "instructions": "Keep it short.",
        "trigger": "MANUAL_ONLY",
        "enabled": False,
    }
    assert created["create_time"].endswith("Z") and created["etag"]
    assert client.get_memory_pipeline(created["name"]) == created
    pipeline_id = created["name"].split("/")[1]
    assert client.get_memory_pipeline(pipeline_id) == created  # a bare id works too
    assert created["name"] in [p["name"] for p in client.list_memory_pipelines()["memory_pipelines"]]

    # one pipeline per (session store, memory store)
    with pytest.raises(AgentCliError) as twice:
        client.create_memory_pipeline(session_store="crud-sessions", memory_store="crud-memory")
    assert twice.value.error_code == "ALREADY_EXISTS"

    # what `agentbricks memory pipeline resume` / `update --model ""` send
    resumed = client.update_memory_pipeline(created["name"], trigger="scheduled")
    assert (
        resumed["dreamer_policy"]["trigger"] == "SCHEDULED" and resumed["dreamer_policy"]["enabled"] is True
    )
    assert resumed["etag"] != created["etag"] and resumed["display_name"] == "Nightly"
    cleared = client.update_memory_pipeline(created["name"], model="", display_name="Hourly")
    assert "model" not in cleared["dreamer_policy"] and cleared["display_name"] == "Hourly"
    assert cleared["dreamer_policy"]["instructions"] == "Keep it short."  # not in the mask: kept
    paused = client.update_memory_pipeline(created["name"], trigger="manual")
    assert paused["dreamer_policy"] == {
        "instructions": "Keep it short.",
        "trigger": "MANUAL_ONLY",
        "enabled": False,
    }
    # the whole policy in the mask: what the body leaves out is cleared
    r = httpx.patch(
        f"{live.url}{PIPELINES}/{pipeline_id}",
        headers=headers(live),
        params={"update_mask": "dreamer_policy"},
        json={"dreamer_policy": {"trigger": "TRIGGER_UNSPECIFIED"}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["dreamer_policy"] == {"trigger": "MANUAL_ONLY", "enabled": False}
    # a stale etag is refused
    r = httpx.patch(
        f"{live.url}{PIPELINES}/{pipeline_id}",
        headers=headers(live),
        json={"display_name": "x", "etag": created["etag"]},
    )
    assert r.status_code == 409 and r.json()["error_code"] == "ABORTED", r.text
    current = client.get_memory_pipeline(pipeline_id)
    r = httpx.patch(
        f"{live.url}{PIPELINES}/{pipeline_id}",
        headers=headers(live),
        json={"display_name": "Weekly", "etag": current["etag"]},
    )
    assert r.status_code == 200 and r.json()["display_name"] == "Weekly", r.text

    client.delete_memory_pipeline(created["name"])
    with pytest.raises(AgentCliError) as gone:
        client.get_memory_pipeline(created["name"])
    assert gone.value.error_code == "NOT_FOUND"
    assert created["name"] not in [p["name"] for p in client.list_memory_pipelines()["memory_pipelines"]]
    # the pair is free again
    again = client.create_memory_pipeline(session_store="crud-sessions", memory_store="crud-memory")
    assert again["name"] != created["name"] and again["dreamer_policy"]["trigger"] == "MANUAL_ONLY"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"session_store": "s-sessions", "memory_store": "s-memory", "color": "red"}, "color"),
        ({"memory_store": "s-memory"}, "session_store"),
        ({"session_store": "s-sessions", "memory_store": "memory-stores/Bad_Id"}, "memory_store"),
        ({"session_store": "session-stores/a/b", "memory_store": "s-memory"}, "session_store"),
        ({"session_store": "s-sessions", "memory_store": "s-memory", "display_name": 3}, "display_name"),
        (
            {
                "session_store": "s-sessions",
                "memory_store": "s-memory",
                "dreamer_policy": {"trigger": "HOURLY"},
            },
            "dreamer_policy.trigger",
        ),
        (
            {"session_store": "s-sessions", "memory_store": "s-memory", "dreamer_policy": {"enabled": True}},
            "enabled",
        ),
        (
            {"session_store": "s-sessions", "memory_store": "s-memory", "dreamer_policy": {"model": "a\nb"}},
            "dreamer_policy.model",
        ),
        (
            {
                "session_store": "s-sessions",
                "memory_store": "s-memory",
                "dreamer_policy": {"instructions": "x" * 20000},
            },
            "dreamer_policy.instructions",
        ),
    ],
)
def test_a_bad_pipeline_is_400_naming_the_field(live, body, field):
    r = httpx.post(f"{live.url}{PIPELINES}", headers=headers(live), json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert field in r.json()["message"], r.text


def test_a_bad_update_or_reference_is_refused(live):
    stores(live, "bad")
    created = pipeline(live, "bad")
    url = f"{live.url}{PIPELINES}/{created['name'].split('/')[1]}"
    for params, body, field in [
        ({"update_mask": "owner"}, {"display_name": "x"}, "update_mask"),
        ({}, {}, "update_mask"),
        ({}, {"name": "memory-pipelines/other", "display_name": "x"}, "name"),
        ({}, {"dreamer_policy": {"trigger": "SOMETIMES"}}, "dreamer_policy.trigger"),
    ]:
        r = httpx.patch(url, headers=headers(live), params=params, json=body)
        assert r.status_code == 400 and field in r.json()["message"], (body, r.text)
    # a missing store, pipeline or run is NOT_FOUND
    for body in (
        {"session_store": "no-such-sessions", "memory_store": "bad-memory"},
        {"session_store": "bad-sessions", "memory_store": "no-such-memory"},
    ):
        r = httpx.post(f"{live.url}{PIPELINES}", headers=headers(live), json=body)
        assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND", r.text
    for path in ("/00000000-0000-4000-8000-000000000000", "/not-an-id", "/not-an-id/runs"):
        r = httpx.get(f"{live.url}{PIPELINES}{path}", headers=headers(live))
        assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND", r.text
    for run in ("1", "x"):
        r = httpx.get(f"{url}/runs/{run}", headers=headers(live))
        assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND", r.text
    # a memory store (or session store) of the other kind is not found either
    r = httpx.post(
        f"{live.url}{PIPELINES}",
        headers=headers(live),
        json={"session_store": "bad-memory", "memory_store": "bad-memory"},
    )
    assert r.status_code == 404, r.text


def test_pipelines_are_listed_in_pages(live):
    names = []
    for i in range(3):
        stores(live, f"page{i}")
        names.append(pipeline(live, f"page{i}")["name"])
    seen: list[str] = []
    token_ = None
    while True:
        page = api(live).list_memory_pipelines(page_size=1, page_token=token_)
        assert len(page["memory_pipelines"]) <= 1
        seen += [p["name"] for p in page["memory_pipelines"]]
        token_ = page.get("next_page_token")
        if not token_:
            break
    assert [n for n in seen if n in names] == names  # in creation order, each once
    assert len(seen) == len(set(seen))


# --- runs ----------------------------------------------------------------------------------------------


def test_a_run_extracts_changed_sessions_and_skips_unchanged_ones(live, llm):
    session_store, _ = stores(live, "daily", {"s1": "ann", "s2": "bob"})
    created = pipeline(live, "daily", instructions="Only durable facts.")
    llm.script(*save("/memories/ann.md"), *save("/memories/bob.md"))
    first = run_to_end(live, created["name"])
    assert first["state"] == "SUCCEEDED" and "error" not in first, first
    assert first["name"] == f"{created['name']}/runs/1" and first["trigger"] == "MANUAL"
    assert counts(first) == (2, 2, 0, 0, 2)
    assert first["start_time"] and first["end_time"] and first["create_time"]
    assert list(memories(live, "daily-memory", "ann")) == ["/memories/ann.md"]
    assert list(memories(live, "daily-memory", "bob")) == ["/memories/bob.md"]
    assert memories(live, "daily-memory", "ann")["/memories/ann.md"]["source_type"] == (
        "MANAGED_MEMORY_ENTRY_SOURCE_TYPE_DREAMER"
    )
    # the pipeline's model and instructions, each session's transcript, in creation order
    requests = llm.requests
    assert len(requests) == 4 and {r["model"] for r in requests} == {"distiller"}
    assert requests[0]["messages"][0]["content"].endswith("Only durable facts.")
    assert "ann says: remember s1." in requests[0]["messages"][1]["content"]
    assert "bob says: remember s2." in requests[2]["messages"][1]["content"]

    # nothing changed: no model call, both skipped
    second = run_to_end(live, created["name"])
    assert second["state"] == "SUCCEEDED" and counts(second) == (2, 0, 2, 0, 0)
    assert len(llm.requests) == 4

    # one session goes on: only it is read again
    session_store.get("s2").append_items([{"role": "user", "content": "bob moved to Oslo."}])
    llm.script(*save("/memories/bob-home.md"))
    third = run_to_end(live, created["name"])
    assert counts(third) == (2, 1, 1, 0, 1)
    assert "bob moved to Oslo." in llm.requests[4]["messages"][1]["content"]

    runs = api(live).list_memory_pipeline_runs(created["name"])["pipeline_runs"]
    assert [r["name"] for r in runs] == [f"{created['name']}/runs/{n}" for n in (3, 2, 1)]  # newest first
    page = api(live).list_memory_pipeline_runs(created["name"], page_size=2)
    assert len(page["pipeline_runs"]) == 2 and page["next_page_token"]
    rest = api(live).list_memory_pipeline_runs(created["name"], page_token=page["next_page_token"])
    assert [r["name"] for r in rest["pipeline_runs"]] == [first["name"]] and "next_page_token" not in rest


def test_a_second_run_while_one_is_active_is_aborted_naming_it(live, llm):
    stores(live, "busy", {"s1": "cy"})
    created = pipeline(live, "busy")
    reached, release = threading.Event(), threading.Event()

    def slow(request: dict) -> Reply:
        reached.set()
        release.wait(DEADLINE)
        return Reply("nothing to keep")

    llm.script(slow)
    started = api(live).run_memory_pipeline(created["name"])
    try:
        assert reached.wait(DEADLINE), live.problems()
        assert api(live).get_memory_pipeline_run(started["name"])["state"] == "RUNNING"
        with pytest.raises(AgentCliError) as busy:
            api(live).run_memory_pipeline(created["name"])
        assert busy.value.error_code == "ABORTED"
        assert ACTIVE_RUN.search(busy.value.message).group(0) == started["name"]
    finally:
        release.set()
    done = wait_for(live, started["name"])
    assert done["state"] == "SUCCEEDED" and counts(done) == (1, 1, 0, 0, 0)
    # over: the next run may start
    assert run_to_end(live, created["name"])["name"].endswith("/runs/2")


def test_a_failing_session_is_counted_and_the_run_goes_on(live, llm):
    stores(live, "flaky", {"s1": "dee", "s2": "eve"})
    created = pipeline(live, "flaky")
    llm.script(Fail(status=500, message="model crashed"), *save("/memories/eve.md"))
    first = run_to_end(live, created["name"])
    assert first["state"] == "SUCCEEDED" and counts(first) == (2, 1, 0, 1, 1), first
    assert memories(live, "flaky-memory", "dee") == {}
    # the failed session was not marked: the next run reads it again (and only it)
    llm.script(*save("/memories/dee.md"))
    second = run_to_end(live, created["name"])
    assert counts(second) == (2, 1, 1, 0, 1)
    assert list(memories(live, "flaky-memory", "dee")) == ["/memories/dee.md"]


def test_a_run_whose_every_session_fails_is_failed_with_the_reason(live, llm):
    stores(live, "down", {"s1": "fay", "s2": "gus"})
    created = pipeline(live, "down")
    llm.script(Fail(status=503, message="model overloaded", times=2))
    run = run_to_end(live, created["name"])
    assert run["state"] == "FAILED" and counts(run) == (2, 0, 0, 2, 0)
    assert "model overloaded" in run["error"] and "session s1" in run["error"]
    # a pipeline with nothing to extract succeeds
    stores(live, "empty")
    assert run_to_end(live, pipeline(live, "empty")["name"])["state"] == "SUCCEEDED"


# --- governance and audit -----------------------------------------------------------------------------


def test_runs_act_as_the_creator_and_are_audited_as_them(live, llm):
    session_store, memory_store = stores(live, "owned", {"s1": "hal"})
    session_store.grant_permission("pipe-owner", permission="READ")
    memory_store.grant_permission("pipe-owner", permission="WRITE")
    created = pipeline(live, "owned", sub="pipe-owner")
    assert created["creator"] == "pipe-owner"
    llm.script(*save("/memories/hal.md"))
    run = run_to_end(live, created["name"], sub="admin")  # asked for by another: still acts as the creator
    assert run["state"] == "SUCCEEDED" and counts(run) == (1, 1, 0, 0, 1)

    events = [
        e for e in audit_events(live, principal="pipe-owner") if e["request_params"].get("run") == run["name"]
    ]
    assert {e["request_id"] for e in events} == {events[0]["request_id"]}  # one id for the run
    by_action = [(e["action_name"], e["request_params"].get("phase")) for e in reversed(events)]
    assert by_action[0] == ("pipelines.run", "start") and by_action[-1] == ("pipelines.run", "end")
    assert ("memories.extract", None) in by_action and ("entries.write", None) in by_action
    write = next(e for e in events if e["action_name"] == "entries.write")
    assert write["request_params"]["tool"] == "save_memory" and write["decision"] == "allow"
    assert write["securable_full_name"] == "main.default.owned-memory"
    extract = next(e for e in events if e["action_name"] == "memories.extract")
    assert extract["request_params"]["session_id"] == "s1" and extract["status_code"] == 200
    # the session's extraction names the scope its work reached (its actor's), as a request's
    # event does: an auditor asking for that scope's events finds it
    by_scope = [e for e in audit_events(live, scope="hal") if e["request_params"].get("run") == run["name"]]
    assert "memories.extract" in {e["action_name"] for e in by_scope}
    end = events[0]
    assert end["request_params"]["state"] == "SUCCEEDED" and end["result_count"] == 1
    # the request that asked for it is the admin's
    asked = audit_events(live, principal="admin", action_name="pipelines.run")
    assert any(e["request_params"].get("pipeline_id") == created["name"].split("/")[1] for e in asked)

    # the creator loses READ on the session store: the run fails before reading any session,
    # naming them, visibly in its last event
    r = httpx.patch(
        f"{live.url}{UC}/permissions/memory-store/main.default.owned-sessions",
        headers=headers(live),
        json={"changes": [{"principal": "pipe-owner", "remove": ["READ_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    session_store.get("s1").append_items([{"role": "user", "content": "more"}])
    refused = run_to_end(live, created["name"])
    assert refused["state"] == "FAILED" and counts(refused) == (0, 0, 0, 0, 0)
    assert "pipe-owner may not" in refused["error"] and "READ_MEMORY_STORE" in refused["error"]
    ended = [
        e
        for e in audit_events(live, principal="pipe-owner", action_name="pipelines.run")
        if e["request_params"].get("run") == refused["name"]
    ]
    assert ended[0]["request_params"]["phase"] == "end" and "pipe-owner may not" in ended[0]["reason"]
    assert not [e for e in ended if e["action_name"] == "memories.extract"]


def test_who_may_read_change_and_run_a_pipeline(live, llm):
    session_store, memory_store = stores(live, "acl", {"s1": "ida"})
    created = pipeline(live, "acl")
    name = created["name"]
    # a stranger: nothing
    for call in (
        lambda c: c.get_memory_pipeline(name),
        lambda c: c.run_memory_pipeline(name),
        lambda c: c.update_memory_pipeline(name, display_name="x"),
        lambda c: c.delete_memory_pipeline(name),
        lambda c: c.list_memory_pipeline_runs(name),
    ):
        with pytest.raises(AgentCliError) as refused:
            call(api(live, "stranger"))
        assert refused.value.error_code == "PERMISSION_DENIED"
    assert name not in [p["name"] for p in api(live, "stranger").list_memory_pipelines()["memory_pipelines"]]

    # READ on the memory store: may read the pipeline and its runs, not run or change it
    memory_store.grant_permission("reader", permission="READ")
    session_store.grant_permission("reader", permission="READ")
    assert api(live, "reader").get_memory_pipeline(name)["name"] == name
    assert name in [p["name"] for p in api(live, "reader").list_memory_pipelines()["memory_pipelines"]]
    assert api(live, "reader").list_memory_pipeline_runs(name)["pipeline_runs"] == []
    for call in (
        lambda c: c.run_memory_pipeline(name),
        lambda c: c.update_memory_pipeline(name, display_name="x"),
        lambda c: c.create_memory_pipeline(session_store="acl-sessions", memory_store="acl-memory"),
    ):
        with pytest.raises(AgentCliError) as refused:
            call(api(live, "reader"))
        assert refused.value.error_code == "PERMISSION_DENIED"

    # WRITE on the memory store but nothing on the sessions: may not run or change what it reads
    memory_store.grant_permission("writer", permission="WRITE")
    for call in (
        lambda c: c.run_memory_pipeline(name),
        lambda c: c.update_memory_pipeline(name, instructions="copy everything"),
    ):
        with pytest.raises(AgentCliError) as refused:
            call(api(live, "writer"))
        assert refused.value.error_code == "PERMISSION_DENIED"
    assert api(live).list_memory_pipeline_runs(name)["pipeline_runs"] == []
    # with READ on the sessions too it may run it (as the creator)
    session_store.grant_permission("writer", permission="READ")
    llm.script(Reply("nothing to keep"))
    run = run_to_end(live, name, sub="writer")
    assert run["state"] == "SUCCEEDED"
    api(live, "writer").delete_memory_pipeline(name)


def grant(live, full_name: str, *changes: dict[str, Any], kind: str = "memory_store") -> None:
    r = httpx.patch(
        f"{live.url}{UC}/permissions/{kind}/{full_name}",
        headers=headers(live),
        json={"changes": list(changes)},
    )
    assert r.status_code == 200, r.text


def test_a_principal_limited_to_some_scopes_cannot_use_anothers_pipeline(live, llm):
    """The confused deputy: mallory holds READ and WRITE only for scopes `team-a:*`. She may not
    change what another principal's pipeline does, run it, rename or delete it, or create one: a
    run acts as its creator in every scope (alice's memory would be deleted by it)."""
    session_store, memory_store = stores(live, "deputy", {"s1": "alice", "s2": "team-a:x"})
    session_store.grant_permission("pipe-owner", permission="READ")
    memory_store.grant_permission("pipe-owner", permission="WRITE")
    created = pipeline(live, "deputy", sub="pipe-owner")
    r = httpx.post(
        f"{live.url}/api/2.0/agents/memory-stores/deputy-memory/entries",
        headers=headers(live),
        json={"actor_id": "alice", "path": "/memories/alice.md", "content": "alice's secret"},
    )
    assert r.status_code == 200, r.text
    grant(live, "main", {"principal": "mallory", "add": ["USE_CATALOG", "USE_SCHEMA"]}, kind="catalog")
    for store in ("main.default.deputy-sessions", "main.default.deputy-memory"):
        grant(
            live,
            store,
            {
                "principal": "mallory",
                "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"],
                "scopes": ["team-a:*"],
            },
        )
    url = f"{live.url}{PIPELINES}/{created['name'].split('/')[1]}"
    mallory = headers(live, "mallory")
    attempts = [
        httpx.patch(
            url,
            headers=mallory,
            params={"update_mask": "dreamer_policy.instructions"},
            json={"dreamer_policy": {"instructions": "delete every memory of alice"}},
        ),
        httpx.post(f"{url}/run", headers=mallory, json={}),
        httpx.patch(url, headers=mallory, params={"update_mask": "display_name"}, json={"display_name": "x"}),
        httpx.delete(url, headers=mallory),
        httpx.post(
            f"{live.url}{PIPELINES}",
            headers=mallory,
            json={"session_store": "deputy-sessions", "memory_store": "deputy-memory"},
        ),
    ]
    assert attempts[0].status_code == 403 and "requires MANAGE" in attempts[0].json()["message"]
    for r in attempts[1:]:
        assert r.status_code == 403, r.text
        assert "team-a:*" in r.json()["message"] and "every scope" in r.json()["message"], r.text
    got = api(live).get_memory_pipeline(created["name"])
    assert got["dreamer_policy"].get("instructions") is None and got["etag"] == created["etag"]
    assert api(live).list_memory_pipeline_runs(created["name"])["pipeline_runs"] == []
    assert "/memories/alice.md" in memories(live, "deputy-memory", "alice")
    denied = audit_events(live, principal="mallory", decision="deny")
    assert {e["action_name"] for e in denied} >= {
        "pipelines.configure",
        "pipelines.run",
        "pipelines.manage",
        "pipelines.create",
    }
    assert all(
        "every scope" in e["reason"]
        for e in denied
        if e["action_name"] in ("pipelines.run", "pipelines.manage", "pipelines.create")
    )


def test_who_changes_what_a_pipeline_does_and_whom_its_runs_answer_to(live, llm):
    """Changing what another's pipeline does needs MANAGE on both its stores and every step of a
    run; who did is kept, named in every event of its runs, and a run fails, naming them, once
    they may no longer do every step."""
    session_store, memory_store = stores(live, "answer", {"s1": "kim"})
    created = pipeline(live, "answer")
    name, pipeline_id = created["name"], created["name"].split("/")[1]
    url = f"{live.url}{PIPELINES}/{pipeline_id}"
    grant(live, "main", {"principal": "mgr", "add": ["USE_CATALOG", "USE_SCHEMA"]}, kind="catalog")

    def configure(who: str, instructions: str) -> httpx.Response:
        return httpx.patch(
            url,
            headers=headers(live, who),
            params={"update_mask": "dreamer_policy.instructions"},
            json={"dreamer_policy": {"instructions": instructions}},
        )

    # MANAGE alone: a run would do what mgr may not (read the sessions and memories)
    for store in ("main.default.answer-sessions", "main.default.answer-memory"):
        grant(live, store, {"principal": "mgr", "add": ["MANAGE"]})
    r = configure("mgr", "keep names")
    assert r.status_code == 403 and "requires WRITE_MEMORY_STORE" in r.json()["message"], r.text
    # READ and WRITE in every scope without MANAGE: may rename it, not change what it does
    session_store.grant_permission("rw", permission="READ")
    memory_store.grant_permission("rw", permission="WRITE")
    assert configure("rw", "keep names").status_code == 403
    r = httpx.patch(
        url, headers=headers(live, "rw"), params={"update_mask": "display_name"}, json={"display_name": "n"}
    )
    assert r.status_code == 200 and "configured_by" not in r.json(), r.text
    # MANAGE and every step: changed, and kept as who did
    session_store.grant_permission("mgr", permission="READ")
    memory_store.grant_permission("mgr", permission="WRITE")
    r = configure("mgr", "keep names")
    assert r.status_code == 200 and r.json()["configured_by"] == "mgr", r.text

    llm.script(*save("/memories/kim.md"))
    run = run_to_end(live, name, sub="rw")
    assert run["state"] == "SUCCEEDED" and run["requested_by"] == "rw", run
    events = [
        e for e in audit_events(live, principal="admin") if e["request_params"].get("run") == run["name"]
    ]
    assert events and all(
        (e["request_params"]["requested_by"], e["request_params"]["configured_by"]) == ("rw", "mgr")
        for e in events
    ), events

    # mgr loses READ on the sessions: the next run, started by the creator, fails naming mgr
    grant(live, "main.default.answer-sessions", {"principal": "mgr", "remove": ["READ_MEMORY_STORE"]})
    session_store.get("s1").append_items([{"role": "user", "content": "more"}])
    refused = run_to_end(live, name)
    assert refused["state"] == "FAILED" and refused["error"].startswith(
        "the run may not go on: mgr may not"
    ), refused
    assert counts(refused) == (0, 0, 0, 0, 0) and len(llm.requests) == 2  # nothing more was read


def test_a_scheduled_pipeline_runs_by_itself(live, llm, database_url):
    stores(live, "sched", {"s1": "jo"})
    created = pipeline(live, "sched", trigger="scheduled")
    assert created["dreamer_policy"]["enabled"] is True
    pipeline_id = created["name"].split("/")[1]
    llm.script(*save("/memories/jo.md"))
    # as if it had been scheduled two days ago (the interval is a day)
    sql(
        database_url,
        "UPDATE memory_pipelines SET scheduled_at = now() - interval '2 days' WHERE id = $1",
        pipeline_id,
    )
    assert _run_exists(live, created["name"]), live.problems()
    run = wait_for(live, f"{created['name']}/runs/1")
    assert run["trigger"] == "SCHEDULED" and run["state"] == "SUCCEEDED", run
    assert list(memories(live, "sched-memory", "jo")) == ["/memories/jo.md"]
    # it just ran: not due again
    assert [r["name"] for r in api(live).list_memory_pipeline_runs(created["name"])["pipeline_runs"]] == [
        run["name"]
    ]


def _run_exists(live, name: str) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not api(live).list_memory_pipeline_runs(name)["pipeline_runs"]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


# --- durability -------------------------------------------------------------------------------------


def test_a_crashed_run_is_resumed_by_another_process_without_redoing_sessions(
    fresh_database_url, tmp_path, live_server
):
    """The server doing a run is killed in the middle of its second session; another server on the
    same database takes the run over once its lease has expired, and does the second session again
    and the third, never the first."""
    data_dir = tmp_path / "data"
    reached, release = threading.Event(), threading.Event()
    with ScriptedLLM() as model:
        first = _server(live_server, data_dir, fresh_database_url, model.url)
        try:
            stores(first, "crash", {"s1": "kim", "s2": "lou", "s3": "max"})
            created = pipeline(first, "crash")

            def hang(request: dict) -> Reply:
                reached.set()
                release.wait(DEADLINE)  # the server is killed meanwhile
                return Reply("too late")

            model.script(*save("/memories/kim.md"), hang)
            started = api(first).run_memory_pipeline(created["name"])
            assert reached.wait(DEADLINE), first.problems()
            during = api(first).get_memory_pipeline_run(started["name"])
            assert during["state"] == "RUNNING" and counts(during)[:2] == (3, 1)
        finally:
            first.process.kill()  # no shut-down: the lease stays with the dead process
            first.process.wait()
            first._log.close()
            release.set()
        held = sql(fresh_database_url, "SELECT leased_by FROM pipeline_runs")
        assert held[0]["leased_by"] is not None
        # the lease would expire within a minute; expire it now
        sql(fresh_database_url, "UPDATE pipeline_runs SET lease_until = now() - interval '1 second'")
        model.reset()
        model.script(*save("/memories/lou.md"), *save("/memories/max.md"))
        second = _server(live_server, data_dir, fresh_database_url, model.url)
        try:
            done = wait_for(second, started["name"])
            assert done["state"] == "SUCCEEDED" and counts(done) == (3, 3, 0, 0, 3), done
            # the list of sessions served resuming; the ended run keeps its counts only
            assert sql(fresh_database_url, "SELECT count(*) AS n FROM pipeline_run_sessions")[0]["n"] == 0
            transcripts = [r["messages"][1]["content"] for r in model.requests if len(r["messages"]) == 2]
            assert len(transcripts) == 2 and "kim" not in " ".join(transcripts)  # s1 was not redone
            assert "lou says" in transcripts[0] and "max says" in transcripts[1]
            for actor in ("kim", "lou", "max"):
                assert list(memories(second, "crash-memory", actor)) == [f"/memories/{actor}.md"]
            phases = [
                e["request_params"].get("phase")
                for e in audit_events(second, action_name="pipelines.run")
                if e["request_params"].get("run") == started["name"]
            ]
            assert sorted(p for p in phases if p) == ["end", "resume", "start"]
        finally:
            second.stop()


def test_a_server_shutting_down_lets_its_run_go_at_once(fresh_database_url, tmp_path, live_server):
    """A server stopped in the middle of a run lets go of its lease as it stops: another server
    resumes the run at once, without waiting for the lease to expire."""
    data_dir = tmp_path / "data"
    reached, release = threading.Event(), threading.Event()
    with ScriptedLLM() as model:
        first = _server(live_server, data_dir, fresh_database_url, model.url)
        try:
            stores(first, "halt", {"s1": "ned"})
            created = pipeline(first, "halt")

            def hang(request: dict) -> Reply:
                reached.set()
                release.wait(DEADLINE)  # the server stops meanwhile
                return Reply("too late")

            model.script(hang)
            started = api(first).run_memory_pipeline(created["name"])
            assert reached.wait(DEADLINE), first.problems()
        finally:
            assert first.stop() == 0
            release.set()
        [row] = sql(fresh_database_url, "SELECT state, lease_until <= now() AS free FROM pipeline_runs")
        assert row["state"] == "RUNNING" and row["free"] is True
        model.reset()
        model.script(*save("/memories/ned.md"))
        second = _server(live_server, data_dir, fresh_database_url, model.url)
        try:
            done = wait_for(second, started["name"])
            assert done["state"] == "SUCCEEDED" and counts(done) == (1, 1, 0, 0, 1), done
        finally:
            second.stop()


def _until(condition: Callable[[], bool], server: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n{server.problems()}"
        time.sleep(0.1)


@pytest.mark.parametrize("stop", ["after_a_write", "after_the_session_is_marked"])
def test_a_run_stopped_and_resumed_counts_every_entry_it_wrote(
    stop, fresh_database_url, tmp_path, live_server
):
    """A server is stopped (SIGTERM) while its run's only session is half done: the model's write
    is made and the model is asked again (`after_a_write`), or the extraction is over and marked
    the session but its outcome is not recorded yet (`after_the_session_is_marked`: held there by
    a lock on the run's row, the server is stopped once the session's mark is in). Another server
    resumes the run, redoing the session: the run counts the entry the stopped server wrote,
    whether the model writes it again (refused: it exists) or the session needs no extraction."""
    data_dir = tmp_path / "data"
    reached, release = threading.Event(), threading.Event()
    loop = asyncio.new_event_loop()
    locker: asyncpg.Connection = loop.run_until_complete(asyncpg.connect(fresh_database_url))
    write = Call("save_memory", {"path": "/memories/ona.md", "description": "ona", "contents": "about ona"})
    try:
        with ScriptedLLM() as model:
            first = _server(live_server, data_dir, fresh_database_url, model.url)
            try:
                stores(first, "stop", {"s1": "ona"})
                created = pipeline(first, "stop")

                def gate(request: dict) -> Reply:
                    reached.set()
                    release.wait(DEADLINE)
                    return Reply("kept it")

                model.script(write, gate)
                started = api(first).run_memory_pipeline(created["name"])
                assert reached.wait(DEADLINE), first.problems()
                assert list(memories(first, "stop-memory", "ona")) == ["/memories/ona.md"]
                if stop == "after_the_session_is_marked":
                    loop.run_until_complete(locker.execute("BEGIN; SELECT 1 FROM pipeline_runs FOR UPDATE"))
                    release.set()
                    _until(
                        lambda: bool(sql(fresh_database_url, "SELECT 1 FROM extraction_marks")),
                        first,
                        "the session was not marked",
                    )
                first.process.terminate()
                if stop == "after_the_session_is_marked":
                    # the worker lets the run's lease go once its work has stopped: then let it
                    pid = locker.get_server_pid()
                    _until(
                        lambda: bool(
                            sql(
                                fresh_database_url,
                                "SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) "
                                "AND query LIKE '%lease_until = clock_timestamp() WHERE%'",
                                pid,
                            )
                        ),
                        first,
                        "the stopping server did not let the run go",
                    )
                    loop.run_until_complete(locker.execute("ROLLBACK"))
                assert first.process.wait(timeout=30) == 0
            finally:
                if first.process.poll() is None:
                    first.process.kill()
                    first.process.wait()
                first._log.close()
                release.set()
            [row] = sql(fresh_database_url, "SELECT state, sessions_extracted FROM pipeline_runs")
            assert row["state"] == "RUNNING" and row["sessions_extracted"] == 0  # stopped half-way
            model.reset()
            # the same transcript, the same model: it saves the entry again
            model.script(write, Reply("it is kept already"))
            second = _server(live_server, data_dir, fresh_database_url, model.url)
            try:
                done = wait_for(second, started["name"])
                assert done["state"] == "SUCCEEDED" and counts(done) == (1, 1, 0, 0, 1), done
                assert list(memories(second, "stop-memory", "ona")) == ["/memories/ona.md"]
                if stop == "after_a_write":  # the session was redone; its save was refused
                    assert "already exists" in model.requests[1]["messages"][-1]["content"]
                else:  # its extraction was over: nothing to redo
                    assert model.requests == []
            finally:
                second.stop()
    finally:
        loop.run_until_complete(locker.close())
        loop.close()


def test_without_an_upstream_model_a_run_is_501(own_client, own_token):
    """An app without CATALOG_LLM_BASE_URL (on a database of its own: its worker must not take the
    live server's runs): pipelines can be kept, not run."""
    client, token = own_client, own_token
    r = client.post(
        "/api/2.0/agents/session-stores",
        headers=token(),
        params={"session_store_name": "nollm-sessions"},
        json={},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        "/api/2.0/agents/memory-stores",
        headers=token(),
        params={"managed_memory_store_id": "nollm-memory"},
        json={},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        PIPELINES, headers=token(), json={"session_store": "nollm-sessions", "memory_store": "nollm-memory"}
    )
    assert r.status_code == 200, r.text
    r = client.post(f"/api/2.0/agents/{r.json()['name']}/run", headers=token(), json={})
    assert r.status_code == 501 and r.json()["error_code"] == "NOT_IMPLEMENTED", r.text
    assert "CATALOG_LLM_BASE_URL" in r.json()["message"]
