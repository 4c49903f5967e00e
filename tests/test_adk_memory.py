"""Google ADK's memory over a memory store (`catalog.client.adk.CatalogMemoryService`), with the
real `google-adk` package against a live server: sessions and memories in, ADK `MemoryEntry`s
out, users, apps and projects kept apart, deletes and erasure, refusals, the same answers as ADK's
own `InMemoryMemoryService` for exact keywords, and a real `Agent` + `Runner` whose `load_memory`
tool finds what an earlier session said."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Iterator
from datetime import UTC, datetime

import pytest
from google.adk.agents import Agent
from google.adk.events.event import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.adk.tools import load_memory
from google.genai import types
from rest import UC

from catalog.auth import mint_dev_token
from catalog.client import AsyncClient, CatalogError, Client
from catalog.client.adk import CatalogMemoryService, scope_of
from catalog.settings import Settings

T0 = 1_790_000_000.25  # an event's time (epoch seconds)


def token_for(live, sub: str) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub)


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(live) -> Iterator[Client]:
    with Client(live.url, token_for(live, "admin")) as client:
        yield client


@pytest.fixture
def store(admin) -> str:
    return admin.memory_stores.create(f"main.default.{unique('adk_')}").full_name


@pytest.fixture
def memory(live, store) -> Iterator[CatalogMemoryService]:
    service = CatalogMemoryService(store, url=live.url, token=token_for(live, "admin"))
    yield service
    service.close()


def text_event(event_id: str, author: str, text: str, at: float = T0) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        id=event_id,
        invocation_id="inv",
        author=author,
        timestamp=at,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
    )


def session(app: str, user: str, session_id: str, events: list[Event]) -> Session:
    return Session(id=session_id, app_name=app, user_id=user, events=events)


def trip_events() -> list[Event]:
    return [
        text_event("ev-ask", "user", "We hiked in the Dolomites last summer", T0),
        text_event("ev-answer", "travel_agent", "Noted: the Dolomites, in summer", T0 + 1),
        Event(  # a tool call: no text, no memory
            id="ev-call",
            invocation_id="inv",
            author="travel_agent",
            timestamp=T0 + 2,
            content=types.Content(
                role="model", parts=[types.Part(function_call=types.FunctionCall(name="book", args={}))]
            ),
        ),
        Event(  # a thought and a text: only the text is kept
            id="ev-thought",
            invocation_id="inv",
            author="travel_agent",
            timestamp=T0 + 3,
            content=types.Content(
                role="model",
                parts=[types.Part(text="secret reasoning", thought=True), types.Part(text="Booked Lyon")],
            ),
        ),
    ]


def found(response) -> set[tuple[str | None, str | None, str]]:  # type: ignore[no-untyped-def]
    return {(m.id, m.author, " ".join(p.text for p in m.content.parts if p.text)) for m in response.memories}


async def test_a_session_added_is_found_as_adk_memory_entries(memory, admin, store):
    user = unique("u")
    await memory.add_session_to_memory(session("travel:app", user, "trip-1", trip_events()))

    scope = f"{user}:travel%3Aapp"
    assert scope_of("travel:app", user) == scope
    listed = [e.path for e in admin.store(store).list(scope)]
    assert listed == ["/sessions/trip-1/ev-answer", "/sessions/trip-1/ev-ask", "/sessions/trip-1/ev-thought"]

    answer = await memory.search_memory(app_name="travel:app", user_id=user, query="Dolomites")
    by_id = {m.id: m for m in answer.memories}
    assert set(by_id) == {"ev-ask", "ev-answer"}
    ask = by_id["ev-ask"]
    assert (ask.author, ask.content.role, [p.text for p in ask.content.parts]) == (
        "user",
        "user",
        ["We hiked in the Dolomites last summer"],
    )
    assert datetime.fromisoformat(ask.timestamp).timestamp() == T0
    assert datetime.fromisoformat(ask.timestamp).utcoffset().total_seconds() == 0
    assert by_id["ev-answer"].author == "travel_agent" and by_id["ev-answer"].content.role == "model"
    assert datetime.fromisoformat(by_id["ev-answer"].timestamp).timestamp() == T0 + 1
    assert ask.custom_metadata == {}

    lyon = await memory.search_memory(app_name="travel:app", user_id=user, query="Lyon")
    assert found(lyon) == {("ev-thought", "travel_agent", "Booked Lyon")}
    assert (await memory.search_memory(app_name="travel:app", user_id=user, query="reasoning")).memories == []
    assert (await memory.search_memory(app_name="travel:app", user_id=user, query="  ")).memories == []


async def test_adding_a_session_again_duplicates_nothing(memory, admin, store):
    user = unique("u")
    events = trip_events()
    await memory.add_session_to_memory(session("app", user, "trip-1", events))
    entries = admin.store(store)
    before = {
        e.path: entries.get(scope_of("app", user), e.path).etag for e in entries.list(scope_of("app", user))
    }

    events.append(text_event("ev-later", "user", "And the Dolomites again in winter", T0 + 9))
    await memory.add_session_to_memory(session("app", user, "trip-1", events))
    await memory.add_session_to_memory(session("app", user, "trip-1", events))
    after = {
        e.path: entries.get(scope_of("app", user), e.path).etag for e in entries.list(scope_of("app", user))
    }
    assert after == {**before, "/sessions/trip-1/ev-later": "1"}  # the others were not written again

    answer = await memory.search_memory(app_name="app", user_id=user, query="Dolomites")
    assert sorted(m.id for m in answer.memories) == ["ev-answer", "ev-ask", "ev-later"]

    # the same event ids in another session are other memories; add_events_to_memory adds deltas
    await memory.add_events_to_memory(
        app_name="app", user_id=user, session_id="trip-2", events=[events[0], events[-1]]
    )
    await memory.add_events_to_memory(app_name="app", user_id=user, session_id="trip-2", events=[events[0]])
    await memory.add_events_to_memory(app_name="app", user_id=user, events=[events[0]])  # no session
    paths = [e.path for e in entries.list(scope_of("app", user))]
    assert paths.count("/sessions/trip-2/ev-ask") == 1 and "/events/ev-ask" in paths and len(paths) == 7


async def test_apps_and_users_never_mix(memory):
    alice, bob = unique("alice"), unique("bob")
    await memory.add_session_to_memory(
        session("app-a", alice, "s", [text_event("e-a", "user", "kumquat jam in app a")])
    )
    await memory.add_session_to_memory(
        session("app-b", alice, "s", [text_event("e-b", "user", "kumquat jam in app b")])
    )
    await memory.add_session_to_memory(
        session("app-a", bob, "s", [text_event("e-c", "user", "kumquat jam, bob")])
    )

    async def ids(app: str, user: str) -> set[str | None]:
        return {
            m.id for m in (await memory.search_memory(app_name=app, user_id=user, query="kumquat")).memories
        }

    assert await ids("app-a", alice) == {"e-a"}
    assert await ids("app-b", alice) == {"e-b"}
    assert await ids("app-a", bob) == {"e-c"}
    assert await ids("app-b", bob) == set()
    # an app named like a user's composite scope stays inside the user's scope
    assert await ids("app-a:x", alice) == set()
    with pytest.raises(ValueError, match="':'"):
        await memory.search_memory(app_name="app-a", user_id=f"{alice}:app-a", query="kumquat")


async def test_delete_one_memory_and_all_of_a_users_in_an_app(memory, admin, store):
    user = unique("u")
    await memory.add_session_to_memory(session("app", user, "trip-1", trip_events()))
    await memory.add_session_to_memory(
        session("other", user, "s", [text_event("e-o", "user", "Dolomites too")])
    )
    await memory.add_memory(
        app_name="app",
        user_id=user,
        memories=[MemoryEntry(id="fact-1", content=types.Content(parts=[types.Part(text="Dolomites fact")]))],
    )

    await memory.delete_memory(app_name="app", user_id=user, memory_id="ev-ask")
    answer = await memory.search_memory(app_name="app", user_id=user, query="Dolomites")
    assert {m.id for m in answer.memories} == {"ev-answer", "fact-1"}
    await memory.delete_memory(app_name="app", user_id=user, memory_id="fact-1")
    await memory.delete_memory(app_name="app", user_id=user, memory_id="no-such-id")  # nothing to delete
    assert [e.path for e in admin.store(store).list(scope_of("app", user))] == [
        "/sessions/trip-1/ev-answer",
        "/sessions/trip-1/ev-thought",
    ]
    with pytest.raises(ValueError):
        await memory.delete_memory(app_name="app", user_id=user, memory_id="")

    await memory.delete_session(app_name="app", user_id=user, session_id="trip-1")
    assert list(admin.store(store).list(scope_of("app", user))) == []
    await memory.add_session_to_memory(session("app", user, "trip-1", trip_events()))
    await memory.delete_memory(app_name="app", user_id=user)  # every memory of the user in the app
    assert list(admin.store(store).list(scope_of("app", user))) == []
    assert (await memory.search_memory(app_name="app", user_id=user, query="Dolomites")).memories == []
    with pytest.raises(CatalogError) as gone:  # history too
        admin.store(store).history(scope_of("app", user), "/sessions/trip-1/ev-ask")
    assert gone.value.status == 404
    other = await memory.search_memory(app_name="other", user_id=user, query="Dolomites")
    assert {m.id for m in other.memories} == {"e-o"}  # another app of the user stays


async def test_add_memory_with_ids_metadata_and_ttl(memory, admin, store):
    user = unique("u")
    fact = MemoryEntry(
        id="diet",
        author="profile",
        timestamp="2026-05-01T09:00:00+02:00",
        content=types.Content(role="user", parts=[types.Part(text="Vegetarian, no mushrooms")]),
        custom_metadata={"topic": "food", "confirmed": True},
    )
    await memory.add_memory(
        app_name="app", user_id=user, memories=[fact], custom_metadata={"source": "form", "topic": "x"}
    )
    (hit,) = (await memory.search_memory(app_name="app", user_id=user, query="mushrooms")).memories
    assert (hit.id, hit.author, hit.timestamp, hit.content.role) == (
        "diet",
        "profile",
        "2026-05-01T09:00:00+02:00",
        "user",
    )
    assert hit.custom_metadata == {"topic": "food", "confirmed": True, "source": "form"}  # the memory's win

    replaced = fact.model_copy(
        update={"content": types.Content(parts=[types.Part(text="Vegan, no mushrooms")])}
    )
    await memory.add_memory(app_name="app", user_id=user, memories=[replaced])  # the same id: replaced
    hits = (await memory.search_memory(app_name="app", user_id=user, query="mushrooms")).memories
    assert [(m.id, m.content.parts[0].text) for m in hits] == [("diet", "Vegan, no mushrooms")]

    unnamed = MemoryEntry(content=types.Content(parts=[types.Part(text="Likes trains")]))
    await memory.add_memory(
        app_name="app", user_id=user, memories=[unnamed], custom_metadata={"ttl_seconds": 3600}
    )
    (train,) = (await memory.search_memory(app_name="app", user_id=user, query="trains")).memories
    assert train.id and train.id != "diet" and train.timestamp
    entry = admin.store(store).get(scope_of("app", user), f"/memories/{train.id}")
    assert entry.expires_at is not None and entry.source_type == "adk"

    for bad in ({"adk.id": "x"}, {"nested": {"a": 1}}, {"ttl_seconds": "1h"}):
        with pytest.raises(ValueError):
            await memory.add_memory(app_name="app", user_id=user, memories=[unnamed], custom_metadata=bad)
    with pytest.raises(ValueError, match="no text"):
        await memory.add_memory(
            app_name="app", user_id=user, memories=[MemoryEntry(content=types.Content(parts=[]))]
        )


async def test_erasing_the_subject_erases_every_app_and_project(memory, admin):
    user, other = unique("u"), unique("u")
    for app in ("app-a", "app-b"):
        await memory.add_session_to_memory(
            session(app, user, "s", [text_event("e1", "user", "quokka selfie")])
        )
    await memory.for_project("p").add_events_to_memory(
        app_name="app-a", user_id=user, session_id="s", events=[text_event("e2", "user", "quokka project")]
    )
    await memory.add_session_to_memory(
        session("app-a", other, "s", [text_event("e3", "user", "quokka, other")])
    )
    assert (
        len(
            (
                await memory.for_project("p").search_memory(app_name="app-a", user_id=user, query="quokka")
            ).memories
        )
        == 2
    )

    erased = admin.request("POST", f"{UC}/system/erase-subject", json={"subject": user})
    assert sum(erased["erased"].values()) == 3

    for app in ("app-a", "app-b"):
        assert (await memory.search_memory(app_name=app, user_id=user, query="quokka")).memories == []
    assert (
        await memory.for_project("p").search_memory(app_name="app-a", user_id=user, query="quokka")
    ).memories == []
    kept = await memory.search_memory(app_name="app-a", user_id=other, query="quokka")
    assert {m.id for m in kept.memories} == {"e3"}


async def test_projects_as_the_rust_edition_scopes_them(memory, admin, store):
    user = unique("u")
    await memory.add_session_to_memory(session("app", user, "s0", [text_event("g", "user", "wombat global")]))
    launch = memory.for_project("launch")
    await launch.add_session_to_memory(
        session("app", user, "s1", [text_event("p1", "user", "wombat launch")])
    )
    await memory.add_events_to_memory(  # custom_metadata names the project too
        app_name="app",
        user_id=user,
        session_id="s2",
        events=[text_event("p2", "user", "wombat launch two")],
        custom_metadata={"project": "launch", "team": "red"},
    )
    await memory.add_memory(
        app_name="app",
        user_id=user,
        memories=[MemoryEntry(id="m", content=types.Content(parts=[types.Part(text="wombat beta")]))],
        project="beta/1",
    )
    assert [e.path for e in admin.store(store).list(f"{user}:app:launch")] == [
        "/sessions/s1/p1",
        "/sessions/s2/p2",
    ]
    assert [e.path for e in admin.store(store).list(f"{user}:app:beta%2F1")] == ["/memories/m"]

    async def ids(service: CatalogMemoryService, **kw) -> dict[str | None, object]:  # type: ignore[no-untyped-def]
        answer = await service.search_memory(app_name="app", user_id=user, query="wombat", **kw)
        return {m.id: m.custom_metadata.get("project") for m in answer.memories}

    assert await ids(memory) == {"g": None}  # no project: the global memories only
    assert await ids(launch) == {"g": None, "p1": "launch", "p2": "launch"}  # global and the project's
    assert await ids(memory, project="launch") == await ids(launch)
    assert await ids(memory, project="beta/1") == {"g": None, "m": "beta/1"}
    team = await launch.search_memory(app_name="app", user_id=user, query="two")
    assert [m.custom_metadata for m in team.memories] == [{"team": "red", "project": "launch"}]

    await launch.delete_memory(app_name="app", user_id=user, memory_id="p1")
    assert await ids(launch) == {"g": None, "p2": "launch"}
    await launch.delete_memory(app_name="app", user_id=user)  # the project's scope only
    assert await ids(launch) == {"g": None}
    assert await ids(memory, project="beta/1") == {"g": None, "m": "beta/1"}

    with pytest.raises(ValueError, match="differ"):
        await memory.add_events_to_memory(
            app_name="app", user_id=user, events=[], project="a", custom_metadata={"project": "b"}
        )


async def test_a_principal_without_read_gets_permission_denied(live, admin, store):
    writer = unique("writer")
    admin.grants.update("catalog", "main", writer, add=["USE_CATALOG"])
    admin.grants.update("schema", "main.default", writer, add=["USE_SCHEMA"])
    admin.grants.update("memory_store", store, writer, add=["WRITE_MEMORY_STORE"])
    user = unique("u")
    with Client(live.url, token_for(live, writer)) as client:
        service = CatalogMemoryService(store, client=client)
        # it may write: a session goes in (the writes skip what is there without reading it)
        await service.add_session_to_memory(session("app", user, "s", trip_events()))
        await service.add_session_to_memory(session("app", user, "s", trip_events()))
        with pytest.raises(CatalogError) as denied:
            await service.search_memory(app_name="app", user_id=user, query="Dolomites")
    assert (denied.value.status, denied.value.error_code) == (403, "PERMISSION_DENIED")
    assert "READ_MEMORY_STORE" in denied.value.message
    assert len(list(admin.store(store).list(scope_of("app", user)))) == 3

    async with AsyncClient(live.url, token_for(live, unique("stranger"))) as stranger:
        with pytest.raises(CatalogError) as refused:
            await CatalogMemoryService(store, client=stranger).add_session_to_memory(
                session("app", user, "s2", trip_events())
            )
    assert (refused.value.status, refused.value.error_code) == (403, "PERMISSION_DENIED")


async def test_the_same_memories_as_adks_in_memory_service(memory):
    user = unique("u")
    theirs = InMemoryMemoryService()
    first = [
        text_event("e-sister", "user", "My sister lives in Reykjavik", T0),
        text_event("e-lovely", "assistant", "Reykjavik is lovely in June", T0 + 1),
        text_event("e-bassoon", "user", "I play the bassoon", T0 + 2),
    ]
    # (ids that do not end in a number: hybrid search lifts an entry whose path ends in one towards
    # a better hit among its numbered neighbours, which keyword matching does not do)
    second = [
        text_event("e-lesson", "user", "The bassoon lesson moved to Friday", T0 + 10),
        text_event("e-friday", "assistant", "Friday it is", T0 + 11),
    ]
    for service in (memory, theirs):
        await service.add_session_to_memory(session("app", user, "one", first))
        await service.add_session_to_memory(session("app", user, "two", second))
        await service.add_session_to_memory(session("app", user, "one", first))  # again
        await service.add_session_to_memory(session("app", "someone-else", "x", second))
    for query in ("Reykjavik", "bassoon", "Friday", "sister", "zeppelin"):
        mine = await memory.search_memory(app_name="app", user_id=user, query=query)
        reference = await theirs.search_memory(app_name="app", user_id=user, query=query)
        assert found(mine) == found(reference), query
        assert {datetime.fromisoformat(m.timestamp).timestamp() for m in mine.memories} == {
            datetime.fromisoformat(m.timestamp).timestamp() for m in reference.memories
        }
    for service in (memory, theirs):
        await service.delete_memory(app_name="app", user_id=user, memory_id="e-bassoon")
    mine = await memory.search_memory(app_name="app", user_id=user, query="bassoon")
    assert found(mine) == found(await theirs.search_memory(app_name="app", user_id=user, query="bassoon"))
    assert {m.id for m in mine.memories} == {"e-lesson"}


class ScriptedModel(BaseLlm):
    """A model that answers from a script: asked to recall, it calls `load_memory`; given the
    tool's answer, it replies with the memories it got; otherwise it says it noted it."""

    model: str = "scripted"
    seen: list[LlmRequest] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append(llm_request)
        last = llm_request.contents[-1]
        answers = [p.function_response for p in last.parts or [] if p.function_response]
        if answers:  # load_memory's answer: {"result": LoadMemoryResponse(memories=[MemoryEntry])}
            memories = answers[0].response["result"].memories
            texts = [part.text for m in memories for part in m.content.parts]
            reply = types.Part(text="I remember: " + " | ".join(texts))
        elif "pet" in (last.parts[0].text or ""):
            call = types.FunctionCall(name="load_memory", args={"query": "platypus"})
            reply = types.Part(function_call=call)
        else:
            reply = types.Part(text="Noted.")
        yield LlmResponse(content=types.Content(role="model", parts=[reply]))


async def test_an_adk_agent_recalls_an_earlier_session_with_load_memory(memory):
    user = unique("u")
    model = ScriptedModel(seen=[])
    agent = Agent(name="assistant", model=model, instruction="Help the user.", tools=[load_memory])
    sessions = InMemorySessionService()
    runner = Runner(app_name="pets", agent=agent, session_service=sessions, memory_service=memory)

    async def say(session_id: str, text: str) -> list[Event]:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        return [e async for e in runner.run_async(user_id=user, session_id=session_id, new_message=message)]

    first = await sessions.create_session(app_name="pets", user_id=user)
    await say(first.id, "I adopted a platypus called Perry")
    done = await sessions.get_session(app_name="pets", user_id=user, session_id=first.id)
    await memory.add_session_to_memory(done)

    second = await sessions.create_session(app_name="pets", user_id=user)
    events = await say(second.id, "What is my pet called?")
    calls = [
        p.function_call for e in events for p in (e.content.parts if e.content else []) if p.function_call
    ]
    assert [(c.name, c.args) for c in calls] == [("load_memory", {"query": "platypus"})]
    final = events[-1].content.parts[0].text
    assert final.startswith("I remember: ") and "I adopted a platypus called Perry" in final
    assert "Noted." not in final  # the model's own answer of the first session holds no 'platypus'
    # the tool's answer the model read came from the store, with the event's id and author
    (answer,) = [p.function_response for p in model.seen[-1].contents[-1].parts if p.function_response]
    (remembered,) = answer.response["result"].memories
    assert (remembered.author, remembered.id) == ("user", done.events[0].id)
    assert remembered.timestamp == datetime.fromtimestamp(done.events[0].timestamp, tz=UTC).isoformat()
