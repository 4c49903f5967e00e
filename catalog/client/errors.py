"""The one exception the client raises for anything the server (or the network) refused."""

from __future__ import annotations

from typing import Any

# codes the client gives failures that never reached an answer from the server
CONNECTION_FAILED = "CONNECTION_FAILED"
TIMEOUT = "TIMEOUT"
INVALID_RESPONSE = "INVALID_RESPONSE"


class CatalogError(Exception):
    """An error answer, as the server sent it: `status` (0 when no answer came), `error_code`
    (`PERMISSION_DENIED`, `NOT_FOUND`, ...), `message`, `details` and the `request_id` that the
    server's audit event carries."""

    def __init__(
        self,
        status: int,
        error_code: str,
        message: str,
        *,
        details: list[Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{error_code}: {message}")
        self.status = status
        self.error_code = error_code
        self.message = message
        self.details = details or []
        self.request_id = request_id

    def __repr__(self) -> str:
        return f"CatalogError(status={self.status}, error_code={self.error_code!r}, message={self.message!r})"
