"""OpenAI-compatible conversations, driven with the real `openai` client against a live server:
each conversation belongs to one memory store and one scope, is authorized on that store, keeps
its items in order and as sent, and refuses bad input with the field named."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable

import asyncpg
import httpx
import openai
import pytest
from agents.memory import OpenAIConversationsSession
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings

BASE = "/ai-gateway/mlflow/v1"
STORE = "main.default.conv"
BOUND = "main.default.conv-bound"
DEFAULT = "main.default.conv-default"


@pytest.fixture(scope="module")
def live(database_url, tmp_path_factory, live_server):
    server = live_server(tmp_path_factory.mktemp("conversations"), env={"CATALOG_DATABASE_URL": database_url})
    try:
        _stores(server)
        yield server
    finally:
        server.stop()


def bearer(live, sub: str, on_behalf_of: str | None = None) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub, on_behalf_of=on_behalf_of)


def headers(live, sub: str = "admin", on_behalf_of: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {bearer(live, sub, on_behalf_of)}"}


def _stores(live) -> None:  # type: ignore[no-untyped-def]
    """`conv` (alice reads and writes, rita only reads) and `conv-bound` (scopes bound to the end
    user; `chat-app` reads and writes it on behalf of users)."""
    for name, binding in (("conv", "caller"), ("conv-bound", "end_user")):
        r = httpx.post(
            f"{live.url}{UC}/memory-stores",
            headers=headers(live),
            json={"name": name, "catalog_name": "main", "schema_name": "default", "scope_binding": binding},
        )
        assert r.status_code == 200, r.text
    grants = [
        (STORE, "alice", ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]),
        (STORE, "rita", ["READ_MEMORY_STORE"]),
        (BOUND, "chat-app", ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]),
    ]
    for store, principal, privileges in grants:
        r = httpx.patch(
            f"{live.url}{UC}/permissions/memory_store/{store}",
            headers=headers(live),
            json={"changes": [{"principal": principal, "add": privileges}]},
        )
        assert r.status_code == 200, r.text


def client_for(live, sub: str, on_behalf_of: str | None = None, base: str = BASE) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}{base}", api_key=bearer(live, sub, on_behalf_of), max_retries=0)


def bind(store: str, user: str, kind: str = "user") -> dict[str, object]:
    return {"memory_store": {"name": store}, "scope": {"kind": kind, "value": user}}


def new_conversation(live, sub: str = "alice", user: str = "alice", store: str = STORE, **kwargs):  # type: ignore[no-untyped-def]
    return client_for(live, sub, kwargs.pop("on_behalf_of", None)).conversations.create(
        extra_body=bind(store, user), **kwargs
    )


def test_openai_client_creates_appends_lists_and_deletes(live):
    oai = client_for(live, "alice")
    conversation = oai.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Paris.", "annotations": []}]},
        ],
        metadata={"topic": "geography"},
        extra_body=bind(STORE, "alice"),
    )
    assert conversation.id.startswith("conv_") and conversation.object == "conversation"
    assert conversation.metadata == {"topic": "geography"}
    assert isinstance(conversation.created_at, int) and conversation.created_at > 1_600_000_000
    extra = conversation.model_extra or {}
    assert extra["memory_store"] == {"name": STORE} and extra["scope"] == {"kind": "user", "value": "alice"}
    assert oai.conversations.retrieve(conversation.id).id == conversation.id

    added = oai.conversations.items.create(
        conversation.id,
        items=[
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21}'},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]},
        ],
    )
    assert [item.type for item in added.data] == ["function_call", "function_call_output", "message"]
    assert added.first_id == added.data[0].id and added.last_id == added.data[-1].id

    listed = list(oai.conversations.items.list(conversation.id, order="asc", limit=2))  # pages of 2
    assert [item.type for item in listed] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    first = listed[0]
    # the string content of the first message became one text part; what was sent is kept
    assert first.role == "user" and first.content[0].type == "input_text"
    assert first.content[0].text == "What is the capital of France?"
    assert listed[1].content[0].text == "Paris." and listed[1].status == "completed"
    call = listed[2]
    assert (call.call_id, call.name, call.arguments) == ("call_1", "get_weather", '{"city":"Paris"}')
    assert listed[3].output == '{"temp": 21}'

    newest = oai.conversations.items.list(conversation.id, limit=1)  # default order: newest first
    assert [item.id for item in newest.data] == [listed[-1].id] and newest.has_more is True

    got = oai.conversations.items.retrieve(call.id, conversation_id=conversation.id)
    assert got.id == call.id and got.type == "function_call"
    after_delete = oai.conversations.items.delete(call.id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id
    remaining = [item.id for item in oai.conversations.items.list(conversation.id, order="asc")]
    assert remaining == [item.id for item in listed if item.id != call.id]
    with pytest.raises(openai.NotFoundError):
        oai.conversations.items.retrieve(call.id, conversation_id=conversation.id)

    updated = oai.conversations.update(conversation.id, metadata={"topic": "travel", "lang": "en"})
    assert updated.metadata == {"topic": "travel", "lang": "en"}
    assert oai.conversations.retrieve(conversation.id).metadata == {"topic": "travel", "lang": "en"}

    deleted = oai.conversations.delete(conversation.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (conversation.id, "conversation.deleted", True)
    with pytest.raises(openai.NotFoundError) as missing:
        oai.conversations.retrieve(conversation.id)
    assert missing.value.status_code == 404 and missing.value.body["error_code"] == "NOT_FOUND"
    with pytest.raises(openai.NotFoundError):
        oai.conversations.items.list(conversation.id)


def test_v1_alias_serves_the_same_conversations(live):
    conversation = new_conversation(live, items=[{"role": "user", "content": "hello"}])
    alias = client_for(live, "alice", base="/v1")
    assert alias.conversations.retrieve(conversation.id).id == conversation.id
    assert [item.content[0].text for item in alias.conversations.items.list(conversation.id)] == ["hello"]


def test_a_stranger_is_refused_and_a_reader_may_not_append(live):
    conversation = new_conversation(live, items=[{"role": "user", "content": "private"}])
    stranger = client_for(live, "bob")
    for call in (
        lambda: stranger.conversations.retrieve(conversation.id),
        lambda: stranger.conversations.items.list(conversation.id),
        lambda: stranger.conversations.delete(conversation.id),
        lambda: stranger.conversations.items.create(
            conversation.id, items=[{"role": "user", "content": "x"}]
        ),
        lambda: stranger.conversations.create(extra_body=bind(STORE, "bob")),
    ):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            call()
        assert refused.value.body["error_code"] == "PERMISSION_DENIED"

    reader = client_for(live, "rita")
    assert [i.content[0].text for i in reader.conversations.items.list(conversation.id)] == ["private"]
    with pytest.raises(openai.PermissionDeniedError):
        reader.conversations.items.create(conversation.id, items=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.PermissionDeniedError):
        reader.conversations.update(conversation.id, metadata={"k": "v"})
    with pytest.raises(openai.PermissionDeniedError):
        reader.conversations.create(extra_body=bind(STORE, "rita"))
    # nothing changed
    assert len(client_for(live, "alice").conversations.items.list(conversation.id).data) == 1


def test_a_missing_store_or_conversation_is_not_found(live):
    oai = client_for(live, "alice")
    with pytest.raises(openai.NotFoundError) as missing:
        oai.conversations.create(extra_body=bind("main.default.no-such-store", "alice"))
    assert missing.value.body["error_code"] == "NOT_FOUND"
    with pytest.raises(openai.NotFoundError) as missing:
        oai.conversations.retrieve("conv_" + "0" * 32)
    assert missing.value.body["error_code"] == "NOT_FOUND"
    # a catalog the caller may not use: 403 whether or not the store exists (no existence leak)
    with pytest.raises(openai.PermissionDeniedError):
        oai.conversations.create(extra_body=bind("nowhere.default.conv", "alice"))


def test_scope_binding_holds_conversations_to_the_end_user(live):
    carol = client_for(live, "chat-app", on_behalf_of="carol")
    conversation = carol.conversations.create(
        items=[{"role": "user", "content": "hi"}], extra_body=bind(BOUND, "carol")
    )
    with pytest.raises(openai.PermissionDeniedError) as refused:
        carol.conversations.create(extra_body=bind(BOUND, "dave"))
    assert "binds scopes to the end user" in refused.value.body["message"]
    dave = client_for(live, "chat-app", on_behalf_of="dave")
    with pytest.raises(openai.PermissionDeniedError):
        dave.conversations.retrieve(conversation.id)
    with pytest.raises(openai.PermissionDeniedError):
        dave.conversations.items.create(conversation.id, items=[{"role": "user", "content": "x"}])
    assert [i.content[0].text for i in carol.conversations.items.list(conversation.id)] == ["hi"]


def _field(response: httpx.Response) -> str | None:
    details = response.json()["details"]
    return details[0].get("field") if details else None


def test_bad_input_is_refused_naming_the_field(live):
    h = headers(live, "alice")
    url = f"{live.url}{BASE}/conversations"
    conversation = new_conversation(live).id
    items_url = f"{url}/{conversation}/items"

    def create(body: dict[str, object]) -> httpx.Response:
        return httpx.post(url, headers=h, json={**bind(STORE, "alice"), **body})

    def append(*items: object) -> httpx.Response:
        return httpx.post(items_url, headers=h, json={"items": list(items)})

    cases = [
        (create({"items": [{"role": "user", "content": "x"}] * 21}), 400, "items"),
        (create({"surprise": 1}), 400, "surprise"),
        (create({"metadata": {f"k{i}": "v" for i in range(17)}}), 400, "metadata"),
        (httpx.post(url, headers=h, json={"scope": {"kind": "user", "value": "a"}}), 400, "memory_store"),
        (httpx.post(url, headers=h, json={"memory_store": {"name": STORE}}), 400, "scope"),
        (create({"scope": {"kind": "user", "value": ""}}), 400, "scope.value"),
        (append({"type": "telepathy"}), 400, "items[0].type"),
        (append({"type": 7}), 400, "items[0].type"),
        (append({"type": "message", "role": "user"}), 400, "items[0].content"),
        (append({"role": "robot", "content": "x"}), 400, "items[0].role"),
        (append({"role": "user", "content": [{"type": "input_text"}]}), 400, "items[0].content[0].text"),
        (append({"role": "user", "content": "x", "colour": "red"}), 400, "items[0].colour"),
        (
            append({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}),
            400,
            "items[0].arguments",
        ),
        (append({"role": "user", "content": "x", "id": "has space"}), 400, "items[0].id"),
        (append({"role": "user", "content": "x", "status": "done"}), 400, "items[0].status"),
        (
            append(
                {"role": "user", "content": "x", "id": "m1"}, {"role": "user", "content": "y", "id": "m1"}
            ),
            400,
            "items[1].id",
        ),
        (append({"role": "user", "content": "x" * (300 * 1024)}), 413, "items[0]"),
        (append(), 400, "items"),
        (append("not an object"), 400, None),
        (append({"role": "user", "content": "nul \u0000"}), 400, None),
        (httpx.get(items_url, headers=h, params={"limit": 0}), 400, "limit"),
        (httpx.get(items_url, headers=h, params={"limit": 101}), 400, "limit"),
        (httpx.get(items_url, headers=h, params={"order": "sideways"}), 400, "order"),
        (httpx.get(items_url, headers=h, params={"after": "no-such-item"}), 400, "after"),
    ]
    for i, (response, status, field) in enumerate(cases):
        assert response.status_code == status, (i, response.text)
        body = response.json()
        assert set(body) == {"error_code", "message", "details"}, (i, body)
        if field is not None:
            assert _field(response) == field or field in body["message"], (i, body)
    # nothing of it was stored
    assert httpx.get(items_url, headers=h).json()["data"] == []

    # an item id already in the conversation: 409, and the request's other items are not added
    assert append({"role": "user", "content": "x", "id": "m1"}).status_code == 200
    again = append({"role": "user", "content": "y", "id": "m2"}, {"role": "user", "content": "z", "id": "m1"})
    assert again.status_code == 409 and again.json()["error_code"] == "ALREADY_EXISTS"
    assert [item["id"] for item in httpx.get(items_url, headers=h).json()["data"]] == ["m1"]


def test_concurrent_appends_lose_and_reorder_nothing(live):
    conversation = new_conversation(live).id
    writers, rounds = 6, 5
    failures: list[str] = []

    def writer(w: int) -> None:
        oai = client_for(live, "alice")
        for r in range(rounds):
            try:
                oai.conversations.items.create(
                    conversation,
                    items=[{"role": "user", "content": f"w{w} r{r} part{k}"} for k in range(3)],
                )
            except Exception as exc:  # collected: an assertion in a thread would be lost
                failures.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    texts = [
        item.content[0].text
        for item in client_for(live, "alice").conversations.items.list(conversation, order="asc", limit=100)
    ]
    assert len(texts) == writers * rounds * 3 and len(set(texts)) == len(texts)
    # each request's items are together and in the order sent; each writer's requests in its order
    for start in range(0, len(texts), 3):
        w_r = {t.rsplit(" ", 1)[0] for t in texts[start : start + 3]}
        assert len(w_r) == 1 and [t[-1] for t in texts[start : start + 3]] == ["0", "1", "2"]
    for w in range(writers):
        mine = [t for t in texts if t.startswith(f"w{w} ") and t.endswith("part0")]
        assert mine == [f"w{w} r{r} part0" for r in range(rounds)]


def test_erasing_a_scope_removes_its_conversations(live):
    user = f"erased-{uuid.uuid4().hex[:8]}"
    conversation = new_conversation(
        live, sub="admin", user=user, items=[{"role": "user", "content": "forget me"}]
    )
    kept = new_conversation(live, items=[{"role": "user", "content": "keep me"}])
    r = httpx.post(f"{live.url}{UC}/system/erase-scope", headers=headers(live), json={"scope": user})
    assert r.status_code == 200, r.text
    admin = client_for(live, "admin")
    with pytest.raises(openai.NotFoundError):
        admin.conversations.retrieve(conversation.id)
    assert admin.conversations.retrieve(kept.id).id == kept.id

    # deleting a scope's entries in one store deletes its conversations there too
    other = new_conversation(live, sub="admin", user=user)
    r = httpx.delete(
        f"{live.url}{UC}/memory-stores/{STORE}/entries",
        headers=headers(live),
        params={"scope": user, "all": "true"},
    )
    assert r.status_code == 200, r.text
    with pytest.raises(openai.NotFoundError):
        admin.conversations.retrieve(other.id)


def test_each_request_is_audited_on_the_store(live):
    since = int(time.time() * 1000) - 1000  # this test's events (the clock is the server's too)
    conversation = new_conversation(live, items=[{"role": "user", "content": "audit me"}])
    client_for(live, "alice").conversations.items.list(conversation.id)
    with pytest.raises(openai.PermissionDeniedError):
        client_for(live, "bob").conversations.retrieve(conversation.id)
    events = httpx.get(
        f"{live.url}{UC}/system/audit",
        headers=headers(live),
        params={"securable_full_name": STORE, "start_time": since, "page_size": 1000},
    ).json()["events"]
    mine = [e for e in events if conversation.id in str(e.get("request_params"))]
    assert {(e["action_name"], e["principal"], e["decision"]) for e in mine} == {
        ("conversations.read", "alice", "allow"),
        ("conversations.read", "bob", "deny"),
    }
    created = [e for e in events if e["action_name"] == "conversations.write" and e["principal"] == "alice"]
    assert created and {(e["securable_type"], e["securable_full_name"]) for e in created} == {
        ("MEMORY_STORE", STORE)
    }


def test_message_text_is_kept_for_search(live, database_url):
    conversation = new_conversation(
        live,
        items=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Where is my parcel?"},
                    {"type": "input_image", "image_url": "https://example.com/label.png"},
                    {"type": "input_text", "text": "Tracking 42."},
                ],
            },
            {"type": "function_call", "call_id": "c1", "name": "track", "arguments": "{}"},
            {"role": "assistant", "content": "It arrives tomorrow."},
        ],
    )

    async def stored() -> list[tuple[str, str | None]]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT type, text FROM conversation_items WHERE conversation_id = $1 ORDER BY position",
                conversation.id,
            )
        finally:
            await conn.close()
        return [(row["type"], row["text"]) for row in rows]

    assert asyncio.run(stored()) == [
        ("message", "Where is my parcel?\nTracking 42."),
        ("function_call", None),
        ("message", "It arrives tomorrow."),
    ]


def test_transcript_search_finds_a_message_by_meaning_with_the_real_model(live):
    """Episodic memory through the shipped ONNX model: a paraphrase with no word in common finds
    the message; the scope's other conversations and other scopes stay out."""
    user = f"sem-{uuid.uuid4().hex[:8]}"
    oai = client_for(live, "alice")
    oai.conversations.create(
        items=[
            {"role": "user", "content": "My daughter cannot eat peanuts, she gets a severe reaction."},
            {"role": "user", "content": "Please book a table by the window for Saturday evening."},
            {"role": "user", "content": "The quarterly report is due on the fifteenth."},
        ],
        extra_body=bind(STORE, user),
    )
    oai.conversations.create(
        items=[{"role": "user", "content": "Nut allergies run in my family."}],
        extra_body=bind(STORE, "someone-else"),
    )
    r = httpx.post(
        f"{live.url}{UC}/memory-stores/{STORE}/conversations:search",
        headers=headers(live, "rita"),  # READ only
        json={
            "scope": user,
            "query": "which foods is the child allergic to?",
            "mode": "semantic",
            "top_k": 3,
        },
    )
    assert r.status_code == 200, r.text
    hits = [hit["conversation_item"] for hit in r.json()["results"]]
    assert hits[0]["text"].startswith("My daughter cannot eat peanuts")
    assert {hit["scope"] for hit in hits} == {user}
    scores = [hit["score"] for hit in r.json()["results"]]
    assert scores == sorted(scores, reverse=True)


