"""Session stores through the real clients against a live server: the AgentKit SDK
(`AgentKitClient(...).session_stores`), its `DatabricksSessionStore` (an OpenAI Agents `Session`)
and its LangGraph checkpointer; then concurrent appends and pops over HTTP."""

from __future__ import annotations

import asyncio
import operator
import threading
from typing import Annotated, TypedDict

import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks_agentkit import AgentKitClient
from databricks_agentkit.langgraph.session_store import DatabricksSessionStoreSaver, thread_config
from databricks_agentkit.openai.sessions import DatabricksSessionStore
from rest import bearer

from catalog.auth import mint_dev_token
from catalog.settings import Settings

BASE = "/api/2.0/agents/session-stores"


def workspace(live, sub: str) -> WorkspaceClient:
    token = mint_dev_token(Settings(data_dir=live.data_dir), sub)
    return WorkspaceClient(host=live.url, token=token, auth_type="pat")


def test_agentkit_sdk_sessions_end_to_end(live):
    stores = AgentKitClient(workspace(live, "admin")).session_stores
    store = stores.create("support-sessions", description="support chats", metadata={"team": "support"})
    assert store.name == "support-sessions" and store.metadata == {"team": "support"}
    assert store.description == "support chats" and store.create_time is not None
    assert "support-sessions" in [s.name for s in stores.list()]
    assert stores.get("support-sessions").update(description="all chats").description == "all chats"

    session = store.add(actor_id="user-1", session_id="chat-1", metadata={"channel": "web"})
    assert (
        session.session_id == "chat-1"
        and session.actor_id == "user-1"
        and session.root_session_id == "chat-1"
    )
    written = session.append_items(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )
    session.append_items([{"role": "user", "content": "book a flight"}])
    assert [i.data["content"] for i in session.list_items()] == ["hi", "hello", "book a flight"]
    assert [i.data["content"] for i in session.list_items(page_size=1, order_by="create_time desc")] == [
        "book a flight",
        "hello",
        "hi",
    ]
    popped = session.pop_item()
    assert popped is not None and popped.data["content"] == "book a flight"

    fork = session.fork(actor_id="user-1", up_to_item_id=written[0].item_id, session_id="chat-1-retry")
    assert fork.parent_session_id == "chat-1" and fork.root_session_id == "chat-1"
    assert [i.data["content"] for i in fork.list_items()] == ["hi"]
    assert {s.session_id for s in store.list()} == {"chat-1", "chat-1-retry"}
    assert store.get("chat-1").update(metadata={"channel": "phone"}).metadata == {"channel": "phone"}
    session.clear_items()
    assert list(session.list_items()) == [] and session.pop_item() is None

    # grants: a grantee writes, a stranger is refused
    store.grant_permission("support-app", permission="WRITE")
    as_app = AgentKitClient(workspace(live, "support-app")).session_stores.get("support-sessions")
    as_app.get("chat-1").append_items(["from the app"])
    assert [i.data for i in as_app.get("chat-1").list_items()] == ["from the app"]
    stranger = AgentKitClient(workspace(live, "stranger")).session_stores
    with pytest.raises(Exception) as refused:
        stranger.get("support-sessions")
    assert getattr(refused.value, "error_code", None) == "PERMISSION_DENIED"

    fork.delete()
    assert [s.session_id for s in store.list()] == ["chat-1"]
    with pytest.raises(Exception) as missing:
        store.get("chat-1-retry")
    assert getattr(missing.value, "error_code", None) == "NOT_FOUND"


def test_openai_agents_session_protocol(live):
    AgentKitClient(workspace(live, "admin")).session_stores.create("agent-transcripts")
    session = DatabricksSessionStore(
        "conv-1", "agent-transcripts", actor_id="user-7", workspace_client=workspace(live, "admin")
    )

    async def run() -> None:
        assert await session.get_items() == []  # creates the session on first use
        await session.add_items(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        )
        await session.add_items([{"role": "user", "content": "what's up?"}])
        assert [i["content"] for i in await session.get_items()] == ["hi", "hello", "what's up?"]
        assert [i["content"] for i in await session.get_items(limit=2)] == ["hello", "what's up?"]
        assert (await session.pop_item())["content"] == "what's up?"
        assert [i["content"] for i in await session.get_items()] == ["hi", "hello"]
        # a new object for the same conversation reads the same transcript
        again = DatabricksSessionStore(
            "conv-1", "agent-transcripts", actor_id="user-7", workspace_client=workspace(live, "admin")
        )
        assert len(await again.get_items()) == 2
        await session.clear_session()
        assert await again.get_items() == []
        assert await session.pop_item() is None

    asyncio.run(run())
    r = httpx.get(f"{live.url}{BASE}/agent-transcripts/sessions/conv-1", headers=bearer(live))
    assert r.status_code == 200 and r.json()["actor_id"] == "user-7"


class Steps(TypedDict):
    log: Annotated[list[str], operator.add]


