"""Fuzzing the HTTP API with schemathesis over its own OpenAPI document, as the admin.

For each operation of the served `/openapi.json`, schemathesis sends schema-valid requests
(positive) and requests that break the schema in one place (negative), from its coverage phase
(boundaries, missing and extra fields) and its fuzzing phase (random data), against a real server
(uvicorn, the whole app, a fresh PostgreSQL database) seeded with a catalog, a schema, a store, an
agents store, entries and a group. Every answer must:
- never be a 5xx;
- have a documented status, content type and headers, and a body that matches its schema;
- for a schema-valid request: not be refused (2xx, or 404 / 409 for an object that is missing or
  already there), except the few refusals listed in SEMANTIC: rules across fields or on stored
  state, which a schema cannot state;
- for a schema-breaking request: be refused with a 4xx.

Generation is derandomized and bounded by MAX_EXAMPLES, so a run is reproducible and takes about
two minutes on two cores. FUZZ_ONLY=<regular expression> fuzzes only the operations it matches
(`GET /api/2.1/unity-catalog/catalogs`), to reproduce one finding quickly.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from fake_embedder import HashEncoder
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from rest import UC
from schemathesis.checks import CheckContext
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation
from schemathesis.core.result import Ok
from schemathesis.pytest.lazy import get_all_tests
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance
from scripted_llm import Reply, ScriptedLLM

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.settings import Settings

AGENTS = "/api/2.0/agents/memory-stores"
SESSIONS = "/api/2.0/agents/session-stores"
SCIM = "/api/2.0/preview/scim/v2/Groups"
CONVERSATIONS = "/ai-gateway/mlflow/v1/conversations"

# Examples per operation in the fuzzing phase (the coverage phase adds its own, per boundary).
MAX_EXAMPLES = 15
ONLY = os.environ.get("FUZZ_ONLY")  # a regular expression of operations, to fuzz only those

CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            # 413: contents and descriptions longer than documented are PAYLOAD_TOO_LARGE
            "negative_data_rejection": {
                "expected-statuses": ["400", "401", "403", "404", "405", "409", "413"]
            },
        },
        "output": {"sanitization": {"enabled": False}},
        # undocumented methods: OPTIONS (the `Allow` it answers must match the document) and one
        # that is not handled at all (405 with `Allow`); the other methods add nothing but time
        "phases": {"coverage": {"unexpected-methods": ["options", "trace"]}},
    }
)

# Schema-valid requests that are still refused with 400, by operation: each is a rule across
# fields or about stored state, which the document states in words but a JSON Schema cannot.
SEMANTIC: dict[str, list[str]] = {
    "*": [r"page_token is not a page token of this list"],  # tokens come from the server only
    "deleteCatalog": [r"is not empty"],  # force=true is needed for a catalog with schemas
    "deleteSchema": [r"is not empty"],
    "createEntry": [
        r"scope is required",  # in the query or the body
        r"scope in the query and in the body differ",
        r"path is required",  # at the top level or in memory_entry
        r"either at the top level or as memory_entry",
        r"APPEND needs contents",
        r"derived_from\[\d+\]: (no entry at|memory store \S+ does not exist)",  # a missing source
    ],
    "updateEntry": [
        r"give one of str_replace, insert, replace_all, append",
        r"nothing to change",
        r"str_replace.old_str (does not occur|occurs \d+ times)",  # in the stored contents
        r"insert.insert_line must be between",  # the stored contents' line count
    ],
    "deleteEntry": [r"path is required", r"give path or all=true, not both"],
    "listEntries": [
        r"scope \(or scopes\) is required",
        r"at most 20 scopes per request",
        # `filter` is JSON text in the query: its schema can state only a string
        r"filter must be a JSON object",
        r"filter (keys must be|holds at most)",
        r"filter\.\S+ must be",
        r"as_of must be a time in epoch milliseconds from 0 to now",
    ],
    "searchEntries": [
        r"scope \(or scopes\) is required",
        r"at most 20 scopes per request",
        r"as_of must be a time in epoch milliseconds from 0 to now",  # the clock's, not the schema's
    ],
    "deleteMatchingEntries": [r"scope \(or scopes\) is required", r"at most 20 scopes per request"],
    "getEntry": [r"as_of must be a time in epoch milliseconds from 0 to now"],
    "agentsRunMemoryPipeline": [r"dry_run is the maintenance step's"],  # with maintain (or the pipeline's)
    "setEntryState": [  # the entry replacing it is another stored entry, named only when not active
        r"an active entry is superseded by none",
        r"a \w+ entry names the entry replacing it",
        r"superseded_by: no entry at",
        r"an entry cannot supersede itself",
    ],
    "eraseSubject": [r"subject is what comes before the first ':'"],
    "searchConversations": [r"scope \(or scopes\) is required", r"at most 20 scopes per request"],
    "agentsSearchSessionItems": [
        r"actor_id \(or actor_ids\) is required",
        r"at most 20 actor_ids per request",
    ],
    "updatePermissions": [
        r"cannot be granted on a",  # which privileges fit which securable type
        r"is both added and removed",
        r"full_name must have the form",  # the full name's depth follows securable_type
        r"may be limited to scopes, not",  # scopes go with READ and WRITE only
        r"is granted in every scope: remove it without scopes",  # the grant as stored
        r"would be limited to more than \d+ scope patterns",
        r"is a scope or a prefix ending in '\*'",
    ],
    # a rule's name is unique among the policy's rules (items alike but for their phrases), and a
    # phrase must hold something to match once normalized (a letter, a digit or a marker)
    "setTrustPolicy": [r"screen\.rules\[\d+\]\.name: .* is given twice", r"holds nothing to match"],
    "testTrustPolicy": [r"screen\.rules\[\d+\]\.name: .* is given twice", r"holds nothing to match"],
    "getPermissions": [r"full_name must have the form"],
    "getEffectivePermissions": [r"full_name must have the form"],
    "getLineage": [r"scope is required", r"path is required"],  # one entry: both, or neither
    "createGroup": [r"is built in", r"nest at most", r"membership cycle"],
    "patchGroup": [
        r"only add/remove of members is supported",  # SCIM paths other than members
        r"value must be a list of",
        r"nest at most",
        r"membership cycle",
    ],
    "agentsCreateMemoryStore": [r"managed_memory_store_id must be"],  # the display name stands in for the id
    "agentsUpdateMemoryStore": [r"update_mask must name"],  # nothing to change
    "agentsUpdateMemoryEntry": [r"update_mask must name"],
    # a session store's name: in session_store_name or session_store_id (equal when both are sent)
    "agentsCreateSessionStore": [r"session_store_name must be", r"session_store_id must equal"],
    "agentsUpdateSessionStore": [r"update_mask must name"],
    "agentsUpdateSession": [r"metadata is required"],
    "agentsCreateSession": [r"parent_session_id .* is no session of this store"],
    "agentsForkSession": [r"up_to_item_id"],  # an item of the source session
    "agentsListSessions": [r"filter must be"],  # its grammar is in the description
    # jsonb holds no NUL: the request gate says so first where it finds one, else the slice
    "agentsAppendSessionItems": [r"must not contain (the )?NUL character"],
    # items are OpenAI's union of item shapes (by `type`), checked as docs/dialects/openai.md says,
    # and hold no NUL anywhere (a key included)
    # without memory_store, the server's default store (none is set here); with it, a scope
    "createConversation": [r"^`?items\[\d+\]", r"^memory_store is required", r"^scope is required with"],
    "createConversationItems": [r"^`?items\[\d+\]"],
    # an archive is JSON lines with a header, a store line and a manifest whose digest matches:
    # a generated string is none (tests/test_backup.py imports real ones); the seeded store has
    # entries, and an import takes an empty one
    "importMemoryStore": [r"archive", r"^line \d+", r"is not empty", r"holds entries"],
    "listConversationItems": [r"^after: no item"],  # an item of this conversation
    # input items are checked as conversation items are; the fields OpenAI's clients send and that
    # change nothing here are accepted, the ones that would change the answer are refused
    "createResponse": [
        r"^`?input",
        r"client tools are not supported",
        r"previous_response_id is not supported",
        r"tool_choice must be",
        r"must not contain NUL characters",  # anywhere in the body, as for every text
    ],
}


def semantic_refusal(case: Any, response: Any) -> bool:
    try:
        message = response.json()["message"]
    except Exception:
        return False
    operation_id = case.operation.definition.raw.get("operationId", "")
    patterns = SEMANTIC["*"] + SEMANTIC.get(operation_id, [])
    return any(re.search(pattern, message) for pattern in patterns)


def valid_requests_are_accepted(ctx: CheckContext, response: Any, case: Any) -> bool | None:
    """positive_data_acceptance, with 400 allowed for the refusals in SEMANTIC only.

    Whether the request is schema-valid is checked again on what is sent: schemathesis' coverage
    phase marks some cases positive that are not (an optional query parameter with a `pattern`
    filled with "0" next to other parameters), which would blame the server for refusing them."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    for location in list(case.meta.components):
        case.meta.mark_dirty(location)
    case.operation.schema.revalidate_case_metadata(case)
    if not case.meta.generation.mode.is_positive:
        return None
    status = response.status_code
    if 200 <= status < 300 or status in (404, 409):
        return None
    if status == 400 and semantic_refusal(case, response):
        return None
    raise AssertionError(f"a schema-valid request was refused with {status}: {response.text[:300]}")