# --- a server with a default store: conversations created by clients that know nothing of stores ---


@pytest.fixture(scope="module")
def defaulted(live, database_url, tmp_path_factory, live_server):
    """A second server on the same database with `CATALOG_DEFAULT_CONVERSATION_STORE` set to
    `conv-default` (scopes bound to the end user; `chat-app` and alice read and write it, rita
    only reads)."""
    r = httpx.post(
        f"{live.url}{UC}/memory-stores",
        headers=headers(live),
        json={
            "name": "conv-default",
            "catalog_name": "main",
            "schema_name": "default",
            "scope_binding": "end_user",
        },
    )
    assert r.status_code == 200, r.text
    changes = [
        {"principal": "chat-app", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]},
        {"principal": "alice", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]},
        {"principal": "rita", "add": ["READ_MEMORY_STORE"]},
    ]
    r = httpx.patch(
        f"{live.url}{UC}/permissions/memory_store/{DEFAULT}", headers=headers(live), json={"changes": changes}
    )
    assert r.status_code == 200, r.text
    server = live_server(
        tmp_path_factory.mktemp("defaulted"),
        env={
            "CATALOG_DATABASE_URL": database_url,
            "CATALOG_DEFAULT_CONVERSATION_STORE": "Main.Default.Conv-Default",
        },
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def async_client() -> AsyncIterator[Callable[..., openai.AsyncOpenAI]]:
    """`openai.AsyncOpenAI` clients as `sub` (acting for `on_behalf_of`), closed when the test
    ends (one left open is closed when it is collected, on whatever event loop runs then)."""
    made: list[openai.AsyncOpenAI] = []

    def make(live, sub: str, on_behalf_of: str | None = None) -> openai.AsyncOpenAI:  # type: ignore[no-untyped-def]
        client = openai.AsyncOpenAI(
            base_url=f"{live.url}/v1", api_key=bearer(live, sub, on_behalf_of), max_retries=0
        )
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def test_an_agents_sdk_session_without_a_conversation_id_uses_the_default_store(
    defaulted, async_client
):
    """`OpenAIConversationsSession()` creates its conversation with `{"items": []}`: it goes to
    the default store, in the end user's scope, and works as any conversation does."""
    session = OpenAIConversationsSession(openai_client=async_client(defaulted, "chat-app", "carol"))
    await session.add_items(
        [
            {"role": "user", "content": "I prefer green tea"},
            {"role": "assistant", "content": "Noted: green tea."},
        ]
    )
    conversation_id = session.session_id
    assert conversation_id.startswith("conv_")
    items = await session.get_items()
    assert [(item["role"], item["content"][0]["text"]) for item in items] == [
        ("user", "I prefer green tea"),
        ("assistant", "Noted: green tea."),
    ]
    assert [item["role"] for item in await session.get_items(limit=1)] == ["assistant"]
    popped = await session.pop_item()
    assert popped is not None and popped["role"] == "assistant"
    assert len(await session.get_items()) == 1

    carol = async_client(defaulted, "chat-app", "carol")
    extra = (await carol.conversations.retrieve(conversation_id)).model_extra or {}
    assert (extra["memory_store"], extra["scope"]) == ({"name": DEFAULT}, {"kind": "user", "value": "carol"})

    # another user of the same app has a conversation of its own, and may not read carol's
    dave = OpenAIConversationsSession(openai_client=async_client(defaulted, "chat-app", "dave"))
    await dave.add_items([{"role": "user", "content": "hello"}])
    assert dave.session_id != conversation_id
    with pytest.raises(openai.PermissionDeniedError):
        await async_client(defaulted, "chat-app", "dave").conversations.items.list(conversation_id)

    await session.clear_session()
    with pytest.raises(openai.NotFoundError):
        await carol.conversations.retrieve(conversation_id)


def test_the_default_store_keeps_privileges_and_scope_binding(defaulted):
    url = f"{defaulted.url}{BASE}/conversations"

    def create(
        body: dict[str, object], sub: str = "alice", on_behalf_of: str | None = None
    ) -> httpx.Response:
        return httpx.post(url, headers=headers(defaulted, sub, on_behalf_of), json=body)

    # a caller without on_behalf_of is its own user
    r = create({"items": [{"role": "user", "content": "mine"}]})
    assert r.status_code == 200, r.text
    assert (r.json()["memory_store"], r.json()["scope"]) == (
        {"name": DEFAULT},
        {"kind": "user", "value": "alice"},
    )
    # a scope named without a store: the default store, that scope, held to its binding
    r = create({"scope": {"kind": "user", "value": "alice:project-x"}})
    assert r.status_code == 200 and r.json()["scope"]["value"] == "alice:project-x", r.text
    r = create({"scope": {"kind": "user", "value": "dave"}}, "chat-app", "carol")
    assert r.status_code == 403 and "binds scopes to the end user" in r.json()["message"], r.text
    # creating needs WRITE_MEMORY_STORE; a stranger may not use the store at all
    for sub in ("rita", "bob"):
        r = create({"items": []}, sub)
        assert (r.status_code, r.json()["error_code"]) == (403, "PERMISSION_DENIED"), (sub, r.text)
    # a store named without a scope is refused as without a default (the scope is not guessed)
    r = create({"memory_store": {"name": STORE}})
    assert (r.status_code, r.json()["details"]) == (400, [{"@type": "field_violation", "field": "scope"}])
    # a named store wins over the default
    r = create(bind(STORE, "alice"))
    assert r.status_code == 200 and r.json()["memory_store"] == {"name": STORE}, r.text

    events = httpx.get(
        f"{defaulted.url}{UC}/system/audit",
        headers=headers(defaulted),
        params={"securable_full_name": DEFAULT, "principal": "rita", "page_size": 100},
    ).json()["events"]
    assert [(e["action_name"], e["decision"], e["status_code"]) for e in events] == [
        ("conversations.write", "deny", 403)
    ]


def test_without_a_default_store_a_create_without_one_names_the_field_and_the_setting(live):
    for body in ({"items": []}, {}, {"scope": {"kind": "user", "value": "alice"}}):
        r = httpx.post(f"{live.url}/v1/conversations", headers=headers(live, "alice"), json=body)
        assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), (body, r.text)
        assert r.json()["details"] == [{"@type": "field_violation", "field": "memory_store"}]
        assert "memory_store" in r.json()["message"]
        assert "CATALOG_DEFAULT_CONVERSATION_STORE" in r.json()["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        client_for(live, "alice", base="/v1").conversations.create(items=[])
    assert "CATALOG_DEFAULT_CONVERSATION_STORE" in refused.value.body["message"]