def test_langgraph_checkpointer_resumes_a_two_step_graph(live):
    from langgraph.graph import END, START, StateGraph

    AgentKitClient(workspace(live, "admin")).session_stores.create("graph-checkpoints")
    runs: list[str] = []

    def first(state: Steps) -> dict:
        runs.append("first")
        return {"log": ["first"]}

    def second(state: Steps) -> dict:
        runs.append("second")
        return {"log": ["second"]}

    def build(saver):  # type: ignore[no-untyped-def]
        graph = StateGraph(Steps)
        graph.add_node("first", first)
        graph.add_node("second", second)
        graph.add_edge(START, "first")
        graph.add_edge("first", "second")
        graph.add_edge("second", END)
        return graph.compile(checkpointer=saver, interrupt_before=["second"])

    config = thread_config("thread-1", actor="user-3")
    saver = DatabricksSessionStoreSaver("graph-checkpoints", workspace_client=workspace(live, "admin"))
    paused = build(saver).invoke({"log": ["start"]}, config)
    assert paused["log"] == ["start", "first"] and runs == ["first"]

    # a new saver and graph (as after a restart) resume from the checkpoint the server keeps
    resumed_saver = DatabricksSessionStoreSaver(
        "graph-checkpoints", workspace_client=workspace(live, "admin")
    )
    graph = build(resumed_saver)
    assert graph.get_state(config).next == ("second",)
    done = graph.invoke(None, config)
    assert done["log"] == ["start", "first", "second"] and runs == ["first", "second"]
    assert graph.get_state(config).next == ()
    r = httpx.get(f"{live.url}{BASE}/graph-checkpoints/sessions/thread-1/items", headers=bearer(live))
    assert r.status_code == 200 and len(r.json()["session_items"]) > 0


def _session(live, store: str, sid: str) -> None:
    r = httpx.post(f"{live.url}{BASE}", headers=bearer(live), params={"session_store_name": store}, json={})
    assert r.status_code in (200, 409), r.text
    r = httpx.post(
        f"{live.url}{BASE}/{store}/sessions",
        headers=bearer(live),
        params={"session_id": sid},
        json={"actor_id": "u"},
    )
    assert r.status_code == 200, r.text


def _all_items(live, store: str, sid: str) -> list:
    out, token = [], None
    with httpx.Client(base_url=live.url, headers=bearer(live)) as http:
        while True:
            params = {"page_size": 1000, **({"page_token": token} if token else {})}
            body = http.get(f"{BASE}/{store}/sessions/{sid}/items", params=params).json()
            out += [i["data"] for i in body["session_items"]]
            token = body.get("next_page_token")
            if not token:
                return out


def test_concurrent_appends_never_lose_or_reorder_an_item(live):
    _session(live, "race-appends", "s")
    writers, batches, per_batch = 6, 10, 3
    errors: list[str] = []

    def write(w: int) -> None:
        with httpx.Client(base_url=live.url, headers=bearer(live), timeout=60) as http:
            for b in range(batches):
                items = [{"data": [w, b, k]} for k in range(per_batch)]
                r = http.post(f"{BASE}/race-appends/sessions/s/items:append", json={"items": items})
                if r.status_code != 200:
                    errors.append(r.text)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stored = _all_items(live, "race-appends", "s")
    assert len(stored) == writers * batches * per_batch
    assert sorted(map(tuple, stored)) == sorted(
        (w, b, k) for w in range(writers) for b in range(batches) for k in range(per_batch)
    )
    for start in range(0, len(stored), per_batch):  # each append's items stay together, in order
        batch = stored[start : start + per_batch]
        assert [x[:2] for x in batch] == [batch[0][:2]] * per_batch and [x[2] for x in batch] == list(
            range(per_batch)
        )
    for w in range(writers):  # each writer's appends in the order it sent them
        assert [b for ww, b, k in stored if ww == w and k == 0] == list(range(batches))


def test_a_pop_racing_appends_is_safe(live):
    _session(live, "race-pops", "s")
    appended = [{"data": ["seed", i]} for i in range(20)]
    r = httpx.post(
        f"{live.url}{BASE}/race-pops/sessions/s/items:append", headers=bearer(live), json={"items": appended}
    )
    assert r.status_code == 200
    popped: list = []
    errors: list[str] = []

    def append() -> None:
        with httpx.Client(base_url=live.url, headers=bearer(live), timeout=60) as http:
            for i in range(20):
                r = http.post(
                    f"{BASE}/race-pops/sessions/s/items:append", json={"items": [{"data": ["new", i]}]}
                )
                if r.status_code != 200:
                    errors.append(r.text)

    def pop() -> None:
        with httpx.Client(base_url=live.url, headers=bearer(live), timeout=60) as http:
            for _ in range(15):
                r = http.post(f"{BASE}/race-pops/sessions/s/items:pop", json={})
                if r.status_code != 200:
                    errors.append(r.text)
                elif r.json().get("item") is not None:
                    popped.append(r.json()["item"]["data"])

    threads = [threading.Thread(target=append), threading.Thread(target=pop), threading.Thread(target=pop)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    remaining = _all_items(live, "race-pops", "s")
    everything = [["seed", i] for i in range(20)] + [["new", i] for i in range(20)]
    # every item is either still there or was popped exactly once; none is lost or duplicated
    assert sorted(map(tuple, remaining + popped)) == sorted(map(tuple, everything))
    # what remains keeps the order it was appended in
    assert [x for x in remaining if x[0] == "seed"] == sorted(x for x in remaining if x[0] == "seed")
    assert [x for x in remaining if x[0] == "new"] == sorted(x for x in remaining if x[0] == "new")
