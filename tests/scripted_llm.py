"""A scripted OpenAI-compatible Chat Completions server, the upstream LLM of the tests.

The product talks to any OpenAI-compatible Chat Completions endpoint with function calling. Tests
start this server instead, script what the "model" answers, and read back what it was sent:

    with ScriptedLLM() as llm:
        llm.script(Call("save_memory", {"path": "/a.md"}), Reply("saved"))
        ...  # point the code under test at llm.url
        assert llm.requests[1]["messages"][-1]["role"] == "tool"

Rules:
- The script is a FIFO queue of turns. Each POST to /v1/chat/completions (or /chat/completions)
  consumes one turn: `Reply` answers text, `Call` one tool call, a list of `Call`s several tool
  calls in one assistant message, `Fail` an HTTP error with an OpenAI error body (`times`
  consecutive requests consume it), and a callable decides from the request JSON what to answer.
- A request that finds the script empty gets 500 "scripted LLM: no turn left for this request"
  (with `x-should-retry: false`, so a retrying client fails at once) and is still recorded.
- Everything is deterministic: ids count up per server ("chatcmpl-1", "call_1", ...; `reset()`
  starts them again), `created` is a constant, usage counts whitespace-separated words.
- `"stream": true` answers server-sent events in the `ChatCompletionChunk` shape: text split per
  word, each tool call's arguments in two or more fragments, a last chunk with the finish reason,
  a usage chunk (`choices: []`) when `stream_options.include_usage` is set, then `data: [DONE]`.
- With `ScriptedLLM(api_key="k")` a request without `Authorization: Bearer k` gets 401 and
  consumes no turn. Every chat request is recorded, accepted or not, in `requests` and `headers`.
- Each response closes its connection, so after `stop()` nothing more is served.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

CREATED = 1_700_000_000  # a fixed `created`: the same script gives the same bytes
NO_TURN_LEFT = "scripted LLM: no turn left for this request"
CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
MODELS_PATHS = frozenset({"/v1/models", "/models"})
MODELS = {
    "object": "list",
    "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "tests"}],
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True)
class Reply:
    """An assistant message of text; `delay` seconds pass before the response starts."""

    text: str
    finish_reason: str = "stop"
    delay: float = 0.0

    def __post_init__(self) -> None:
        if self.delay < 0:
            raise ValueError("Reply.delay must be >= 0")


@dataclass(frozen=True)
class Call:
    """One tool call. A dict of arguments is sent as its JSON text, a str as is (it may be invalid
    JSON on purpose). Without an id the server gives "call_<n>", counting per server."""

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None


@dataclass(frozen=True)
class Fail:
    """An HTTP error with an OpenAI error body; `times` consecutive requests consume it."""

    status: int = 500
    message: str = "upstream exploded"
    times: int = 1

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError("Fail.status must be an HTTP error status (400-599)")
        if self.times < 1:
            raise ValueError("Fail.times must be >= 1")


Answer = Reply | Call | list[Call] | Fail
Turn = Answer | Callable[[dict[str, Any]], Answer]


def error_body(message: str, status: int, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error shape, which the openai client reads into `APIStatusError.body`."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": code}}


def words(text: str) -> int:
    return len(text.split())


def prompt_words(request: dict[str, Any]) -> int:
    """Words in the request's messages (string contents, text parts, tool call arguments)."""
    total = 0
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            total += words(content)
        elif isinstance(content, list):
            total += sum(
                words(part["text"])
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
        for call in message.get("tool_calls") or []:
            arguments = call.get("function", {}).get("arguments") if isinstance(call, dict) else None
            if isinstance(arguments, str):
                total += words(arguments)
    return total


def text_pieces(text: str) -> list[str]:
    """Split after each run of whitespace: "a b  c" -> ["a ", "b  ", "c"]; the pieces join to text."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece] or [""]


def argument_pieces(arguments: str) -> list[str]:
    """At most three fragments, two or more whenever the text has two characters or more."""
    if len(arguments) < 2:
        return [arguments]
    size = -(-len(arguments) // 3)
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def check_answer(answer: object) -> Answer:
    if isinstance(answer, Reply | Call | Fail):
        return answer
    if isinstance(answer, list) and answer and all(isinstance(call, Call) for call in answer):
        return list(answer)
    raise TypeError(f"a turn is a Reply, a Call, a non-empty list of Calls or a Fail, not {answer!r}")


class ScriptedLLM:
    """The server. `start()` binds 127.0.0.1 on a free port and serves from a daemon thread."""

    def __init__(self, api_key: str | None = None, default: Turn | None = None) -> None:
        """`default`: the turn answered when the script is empty (never used up), e.g. for a
        server under fuzzing; without it an empty script answers 500."""
        self.api_key = api_key
        self.default = default
        self._lock = threading.Lock()
        self._turns: deque[Turn] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._completions = 0
        self._calls = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("ScriptedLLM is already started")
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        # a short poll: `stop()` waits up to one poll for the serving loop to notice
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.02,), name="scripted-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL a client uses: http://127.0.0.1:<port>/v1."""
        if self._server is None:
            raise RuntimeError("ScriptedLLM is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # -- script and records ------------------------------------------------------------------

    def script(self, *turns: Turn) -> Self:
        """Append turns to the queue; each chat request consumes one."""
        checked = [turn if callable(turn) else check_answer(turn) for turn in turns]
        with self._lock:
            self._turns.extend(checked)
        return self

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests received, in order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of the chat requests received, in order; names are lower-cased."""
        with self._lock:
            return [dict(headers) for headers in self._headers]

    @property
    def pending(self) -> int:
        """Turns not consumed yet (a `Fail` counts once, whatever its `times`)."""
        with self._lock:
            return len(self._turns)

    def reset(self) -> None:
        """Forget the queue and the records, and count ids from 1 again."""
        with self._lock:
            self._turns.clear()
            self._requests.clear()
            self._headers.clear()
            self._completions = self._calls = 0

    # -- serving (called from the handler threads) -------------------------------------------

    def _take(self, request: dict[str, Any], headers: dict[str, str], authorized: bool) -> Turn | None:
        """Record the request and, when authorized, take the next turn: under one lock, so the
        order of `requests` is the order in which the turns were consumed."""
        with self._lock:
            self._requests.append(request)
            self._headers.append(headers)
            if not authorized:
                return None
            if not self._turns:
                return self.default
            turn = self._turns.popleft()
            if isinstance(turn, Fail) and turn.times > 1:
                self._turns.appendleft(replace(turn, times=turn.times - 1))
            return turn

    def _answer(self, turn: Turn, request: dict[str, Any]) -> Answer:
        if not callable(turn):
            return turn
        answer = check_answer(turn(copy.deepcopy(request)))  # the record stays as received
        if isinstance(answer, Fail) and answer.times > 1:
            # the callable's turn is consumed by this request; the rest of `times` goes first in line
            with self._lock:
                self._turns.appendleft(replace(answer, times=answer.times - 1))
        return answer

    def _numbered(self, answer: Reply | list[Call]) -> tuple[str, Reply | list[Call]]:
        """The completion id, and the calls with their ids filled in (under the lock: ids are unique)."""
        with self._lock:
            self._completions += 1
            completion_id = f"chatcmpl-{self._completions}"
            if isinstance(answer, Reply):
                return completion_id, answer
            calls = []
            for call in answer:
                if call.id is None:
                    self._calls += 1
                    call = replace(call, id=f"call_{self._calls}")
                calls.append(call)
            return completion_id, calls


def _arguments(call: Call) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _usage(request: dict[str, Any], answer: Reply | list[Call]) -> dict[str, int]:
    prompt = prompt_words(request)
    if isinstance(answer, Reply):
        completion = words(answer.text)
    else:
        completion = sum(1 + words(_arguments(call)) for call in answer)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(
    completion_id: str, model: str, request: dict[str, Any], answer: Reply | list[Call]
) -> dict[str, Any]:
    """A `ChatCompletion`."""
    message: dict[str, Any] = {"role": "assistant"}
    if isinstance(answer, Reply):
        message["content"] = answer.text
        finish_reason = answer.finish_reason
    else:
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for call in answer
        ]
        finish_reason = "tool_calls"
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": _usage(request, answer),
    }


def completion_chunks(
    completion_id: str, model: str, request: dict[str, Any], answer: Reply | list[Call]
) -> Iterator[dict[str, Any]]:
    """The `ChatCompletionChunk`s of one streamed answer, without the final [DONE]."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }

    if isinstance(answer, Reply):
        yield chunk({"role": "assistant", "content": ""})
        for piece in text_pieces(answer.text):
            yield chunk({"content": piece})
        finish_reason = answer.finish_reason
    else:
        for index, call in enumerate(answer):
            first = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            yield chunk(
                {"role": "assistant", "content": None, "tool_calls": [first]}
                if index == 0
                else {"tool_calls": [first]}
            )
            for piece in argument_pieces(_arguments(call)):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        finish_reason = "tool_calls"
    yield chunk({}, finish_reason)
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        yield {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [],
            "usage": _usage(request, answer),
        }


def _handler_for(llm: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None  # no access log: the tests' output stays clean, `llm.requests` is the record

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path in MODELS_PATHS:
                if self._authorized():
                    self._json(200, MODELS)
                else:
                    self._refuse()
            else:
                self._not_found()

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path not in CHAT_PATHS:
                self._not_found()
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                request = json.loads(self.rfile.read(length) or b"null")
            except ValueError as exc:
                self._json(400, error_body(f"the request body is not JSON: {exc}", 400))
                return
            if not isinstance(request, dict):
                self._json(400, error_body("the request body must be a JSON object", 400))
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            authorized = self._authorized()
            turn = llm._take(request, headers, authorized)
            if not authorized:
                self._refuse()  # after the record: a test reading `requests` after the 401 sees it
                return
            if turn is None:
                self._json(500, error_body(NO_TURN_LEFT, 500), {"x-should-retry": "false"})
                return
            try:
                answer = llm._answer(turn, request)
            except Exception as exc:  # a failing turn function fails this request, loudly
                message = f"scripted LLM: the turn function raised {exc!r}"
                self._json(500, error_body(message, 500), {"x-should-retry": "false"})
                return
            if isinstance(answer, Fail):
                self._json(answer.status, error_body(answer.message, answer.status))
                return
            completion_id, answer = llm._numbered([answer] if isinstance(answer, Call) else answer)
            if isinstance(answer, Reply) and answer.delay:
                time.sleep(answer.delay)
            model = request.get("model")
            if not isinstance(model, str):
                model = "scripted"
            try:
                if request.get("stream") is True:
                    self._stream(completion_chunks(completion_id, model, request, answer))
                else:
                    self._json(200, completion_body(completion_id, model, request, answer))
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up (a timeout under test): the turn stays consumed

        def _authorized(self) -> bool:
            return llm.api_key is None or self.headers.get("Authorization") == f"Bearer {llm.api_key}"

        def _refuse(self) -> None:
            self._json(401, error_body("Incorrect API key provided", 401, "invalid_api_key"))

        def _not_found(self) -> None:
            self._json(404, error_body(f"no route {self.command} {self.path}", 404, "unknown_url"))

        def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
            # no Content-Length: the body ends when the connection closes
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for item in chunks:
                self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler
