"""Google ADK's own memory-service tests, run against `CatalogMemoryService` over a live server.

The cases of `tests/unittests/memory/test_in_memory_memory_service.py` in google/adk-python
(Copyright 2025 Google LLC, Apache License 2.0): the same sessions, the same queries and the same
memories expected, with ADK's `InMemoryMemoryService` replaced by the catalog's. Two upstream
cases read that class's private `_session_events` (its storage layout, which no other memory
service has): here the same sessions are added and what a search then finds is asserted instead.

Then the cases ADK's keyword service answers by its tokenizer's rules (NFC text, a Latin word
inside text of another script a token of its own) and that the catalog must answer too: a word
inside Japanese or Chinese text written without spaces, text in one Unicode normal form searched
in another, full- and half-width forms, Hangul. Each is searched as the ADK adapter searches
(hybrid, top 10, `min_score` 0.5): the keyword leg must find it, and a strong match of one leg
must not be hidden by the other's silence.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Iterator

import pytest
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.genai import types

from catalog.auth import mint_dev_token
from catalog.client import Client
from catalog.client.adk import CatalogMemoryService
from catalog.settings import Settings

MOCK_APP_NAME = "test-app"
MOCK_USER_ID = "test-user"
MOCK_OTHER_USER_ID = "another-user"


def _event(event_id: str, author: str, timestamp: float, text: str | None) -> Event:
    content = types.Content(parts=[types.Part(text=text)]) if text is not None else None
    return Event(
        id=event_id, invocation_id=f"inv-{event_id}", author=author, timestamp=timestamp, content=content
    )


MOCK_SESSION_1 = Session(
    app_name=MOCK_APP_NAME,
    user_id=MOCK_USER_ID,
    id="session-1",
    last_update_time=1000,
    events=[
        _event("event-1a", "user", 12345, "The ADK is a great toolkit."),
        _event("event-1b", "user", 12346, None),  # no content: ignored by the service
        _event("event-1c", "model", 12347, "I agree. The Agent Development Kit (ADK) rocks!"),
    ],
)
MOCK_SESSION_2 = Session(
    app_name=MOCK_APP_NAME,
    user_id=MOCK_USER_ID,
    id="session-2",
    last_update_time=2000,
    events=[_event("event-2a", "user", 54321, "I like to code in Python.")],
)
MOCK_SESSION_DIFFERENT_USER = Session(
    app_name=MOCK_APP_NAME,
    user_id=MOCK_OTHER_USER_ID,
    id="session-3",
    last_update_time=3000,
    events=[_event("event-3a", "user", 60000, "This is a secret.")],
)
MOCK_SESSION_WITH_NO_EVENTS = Session(
    app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, id="session-4", last_update_time=4000
)


@pytest.fixture
def memory_service(live) -> Iterator[CatalogMemoryService]:
    """A memory service over a store of its own (each test starts from nothing, as upstream)."""
    token = mint_dev_token(Settings(data_dir=live.data_dir), "admin")
    with Client(live.url, token) as admin:
        store = admin.memory_stores.create(f"main.default.adk_{uuid.uuid4().hex[:8]}").full_name
    service = CatalogMemoryService(store, url=live.url, token=token)
    yield service
    service.close()


def texts(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [memory.content.parts[0].text for memory in result.memories]


# --- upstream cases ------------------------------------------------------------------------------


async def test_add_session_to_memory(memory_service):
    # upstream reads `_session_events`: the session's two events with text are kept, the third not
    await memory_service.add_session_to_memory(MOCK_SESSION_1)
    result = await memory_service.search_memory(app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query="ADK")
    assert sorted(texts(result)) == [
        "I agree. The Agent Development Kit (ADK) rocks!",
        "The ADK is a great toolkit.",
    ]


async def test_add_session_with_no_events_to_memory(memory_service):
    # upstream reads `_session_events`: adding it raises nothing and leaves nothing to find
    await memory_service.add_session_to_memory(MOCK_SESSION_WITH_NO_EVENTS)
    result = await memory_service.search_memory(app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query="ADK")
    assert not result.memories


async def test_search_memory_simple_match(memory_service):
    await memory_service.add_session_to_memory(MOCK_SESSION_1)
    await memory_service.add_session_to_memory(MOCK_SESSION_2)
    result = await memory_service.search_memory(app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query="Python")
    assert len(result.memories) == 1
    assert result.memories[0].content.parts[0].text == "I like to code in Python."
    assert result.memories[0].author == "user"


async def test_search_memory_case_insensitive_match(memory_service):
    await memory_service.add_session_to_memory(MOCK_SESSION_1)
    result = await memory_service.search_memory(
        app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query="development"
    )
    assert texts(result) == ["I agree. The Agent Development Kit (ADK) rocks!"]


async def test_search_memory_multiple_matches(memory_service):
    await memory_service.add_session_to_memory(MOCK_SESSION_1)
    result = await memory_service.search_memory(
        app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query="How about ADK?"
    )
    assert len(result.memories) == 2
    assert set(texts(result)) == {
        "The ADK is a great toolkit.",
        "I agree. The Agent Development Kit (ADK) rocks!",
    }


async def test_search_memory_no_match(memory_service):
    await memory_service.add_session_to_memory(MOCK_SESSION_1)
    result = await memory_service.search_memory(
        app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query="nonexistent"
    )
    assert not result.memories


async def test_search_memory_is_scoped_by_user(memory_service):
    await memory_service.add_session_to_memory(MOCK_SESSION_1)
    await memory_service.add_session_to_memory(MOCK_SESSION_DIFFERENT_USER)
    result = await memory_service.search_memory(app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query="secret")
    assert not result.memories
    other = await memory_service.search_memory(
        app_name=MOCK_APP_NAME, user_id=MOCK_OTHER_USER_ID, query="secret"
    )
    assert texts(other) == ["This is a secret."]


# --- scripts and normal forms ---------------------------------------------------------------------

NFD = unicodedata.normalize("NFD", "Café au lait every morning")

SCRIPTS = [
    ("私の名前は太郎です", "太郎"),
    ("我用Python写代码", "python"),
    ("我用Python写代码", "代码"),
    (NFD, "café"),  # decomposed text, composed query
    (unicodedata.normalize("NFC", "Café au lait every morning"), unicodedata.normalize("NFD", "Café")),
    ("ｶﾀｶﾅで書いたメモ", "カタカナ"),  # half-width katakana, full-width query
    ("ＡＢＣ株式会社の請求書", "ABC"),  # full-width Latin letters
    ("서울에서 회의가 있습니다", "서울"),
    ("東京の天気は晴れです", "天気"),
]


@pytest.mark.parametrize(("text", "query"), SCRIPTS)
async def test_a_word_in_any_script_or_normal_form_is_found(memory_service, text: str, query: str):
    for number, said in enumerate((text, "The weather is nice today.")):
        session = Session(
            app_name=MOCK_APP_NAME,
            user_id=MOCK_USER_ID,
            id=f"s{number}",
            last_update_time=1,
            events=[_event(f"e{number}", "user", 1.0 + number, said)],
        )
        await memory_service.add_session_to_memory(session)
    result = await memory_service.search_memory(app_name=MOCK_APP_NAME, user_id=MOCK_USER_ID, query=query)
    assert texts(result) == [text], (text, query, texts(result))
