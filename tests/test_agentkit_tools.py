"""The AgentKit SDK's own long-term memory tools (`memory_tools()` for the OpenAI Agents SDK and
for LangGraph) pointed at a live server, called the way each framework calls a tool (no model in
the loop), and what the server then holds read back through the Unity Catalog dialect."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
from agents.tool import default_tool_error_function
from agents.tool_context import ToolContext
from databricks.sdk import WorkspaceClient
from databricks_agentbricks.errors import AgentCliError
from databricks_agentkit import AgentKitClient
from databricks_agentkit.langgraph.memory import memory_tools as langgraph_memory_tools
from databricks_agentkit.openai.memory import memory_tools as openai_memory_tools
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings

FRAMEWORKS = ["openai", "langgraph"]
# What the OpenAI Agents SDK hands the model when a tool raises (its default failure_error_function,
# whose wording changes between releases): the error itself stays out of the model's context.
OPENAI_TOOL_FAILURE = default_tool_error_function(None, RuntimeError("the server's refusal"))  # type: ignore[arg-type]

Tool = Callable[..., str]


def token_for(live, sub: str, on_behalf_of: str | None = None) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub, on_behalf_of=on_behalf_of)


def headers(live, sub: str = "admin", on_behalf_of: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_for(live, sub, on_behalf_of)}"}


@pytest.fixture
def store(live) -> Iterator[str]:
    """A store of the test's own (the module's tests share one database), made by the admin."""
    sid = f"tools-{uuid.uuid4().hex[:10]}"
    kit = AgentKitClient(WorkspaceClient(host=live.url, token=token_for(live, "admin"), auth_type="pat"))
    kit.memory_stores.create(sid, description="long-term memory of an assistant")
    yield sid
    kit.memory_stores.get(sid).delete()


@pytest.fixture
def signed_in(live, monkeypatch, tmp_path) -> Callable[..., None]:
    """`signed_in("alice")`: the environment the tools authenticate from (they build their own
    `WorkspaceClient()`) names the live server and a token for alice, and nothing else."""

    def sign_in(sub: str, on_behalf_of: str | None = None) -> None:
        monkeypatch.setenv("DATABRICKS_HOST", live.url)
        monkeypatch.setenv("DATABRICKS_TOKEN", token_for(live, sub, on_behalf_of))
        monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "no-databrickscfg"))
        for name in (
            "DATABRICKS_CLIENT_ID",
            "DATABRICKS_CLIENT_SECRET",
            "DATABRICKS_WORKSPACE_ID",
            "DATABRICKS_AUTH_TYPE",
            "AGENT_MEMORY_STORE",
        ):
            monkeypatch.delenv(name, raising=False)

    return sign_in


def tools_for(framework: str, actor: str, store: str | None = None) -> dict[str, Tool]:
    """The tools by name (the store: `store`, else AGENT_MEMORY_STORE), each a function of the
    tool's JSON arguments answering what the model would be shown: for OpenAI Agents through
    `on_invoke_tool`, for LangChain through `.invoke`."""
    if framework == "openai":
        built = openai_memory_tools(actor, store=store)

        def openai_call(tool) -> Tool:  # type: ignore[no-untyped-def]
            def call(**args: object) -> str:
                raw = json.dumps(args)
                context = ToolContext(
                    context=None, tool_name=tool.name, tool_call_id="call-1", tool_arguments=raw
                )
                return str(asyncio.run(tool.on_invoke_tool(context, raw)))

            return call

        return {tool.name: openai_call(tool) for tool in built}
    langchain = langgraph_memory_tools(actor, store=store)
    return {tool.name: (lambda t: lambda **args: str(t.invoke(args)))(tool) for tool in langchain}


# The Unity Catalog dialect reads as the admin acting for the user `scope` (a store bound to the
# end user lets nobody else read that scope).


def uc_entry(live, store: str, scope: str, path: str, session_id: str | None = None) -> httpx.Response:
    params = {"scope": scope, "path": path}
    if session_id is not None:
        params["session_id"] = session_id
    return httpx.get(
        f"{live.url}{UC}/memory-stores/main.default.{store}/entries:get",
        params=params,
        headers=headers(live, on_behalf_of=scope),
    )


def uc_paths(live, store: str, scope: str) -> list[str]:
    r = httpx.get(
        f"{live.url}{UC}/memory-stores/main.default.{store}/entries",
        params={"scope": scope},
        headers=headers(live, on_behalf_of=scope),
    )
    assert r.status_code == 200, r.text
    return sorted(e["path"] for e in r.json()["entries"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_memory_tools_remember_recall_list_forget(live, store, signed_in, monkeypatch, framework):
    signed_in("assistant-app")
    # the app may use the store it was granted (READ and WRITE)
    admin = AgentKitClient(WorkspaceClient(host=live.url, token=token_for(live, "admin"), auth_type="pat"))
    admin.memory_stores.get(store).grant_permission("assistant-app", permission="WRITE")
    assert tools_for(framework, "ana@example.com") == {}  # no store configured: no tools
    monkeypatch.setenv("AGENT_MEMORY_STORE", store)
    tools = tools_for(framework, "ana@example.com")
    assert sorted(tools) == ["forget", "list_memories", "recall", "remember"]

    assert tools["list_memories"]() == "No memories yet."
    assert tools["recall"](query="how to contact them") == "No relevant memories."

    assert tools["remember"](fact="Prefers email over phone.", topic="Preferences") == (
        "Remembered in /preferences.md."
    )
    # a second fact is appended as a line; the same fact again (spacing aside) changes nothing
    assert tools["remember"](fact="Likes  short answers.", topic="preferences") == (
        "Remembered in /preferences.md."
    )
    tools["remember"](fact="Prefers email over phone.", topic="preferences")
    assert tools["remember"](fact="Trip to the Dolomites in September.", topic="Café trips") == (
        "Remembered in /cafe-trips.md."
    )
    assert tools["remember"](fact="   ", topic="preferences") == "Nothing to remember: the fact is empty."

    # what the server holds: one entry per topic in the actor's scope, without a session
    prefs = uc_entry(live, store, "ana@example.com", "/preferences.md")
    assert prefs.status_code == 200, prefs.text
    assert prefs.json()["contents"] == "Prefers email over phone.\nLikes short answers."
    assert uc_paths(live, store, "ana@example.com") == ["/cafe-trips.md", "/preferences.md"]
    assert uc_paths(live, store, "bo@example.com") == []

    recalled = tools["recall"](query="Dolomites trip in September")
    assert recalled.startswith("/cafe-trips.md:\n  Trip to the Dolomites in September.")
    assert tools["list_memories"]() == "/cafe-trips.md (1 fact)\n/preferences.md (2 facts)"
    # another actor's tools see none of it
    assert tools_for(framework, "bo@example.com", store)["list_memories"]() == "No memories yet."

    # forgetting one line edits the entry; forgetting its last line deletes it
    assert tools["forget"](fact="likes short answers.", topic="preferences") == (
        "Forgot 1 fact in /preferences.md."
    )
    assert (
        uc_entry(live, store, "ana@example.com", "/preferences.md").json()["contents"]
        == "Prefers email over phone."
    )
    assert tools["forget"](fact="Trip to the Dolomites in September.", topic="/cafe-trips.md") == (
        "Forgot 1 fact in /cafe-trips.md."
    )
    assert uc_entry(live, store, "ana@example.com", "/cafe-trips.md").status_code == 404
    assert tools["list_memories"]() == "/preferences.md (1 fact)"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_memory_tools_on_what_is_missing_answer_and_change_nothing(live, store, signed_in, framework):
    signed_in("admin")
    tools = tools_for(framework, "ana@example.com", store)
    tools["remember"](fact="Prefers email over phone.", topic="preferences")

    assert tools["forget"](fact="Prefers tea.", topic="preferences") == (
        "Not found in /preferences.md.\n  Prefers email over phone."
    )
    assert tools["forget"](fact="Anything.", topic="projects") == "No memories in /projects.md."
    assert tools["forget"](fact="Anything.", topic="/notes/../secrets.md") == (
        "Invalid memory path '/notes/../secrets.md': use a topic or a path shown by list_memories."
    )
    assert tools["forget"](fact="", topic="preferences") == "Nothing to forget: the fact is empty."
    assert tools["recall"](query="email", session_id="no-such-session") == "No relevant memories."
    assert tools["list_memories"](session_id="no-such-session") == "No memories yet."
    # what models send for an optional argument they leave out: null (strict schemas) or ""
    assert tools["list_memories"](session_id=None) == tools["list_memories"](session_id="")
    assert tools["list_memories"](session_id="") == "/preferences.md (1 fact)"
    assert (
        uc_entry(live, store, "ana@example.com", "/preferences.md").json()["contents"]
        == "Prefers email over phone."
    )
    assert uc_paths(live, store, "ana@example.com") == ["/preferences.md"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_memory_tools_see_session_memories(live, store, signed_in, framework):
    """Memories saved under a session (by the SDK or a memory pipeline) are listed and recalled
    with their session, and `forget` edits only the session it is given."""
    signed_in("admin")
    kit = AgentKitClient(WorkspaceClient(host=live.url, token=token_for(live, "admin"), auth_type="pat"))
    handle = kit.memory_stores.get(store)
    handle.add(actor_id="ana@example.com", path="/preferences.md", content="Prefers email.")
    handle.add(actor_id="ana@example.com", path="/preferences.md", content="Prefers email.", session_id="s-1")
    tools = tools_for(framework, "ana@example.com", store)

    assert tools["list_memories"]() == "/preferences.md (1 fact)\n/preferences.md [session s-1] (1 fact)"
    assert tools["list_memories"](session_id="s-1") == "/preferences.md [session s-1] (1 fact)"
    assert tools["recall"](query="email", session_id="s-1") == (
        "/preferences.md [session s-1]:\n  Prefers email."
    )
    assert tools["forget"](fact="Prefers email.", topic="preferences", session_id="s-1") == (
        "Forgot 1 fact in /preferences.md [session s-1]."
    )
    assert uc_entry(live, store, "ana@example.com", "/preferences.md", session_id="s-1").status_code == 404
    assert uc_entry(live, store, "ana@example.com", "/preferences.md").json()["contents"] == "Prefers email."


def denials(live, principal: str) -> list[dict[str, object]]:
    r = httpx.get(
        f"{live.url}{UC}/system/audit",
        params={"principal": principal, "decision": "deny"},
        headers=headers(live),
    )
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_memory_tools_of_a_reader_are_refused_writes(live, store, signed_in, framework):
    admin = AgentKitClient(WorkspaceClient(host=live.url, token=token_for(live, "admin"), auth_type="pat"))
    handle = admin.memory_stores.get(store)
    handle.add(actor_id="ana@example.com", path="/preferences.md", content="Prefers email over phone.")
    reader = f"reader-{uuid.uuid4().hex[:8]}"
    handle.grant_permission(reader, permission="READ")
    signed_in(reader)
    tools = tools_for(framework, "ana@example.com", store)

    # reading works
    assert tools["list_memories"]() == "/preferences.md (1 fact)"
    assert tools["recall"](query="email").startswith("/preferences.md:\n  Prefers email over phone.")

    # writing is refused: the OpenAI Agents SDK hands the model its fixed failure text, a LangChain
    # tool raises the SDK's error (LangGraph's ToolNode hands that to the model)
    for call in (
        lambda: tools["remember"](fact="Prefers tea.", topic="drinks"),
        lambda: tools["remember"](fact="Short answers.", topic="preferences"),
        lambda: tools["forget"](fact="Prefers email over phone.", topic="preferences"),
    ):
        if framework == "openai":
            assert call() == OPENAI_TOOL_FAILURE
        else:
            with pytest.raises(AgentCliError) as refused:
                call()
            assert refused.value.error_code == "PERMISSION_DENIED"
            assert reader in str(refused.value)

    # nothing was stored or changed, and the server recorded each refusal
    assert uc_paths(live, store, "ana@example.com") == ["/preferences.md"]
    assert (
        uc_entry(live, store, "ana@example.com", "/preferences.md").json()["contents"]
        == "Prefers email over phone."
    )
    denied = [(e["action_name"], e["reason"]) for e in denials(live, reader)]
    why = f"requires WRITE_MEMORY_STORE on memory store main.default.{store}"
    assert denied == [("entries.write", why)] * 3, denied


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_memory_tools_are_held_to_the_end_user_by_scope_binding(live, store, signed_in, framework):
    """The actor is closed over by the application, not chosen by the model; a store bound to the
    end user also holds the application to the user its token acts for."""
    r = httpx.patch(
        f"{live.url}{UC}/memory-stores/main.default.{store}",
        json={"scope_binding": "end_user"},
        headers=headers(live),
    )
    assert r.status_code == 200, r.text
    admin = AgentKitClient(WorkspaceClient(host=live.url, token=token_for(live, "admin"), auth_type="pat"))
    admin.memory_stores.get(store).grant_permission("assistant-app", permission="WRITE")
    signed_in("assistant-app", on_behalf_of="ana@example.com")

    own = tools_for(framework, "ana@example.com", store)
    assert own["remember"](fact="Prefers email.", topic="preferences") == "Remembered in /preferences.md."
    assert own["list_memories"]() == "/preferences.md (1 fact)"

    other = tools_for(framework, "bo@example.com", store)
    if framework == "openai":
        assert other["remember"](fact="Prefers tea.", topic="drinks") == OPENAI_TOOL_FAILURE
        assert other["list_memories"]() == OPENAI_TOOL_FAILURE
    else:
        for call in (
            lambda: other["remember"](fact="Prefers tea.", topic="drinks"),
            lambda: other["list_memories"](),
        ):
            with pytest.raises(AgentCliError) as refused:
                call()
            assert refused.value.error_code == "PERMISSION_DENIED"
    assert uc_paths(live, store, "ana@example.com") == ["/preferences.md"]
    assert uc_paths(live, store, "bo@example.com") == []
