"""A client for any OpenAI-compatible Chat Completions endpoint with function calling (vLLM,
Ollama, llama.cpp's server, a hosted API): the upstream model behind responses and memory
extraction. No model runs in this server for this, and nothing is downloaded.

Rules:
- configured by `CATALOG_LLM_BASE_URL` (e.g. `http://127.0.0.1:11434/v1`), `CATALOG_LLM_API_KEY`
  (sent as a bearer token, never logged) and `CATALOG_LLM_MODEL` (the model asked for; unset: the
  one the request names); without a base URL the routes that need a model answer 501
  `NOT_IMPLEMENTED` naming the variable;
- each upstream call has a timeout (`CATALOG_LLM_TIMEOUT`, seconds) and is retried at most
  `CATALOG_LLM_MAX_RETRIES` times on 408, 409, 429 and 5xx answers and on connection failures,
  with exponential backoff (or the upstream's `Retry-After`, capped); a stream is retried only
  before its first chunk arrived;
- every failure is an `UpstreamFailed` (502 `BAD_GATEWAY`) whose message says what the upstream
  did (its status and message, a timeout, an unreachable host, an answer that is not a chat
  completion), never the API key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from opentelemetry.trace import Span

from catalog import telemetry
from catalog.errors import NotConfigured, UpstreamFailed
from catalog.settings import Settings

log = logging.getLogger("catalog.llm")

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_BACKOFF = 10.0
MAX_ERROR_TEXT = 500


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (it may not parse)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Turn:
    """One answer of the model: text, or tool calls, or both."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    timeout: float = 120.0
    max_retries: int = 2


class ChatModel:
    """Chat Completions over one shared HTTP connection pool."""

    def __init__(self, config: LLMConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._http = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/") + "/",
            headers=headers,
            # 0 turns the limit off, as for the server's other limits
            timeout=httpx.Timeout(config.timeout or None, connect=min(config.timeout or 10.0, 10.0)),
            transport=transport,
        )
        self.calls = 0  # upstream requests sent (retries included)
        self.failures = 0
        self._server = urlsplit(config.base_url).hostname  # what a chat span names (never the key)

    async def close(self) -> None:
        await self._http.aclose()

    def model_for(self, requested: str | None) -> str:
        model = self.config.model or requested
        if not model:
            raise NotConfigured("no model to ask: set CATALOG_LLM_MODEL or name one in the request")
        return model

    def _body(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        model: str | None,
        extra: dict[str, Any] | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {**(extra or {}), "model": self.model_for(model), "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        return body

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        model: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Turn:
        """One answer. Inside a trace, a `chat {model}` span with the token usage."""
        span = telemetry.chat_start(self.model_for(model), self._server, stream=False)
        try:
            turn = await self._complete(messages, tools, model, extra, span)
        except BaseException as exc:
            telemetry.chat_end(span, error=exc)
            raise
        _answered(span, turn)
        return turn

    async def _complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        model: str | None,
        extra: dict[str, Any] | None,
        span: Span | None,
    ) -> Turn:
        body = self._body(messages, tools, model, extra)
        response = await self._send(body, stream=False, span=span)
        try:
            payload = response.json()
            choice = payload["choices"][0]
            message = choice["message"]
            calls = tuple(
                ToolCall(
                    id=str(call.get("id") or f"call_{i}"),
                    name=str(call["function"]["name"]),
                    arguments=_arguments(call["function"].get("arguments")),
                )
                for i, call in enumerate(message.get("tool_calls") or [])
            )
            content = message.get("content")
            usage = payload.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self.failures += 1
            raise UpstreamFailed(
                f"the model server answered something that is not a chat completion ({exc!r})"
            ) from None
        return Turn(
            text=content if isinstance(content, str) else None,
            tool_calls=calls,
            finish_reason=choice.get("finish_reason"),
            usage=_usage(usage),
        )

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        model: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> AsyncIterator[TextDelta | Turn]:
        """Text as it comes (`TextDelta`), then the whole `Turn`. An `UpstreamFailed` raised before
        the first delta means nothing was received; after it, the turn is lost midway. Inside a
        trace, a `chat {model}` span with the token usage, ended with the stream."""
        span = telemetry.chat_start(self.model_for(model), self._server, stream=True)
        turn: Turn | None = None
        try:
            async with contextlib.aclosing(self._stream(messages, tools, model, extra, span)) as items:
                async for item in items:
                    if isinstance(item, Turn):
                        turn = item
                    yield item
        except GeneratorExit:  # the caller stopped reading: not a failure of the model's
            _answered(span, turn)
            raise
        except BaseException as exc:
            telemetry.chat_end(span, error=exc)
            raise
        _answered(span, turn)

    async def _stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        model: str | None,
        extra: dict[str, Any] | None,
        span: Span | None,
    ) -> AsyncGenerator[TextDelta | Turn, None]:
        body = {
            **self._body(messages, tools, model, extra),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        response = await self._send(body, stream=True, span=span)
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        usage: Usage | None = None
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("error"):
                    raise UpstreamFailed(f"the model server failed mid-answer: {_message(chunk)}")
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if isinstance(delta.get("content"), str) and delta["content"]:
                        text.append(delta["content"])
                        yield TextDelta(delta["content"])
                    for fragment in delta.get("tool_calls") or []:
                        call = calls.setdefault(
                            int(fragment.get("index", len(calls))), {"id": "", "name": "", "arguments": ""}
                        )
                        function = fragment.get("function") or {}
                        call["id"] = fragment.get("id") or call["id"]
                        call["name"] += function.get("name") or ""
                        call["arguments"] += function.get("arguments") or ""
                    finish = choice.get("finish_reason") or finish
        except UpstreamFailed:
            self.failures += 1
            raise
        except (httpx.HTTPError, ValueError, TypeError, KeyError, AttributeError) as exc:
            self.failures += 1
            raise UpstreamFailed(f"the model server's stream broke off: {_describe(exc)}") from None
        finally:
            await response.aclose()
        yield Turn(
            text="".join(text) if text else None,
            tool_calls=tuple(
                ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}")
                for i, c in sorted(calls.items())
            ),
            finish_reason=finish,
            usage=usage,
        )

    async def _send(self, body: dict[str, Any], *, stream: bool, span: Span | None = None) -> httpx.Response:
        """POST chat/completions with the retries the rules allow; the response is open (streamed)
        and has a 2xx status. Inside a trace, each attempt carries the chat span's `traceparent`."""
        attempt = 0
        headers = telemetry.chat_headers(span)
        while True:
            self.calls += 1
            try:
                request = self._http.build_request("POST", "chat/completions", json=body, headers=headers)
                response = await self._http.send(request, stream=True)
            except httpx.HTTPError as exc:
                where = self.config.base_url
                failure = f"could not get an answer from the model server at {where}: {_describe(exc)}"
                retry_after = None
            else:
                if response.status_code < 300:
                    if not stream:
                        try:
                            await response.aread()
                        except httpx.HTTPError as exc:
                            await response.aclose()
                            self.failures += 1
                            raise UpstreamFailed(
                                f"the model server's answer broke off: {_describe(exc)}"
                            ) from None
                    return response
                await response.aread()
                await response.aclose()
                failure = f"the model server answered {response.status_code}: {_message_of(response)}"
                if response.status_code not in RETRY_STATUSES:
                    self.failures += 1
                    raise UpstreamFailed(failure)
                retry_after = _retry_after(response)
            if attempt >= self.config.max_retries:
                self.failures += 1
                raise UpstreamFailed(failure)
            delay = retry_after if retry_after is not None else 0.5 * 2**attempt
            attempt += 1
            log.warning("upstream model: %s; retry %d in %.1f s", failure, attempt, delay)
            await asyncio.sleep(min(delay, MAX_BACKOFF))


