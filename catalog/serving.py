"""The HTTP/1.1 connection layer under the application (uvicorn's h11 protocol, extended).

What it adds, because it happens before a request reaches the application:
- errors are JSON like every other (`{"error_code","message","details"}`): a malformed request
  (bad bytes, a request line or headers longer than 16 KiB) is 400 `INVALID_PARAMETER_VALUE`;
- a cap on open connections (`CATALOG_MAX_CONNECTIONS`): a connection over the cap is answered
  503 `TEMPORARILY_UNAVAILABLE` with `Retry-After` and closed at once;
- slow-client protection (`CATALOG_HEADER_TIMEOUT`): a client that has not sent a complete request
  line and headers within the timeout (counted from when the connection opened or from the first
  byte of the next request) gets 408 `REQUEST_TIMEOUT` and is disconnected; idle keep-alive
  connections are closed quietly by uvicorn's keep-alive timeout. (A slow body is the
  application's `CATALOG_BODY_TIMEOUT`: see catalog.http.)
These connection-level refusals carry no principal and are not audit events; each is one log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from catalog.errors import error_body

log = logging.getLogger("catalog.request")


class CatalogProtocol(H11Protocol):
    def __init__(
        self,
        *args: Any,
        max_connections: int = 0,
        header_timeout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None

    # --- the connection cap --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.max_connections and len(self.connections) > self.max_connections:
            log.warning(
                "connection refused: too many open connections", extra={"limit": self.max_connections}
            )
            self.refuse(
                503,
                "TEMPORARILY_UNAVAILABLE",
                f"the server has {self.max_connections} open connections; retry shortly",
                retry_after=1,
            )
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    # --- slow clients --------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        waiting = self.conn.their_state is h11.IDLE
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_header_timer()  # the request line and headers are complete
        elif not waiting or self._header_timer is None:
            self._arm_header_timer()  # the first bytes of a new request

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        if self.header_timeout > 0:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is still being written (pipelining): not the client's fault
        pending, _ = self.conn.trailing_data
        if not pending:
            self.transport.close()  # an idle connection: close quietly
            return
        log.warning("connection closed: request headers too slow", extra={"timeout": self.header_timeout})
        self.refuse(
            408,
            "REQUEST_TIMEOUT",
            f"the request line and headers did not arrive within {self.header_timeout:g} s",
        )

    # --- JSON for uvicorn's own errors ---------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        self.refuse(
            400,
            "INVALID_PARAMETER_VALUE",
            "malformed HTTP request (bad bytes, or a request line or headers longer than 16 KiB)",
        )

    def refuse(self, status: int, error_code: str, message: str, retry_after: int | None = None) -> None:
        """Answer an error on the raw connection and close it (whatever state h11 is in)."""
        self._cancel_header_timer()
        body = json.dumps(error_body(error_code, message)).encode()
        head = [
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            "connection: close",
        ]
        if retry_after is not None:
            head.append(f"retry-after: {retry_after}")
        if not self.transport.is_closing():
            self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            self.transport.close()
