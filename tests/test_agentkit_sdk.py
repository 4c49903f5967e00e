"""The public AgentKit SDK (`databricks-agentbricks`) end to end against a live server, and the
same entries read back through the Unity Catalog dialect."""

from __future__ import annotations

import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks_agentkit import AgentKitClient
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings


def token_for(live, sub: str) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub)


def kit(live, sub: str):  # type: ignore[no-untyped-def]
    return AgentKitClient(
        WorkspaceClient(host=live.url, token=token_for(live, sub), auth_type="pat")
    ).memory_stores


def test_agentkit_sdk_end_to_end(live):
    stores = kit(live, "admin")
    store = stores.create("support-memory", description="what the support agent learned")
    assert store.id == "support-memory" and store.description == "what the support agent learned"
    assert stores.get("support-memory").display_name == "support-memory"
    assert "support-memory" in [s.id for s in stores.list()]

    first = store.add(actor_id="user-1", path="/prefs.md", content="Prefers email.", description="contact")
    assert first.actor_id == "user-1" and first.content == "Prefers email." and first.session_id is None
    with pytest.raises(Exception) as conflict:
        store.add(actor_id="user-1", path="/prefs.md", content="again")
    assert getattr(conflict.value, "error_code", None) == "ALREADY_EXISTS"

    # put() overwrites, put(append=True) appends once (a retry changes nothing)
    store.put(actor_id="user-1", path="/prefs.md", content="Prefers email over calls.")
    store.put(actor_id="user-1", path="/prefs.md", content="Short answers.", append=True)
    store.put(actor_id="user-1", path="/prefs.md", content="Short answers.", append=True)
    # a session entry beside the one without a session
    in_session = store.add(
        actor_id="user-1", path="/prefs.md", content="This chat: be formal.", session_id="s-1"
    )
    store.add(actor_id="user-1", path="/notes/trip.md", content="Trip to the Dolomites in September.")

    by_path = list(store.list(actor_id="user-1", path="/prefs.md"))
    assert sorted((m.session_id or "") for m in by_path) == ["", "s-1"]
    no_session = next(m for m in by_path if m.session_id is None)
    assert no_session.content == "Prefers email over calls.\nShort answers."
    assert [m.path for m in store.list(actor_id="user-1", path_prefix="/notes/")] == ["/notes/trip.md"]
    assert [m.session_id for m in store.list(actor_id="user-1", session_id="s-1")] == ["s-1"]
    assert store.get(in_session.id).content == "This chat: be formal."

    hits = store.search(actor_id="user-1", query="Dolomites trip")
    assert hits[0].memory.path == "/notes/trip.md" and hits[0].score is not None

    updated = no_session.update(content="Prefers email.", description="contact preferences")
    assert updated.content == "Prefers email." and updated.description == "contact preferences"
    in_session.delete()
    assert [m.session_id for m in store.list(actor_id="user-1", path="/prefs.md")] == [None]

    # the same entries through the Unity Catalog dialect
    headers = {"Authorization": f"Bearer {token_for(live, 'admin')}"}
    r = httpx.get(
        f"{live.url}{UC}/memory-stores/main.default.support-memory/entries:get",
        params={"scope": "user-1", "path": "/prefs.md"},
        headers=headers,
    )
    assert r.status_code == 200 and r.json()["contents"] == "Prefers email."

    # a grantee may use the store at once (account users already use main and main.default)
    stranger = kit(live, "agent-app")
    with pytest.raises(Exception) as denied:
        stranger.get("support-memory").list(actor_id="user-1")
    assert getattr(denied.value, "error_code", None) == "PERMISSION_DENIED"
    store.grant_permission("agent-app", permission="WRITE")
    granted = stranger.get("support-memory")
    assert [m.path for m in granted.list(actor_id="user-1")] == ["/notes/trip.md", "/prefs.md"]
    granted.add(actor_id="user-2", path="/x.md", content="written by the app")

    stores.get("support-memory").delete()
    with pytest.raises(Exception) as gone:
        stores.get("support-memory")
    assert getattr(gone.value, "error_code", None) == "NOT_FOUND"  # a memory-store route's 404


def test_store_ids_are_validated(live):
    headers = {"Authorization": f"Bearer {token_for(live, 'admin')}"}
    for bad in ("ab", "Upper", "1abc", "abc-", "a" * 57, "has_underscore"):
        r = httpx.post(
            f"{live.url}/api/2.0/agents/memory-stores",
            params={"managed_memory_store_id": bad},
            json={"display_name": bad},
            headers=headers,
        )
        assert r.status_code == 400, bad
        assert "managed_memory_store_id" in r.json()["message"]