# the import route's body is an archive of JSON lines: sent as the text generated for it
schemathesis.serializer.alias("application/x-ndjson", "text/plain")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def invalid_requests_are_refused(ctx: CheckContext, response: Any, case: Any) -> bool | None:
    """negative_data_rejection, except for requests whose only fault is a query parameter or
    header the operation does not declare: those are ignored on purpose (clients such as the
    Databricks SDK send parameters this API does not use), as HTTP APIs generally do; schemathesis
    means to skip such cases too, but misses some where another part was marked negative and
    generated valid."""
    try:
        return negative_data_rejection(ctx, response, case)
    except AssertionError as failure:
        faults = re.findall(r"^\s*- (.*)$", str(getattr(failure, "message", failure)), re.MULTILINE)
        if faults and all(
            re.fullmatch(r"(query|headers?|cookies?): violates `additionalProperties`", f) for f in faults
        ):
            return None
        raise


class Server:
    """The app under uvicorn in a thread: real HTTP, the HashEncoder for speed."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(settings, encoder=HashEncoder()),
            host="127.0.0.1",
            port=self.port,
            log_config=None,
            access_log=False,
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the fuzzing server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def server(settings: Settings) -> Iterator[Server]:
    # responses need an upstream model: ours answers every call with a short text
    with ScriptedLLM(default=Reply("noted")) as llm:
        running = Server(dataclasses.replace(settings, llm_base_url=llm.url, llm_model="scripted"))
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture(scope="module")
def admin(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}


@pytest.fixture(scope="module")
def seeds(server: Server, admin: dict[str, str]) -> dict[str, Any]:
    """Ids of the seeded objects that only exist once created (a group, an agents entry)."""
    found: dict[str, Any] = {}
    with httpx.Client(base_url=server.url, headers=admin) as http:
        r = http.post(SCIM, json={"displayName": "fuzzers", "members": [{"value": "alice"}]})
        assert r.status_code == 200, r.text
        found["group_id"] = r.json()["id"]
    return found


def seed(server: Server, admin: dict[str, str], seeds: dict[str, Any]) -> None:
    """(Re)create what the operations act on: the fuzzing of one operation may delete or change it."""
    with httpx.Client(base_url=server.url, headers=admin) as http:
        for path, body in [
            (f"{UC}/catalogs", {"name": "fuzz"}),
            (f"{UC}/schemas", {"name": "s", "catalog_name": "fuzz"}),
            (f"{UC}/memory-stores", {"name": "m", "catalog_name": "fuzz", "schema_name": "s"}),
        ]:
            assert http.post(path, json=body).status_code in (200, 409)
        http.patch(f"{UC}/memory-stores/fuzz.s.m", json={"scope_binding": "caller", "shared_scopes": []})
        r = http.post(AGENTS, params={"managed_memory_store_id": "fuzz-store"}, json={"display_name": "fuzz"})
        assert r.status_code in (200, 409), r.text
        for i in range(3):
            body = {
                "path": f"/a{i}.md",
                "contents": f"alpha beta {i}\nsecond line",
                "write_mode": "OVERWRITE",
            }
            r = http.post(f"{UC}/memory-stores/fuzz.s.m/entries", params={"scope": "u"}, json=body)
            assert r.status_code == 200, r.text
        r = http.post(SESSIONS, params={"session_store_name": "fuzz-sessions"}, json={})
        assert r.status_code in (200, 409), r.text
        http.patch(f"{SESSIONS}/fuzz-sessions", json={"scope_binding": "caller", "shared_scopes": []})
        r = http.post(
            f"{SESSIONS}/fuzz-sessions/sessions",
            params={"session_id": "fuzz-session"},
            json={"actor_id": "u"},
        )
        assert r.status_code in (200, 409), r.text
        r = http.post(
            f"{SESSIONS}/fuzz-sessions/sessions/fuzz-session/items:append", json={"items": [{"data": 1}]}
        )
        assert r.status_code == 200, r.text
        r = http.post(
            f"{AGENTS}/fuzz-store/entries", json={"actor_id": "u", "path": "/a.md", "content": "alpha"}
        )
        assert r.status_code in (200, 409), r.text
        listed = http.get(f"{AGENTS}/fuzz-store/entries", params={"actor_id": "u"}).json()
        seeds["entry_id"] = listed["managed_memory_entries"][0]["name"].rsplit("/", 1)[1]
        if http.get(f"{SCIM}/{seeds['group_id']}").status_code == 404:
            r = http.post(SCIM, json={"displayName": "fuzzers"})
            seeds["group_id"] = r.json()["id"]
        conversation = seeds.get("conversation_id")
        if conversation is None or http.get(f"{CONVERSATIONS}/{conversation}").status_code == 404:
            r = http.post(
                CONVERSATIONS,
                json={
                    "memory_store": {"name": "fuzz.s.m"},
                    "scope": {"kind": "user", "value": "u"},
                    "items": [{"role": "user", "content": "alpha", "id": "msg_fuzz"}],
                },
            )
            assert r.status_code == 200, r.text
            seeds["conversation_id"] = r.json()["id"]


# What names the seeded objects, by parameter or top-level body field name.
SEEDED = {
    "scope": "u",
    "actor_id": "u",
    "path": "/a0.md",
    "catalog_name": "fuzz",
    "schema_name": "s",
    "securable_full_name": "fuzz.s.m",
    "force": "true",
    "source_session_id": "fuzz-session",
}
# ... and which of them a schema-valid request gets when it may carry them but does not
FILLED = ("scope", "actor_id", "path", "force")
SECURABLES = [("catalog", "fuzz"), ("schema", "fuzz.s"), ("memory_store", "fuzz.s.m")]
SOURCE = {"memory_store": "fuzz.s.m", "scope": "u", "path": "/a1.md"}  # a seeded entry


def _seeded_path(case: Any, generated: dict[str, Any], securable: int) -> dict[str, Any]:
    seeds = STATE["seeds"]
    params = dict(generated)
    path = case.path
    for name in params:
        if name == "name":
            params[name] = "fuzz"
        elif name == "store_id":
            params[name] = "fuzz-store"
        elif name == "store_name":
            params[name] = "fuzz-sessions"
        elif name == "session_id":
            params[name] = "fuzz-session"
        elif name in ("entry_id", "group_id", "conversation_id"):
            params[name] = seeds.get(name, params[name])
    if "securable_type" in params:
        kind, full_name = SECURABLES[securable % len(SECURABLES)]
        params["securable_type"], params["full_name"] = kind, full_name
    elif "full_name" in params:
        params["full_name"] = "fuzz.s" if path.startswith(f"{UC}/schemas") else "fuzz.s.m"
    return params


def _seeded_query(case: Any, generated: dict[str, Any]) -> dict[str, Any]:
    query = {k: SEEDED.get(k, v) for k, v in generated.items()}
    for parameter in case.operation.query:
        if parameter.name in FILLED and parameter.name not in query:
            query[parameter.name] = SEEDED[parameter.name]
    return query


def _create_entry(body: dict[str, Any]) -> None:
    if body.get("path") is None and body.get("memory_entry") is None:  # one of them is needed
        body["path"] = "/fuzzed.md"


def _edit_entry(body: dict[str, Any]) -> None:
    body["path"] = "/a0.md"  # a seeded entry (an edit needs one that exists)


def _patch_group(body: dict[str, Any]) -> None:
    for operation in body.get("Operations") or []:
        if isinstance(operation, dict) and operation.get("value") is not None:
            operation["path"] = "members"  # the one SCIM path supported with a value


def _create_conversation(body: dict[str, Any]) -> None:
    body["memory_store"] = {"name": "fuzz.s.m"}  # the seeded store


# Operation by operation, what makes a schema-valid body one the API can carry out (the rules
# across fields listed in SEMANTIC), applied to the seeded half.
COMPLETE = {
    "createEntry": _create_entry,
    "updateEntry": _edit_entry,
    "patchGroup": _patch_group,
    "createConversation": _create_conversation,
}


def _seeded_body(case: Any, body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    body = copy.deepcopy(body)  # the generated body stays as it was for the other half
    seeded = {k: SEEDED.get(k, v) if k != "path" and isinstance(v, str) else v for k, v in body.items()}
    if isinstance(body.get("derived_from"), list):
        seeded["derived_from"] = [SOURCE for _ in body["derived_from"]]
    complete = COMPLETE.get(case.operation.definition.raw.get("operationId", ""))
    if complete is not None:
        complete(seeded)
    return seeded


def _positive(case: Any, location: ParameterLocation) -> bool:
    component = (case.meta.components or {}).get(location) if case.meta else None
    return component is not None and component.mode.is_positive


def flatmap_case(context: Any, case: Any) -> Any:
    """Half the schema-valid requests name the seeded objects in their path, query and body
    (random names would almost always be 404), so the operations act on something real."""
    path = dict(case.path_parameters or {}) if _positive(case, ParameterLocation.PATH) else None
    query = dict(case.query or {}) if _positive(case, ParameterLocation.QUERY) else None
    body = case.body if _positive(case, ParameterLocation.BODY) else None

    def shaped(pick: tuple[bool, int]) -> Any:
        seeded, securable = pick
        if path:
            case.path_parameters = _seeded_path(case, path, securable) if seeded else path
        if query is not None:
            case.query = _seeded_query(case, query) if seeded else query
        if body is not None:
            case.body = _seeded_body(case, body) if seeded else body
        return case

    return st.tuples(st.booleans(), st.integers(0, len(SECURABLES) - 1)).map(shaped)


def after_call(context: Any, case: Any, response: Any) -> None:
    seen = STATE["statuses"].setdefault(case.operation.label, {})
    seen[response.status_code] = seen.get(response.status_code, 0) + 1


# the seeded ids, for the hook above (which has no fixtures), and the statuses answered
STATE: dict[str, Any] = {"seeds": {}, "statuses": {}}


@pytest.fixture(scope="module")
def api_schema(server: Server) -> Any:
    """The document the server serves, as schemathesis reads it."""
    loaded = schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=CONFIG)
    loaded.hook(flatmap_case)
    loaded.hook(after_call)
    return loaded


SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,  # the same cases on every run
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)


def test_fuzz_the_api(
    api_schema: Any,
    server: Server,
    admin: dict[str, str],
    seeds: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    STATE["seeds"] = seeds
    STATE["statuses"] = statuses = {}
    phases: dict[str, int] = {}
    failures: dict[str, BaseException] = {}

    def check(case: Any) -> None:
        phases[case.meta.phase.name.value] = phases.get(case.meta.phase.name.value, 0) + 1
        case.call_and_validate(
            base_url=server.url,
            headers=admin,
            excluded_checks=[positive_data_acceptance, negative_data_rejection],
            additional_checks=[valid_requests_are_accepted, invalid_requests_are_refused],
        )

    started = time.monotonic()
    labels = []
    for result in get_all_tests(schema=api_schema, test_func=check, settings=SETTINGS, given_kwargs=None):
        if not isinstance(result, Ok):
            failures[str(getattr(result.err(), "path", "?"))] = result.err()
            continue
        operation, test = result.ok()
        if ONLY and not re.search(ONLY, operation.label):
            continue
        labels.append(operation.label)
        seed(server, admin, seeds)  # the operation before may have deleted or changed them
        try:
            test()
        except (AssertionError, BaseExceptionGroup) as exc:
            failures[operation.label] = exc
    elapsed = time.monotonic() - started
    succeeded = sum(n for seen in statuses.values() for status, n in seen.items() if status < 300)
    summary = ", ".join(f"{n} {phase}" for phase, n in sorted(phases.items()))
    with capsys.disabled():  # the figures belong in the test run's output
        print(
            f"\nfuzzing: {sum(phases.values())} cases ({summary}; {succeeded} answered 2xx) "
            f"over {len(labels)} operations in {elapsed:.0f} s"
        )
    assert not failures, "\n\n".join(f"{label}:\n{exc}" for label, exc in failures.items())
    # every operation was fuzzed (but /openapi.json, which schemathesis reads rather than tests)
    if not ONLY:
        documented = {f"{m.upper()} {p}" for p, item in api_schema.raw_schema["paths"].items() for m in item}
        assert set(labels) == documented - {"GET /openapi.json"}
        assert all(statuses.get(label) for label in labels), "an operation was never called"


def test_the_document_is_complete(server: Server) -> None:
    """Every operation is documented with its security, error answers and the request id header
    (schemathesis reads /openapi.json rather than testing it: its answer is checked here)."""
    served = httpx.get(f"{server.url}/openapi.json")
    document = served.json()
    documented = document["paths"]["/openapi.json"]["get"]["responses"]["200"]["content"]
    assert served.headers["content-type"].split(";")[0] in documented
    assert len(served.headers["x-request-id"]) == 32
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert all("X-Request-Id" in r["headers"] for r in responses.values()), (method, path)
            if path in ("/healthz", "/openapi.json", "/docs") or path.startswith("/.well-known/"):
                assert operation["security"] == [], path
                continue
            assert "security" not in operation, path  # the document's default: a bearer token
            assert {"400", "401", "403", "429", "503", "504"} <= set(responses), (method, path)
            for status in ("429", "503"):
                assert responses[status]["headers"]["Retry-After"]["required"] is True
            # a page token at its maximum length fills the request head (tests/test_limits.py)
            if any(p["name"] == "page_token" for p in operation.get("parameters", [])):
                assert "431" in responses, (method, path)
            error = responses["400"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)