def _answered(span: Span | None, turn: Turn | None) -> None:
    """End a chat span with what the turn says of itself: token usage and finish reason."""
    usage = turn.usage if turn is not None else None
    telemetry.chat_end(
        span,
        input_tokens=usage.prompt_tokens if usage is not None else None,
        output_tokens=usage.completion_tokens if usage is not None else None,
        finish_reason=turn.finish_reason if turn is not None else None,
    )


def configured(settings: Settings) -> ChatModel | None:
    """The model the settings name, or None when none is configured."""
    if not settings.llm_base_url:
        return None
    return ChatModel(
        LLMConfig(
            settings.llm_base_url,
            settings.llm_api_key,
            settings.llm_model,
            settings.llm_timeout,
            settings.llm_max_retries,
        )
    )


def require(model: ChatModel | None) -> ChatModel:
    """The configured model, or 501 naming the variable that configures it."""
    if model is None:
        raise NotConfigured(
            "no upstream model is configured: set CATALOG_LLM_BASE_URL (an OpenAI-compatible Chat "
            "Completions endpoint), and CATALOG_LLM_MODEL / CATALOG_LLM_API_KEY as it needs"
        )
    return model


def assistant_message(text: str | None, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The assistant's turn as the chat continues it: its text and its tool calls."""
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }


def content_text(content: Any) -> str:
    """The text of an OpenAI message's `content`: a string, or its text parts (`input_text`,
    `output_text`, `text`) joined by newlines; other parts (images, files, refusals) are left out."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and isinstance(part.get("text"), str)
            and part.get("type", "text") in ("input_text", "output_text", "text")
        )
    return ""


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value or "{}"
    return json.dumps(value if value is not None else {})


def _usage(usage: dict[str, Any]) -> Usage | None:
    if not isinstance(usage, dict) or not usage:
        return None
    return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))


def _message(payload: Any) -> str:
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)[:MAX_ERROR_TEXT]
    if isinstance(error, str):
        return error[:MAX_ERROR_TEXT]
    if isinstance(payload, dict) and isinstance(payload.get("message"), str):
        return payload["message"][:MAX_ERROR_TEXT]
    return json.dumps(payload)[:MAX_ERROR_TEXT]


def _message_of(response: httpx.Response) -> str:
    try:
        return _message(response.json())
    except ValueError:
        return response.text[:MAX_ERROR_TEXT] or response.reason_phrase


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
