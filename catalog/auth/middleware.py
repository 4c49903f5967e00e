from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from litestar import Litestar
from litestar.connection import ASGIConnection
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult

from catalog.auth.principal import Principal
from catalog.auth.tokens import TokenVerifier
from catalog.errors import RequestLimitExceeded, Unauthenticated

# Routes open without a token (regular expressions matched against the path); `/favicon.ico`:
# the icon browsers ask for by themselves (catalog.console).
AUTH_EXEMPT_PATHS = [r"^/healthz$", r"^/openapi\.json$", r"^/docs", r"^/\.well-known/", r"^/favicon\.ico$"]


class Limiter(Protocol):
    """Per-principal request budget (`catalog.web.limits.RateLimiter`)."""

    rate: float

    def take(self, principal: str) -> float | None:
        """None when the principal may go on, else the seconds to wait."""


class SeenRecorder(Protocol):
    """Where token subjects are recorded (`catalog.governance.principals.SeenPrincipals`)."""

    async def saw(self, name: str) -> None: ...


@dataclass(frozen=True)
class AuthParts:
    """What authentication uses of the running server, put in the app's state by the
    composition root (`install_auth`) before any request."""

    verifier: TokenVerifier
    limiter: Limiter | None = None
    principals: SeenRecorder | None = None


_STATE_KEY = "auth_parts"


def install_auth(app: Litestar, parts: AuthParts) -> None:
    app.state[_STATE_KEY] = parts


def auth_parts(app: Litestar) -> AuthParts:
    parts: AuthParts | None = app.state.get(_STATE_KEY)
    if parts is None:
        raise Unauthenticated("the server is not started")
    return parts


async def authenticate(connection: ASGIConnection, token: str) -> Principal:
    """The one way a token becomes a principal, wherever it came from (the `Authorization`
    header, the web console's session cookie or its sign-in form): verified by the app's verifier
    (same algorithms, keys and claims), recorded for the request's log line and audit event,
    rate-limited per principal, and remembered as a known principal."""
    parts = auth_parts(connection.app)
    principal: Principal = await parts.verifier.verify(token)
    connection.scope["state"]["principal"] = principal.name
    connection.scope["state"]["on_behalf_of"] = principal.on_behalf_of
    limiter = parts.limiter
    if limiter is not None and (wait := limiter.take(principal.name)) is not None:
        raise RequestLimitExceeded(
            f"{principal.name} sent more than {limiter.rate:g} requests per second; retry later",
            retry_after=wait,
        )
    principals = parts.principals
    if principals is not None:  # the subject is a principal the server has seen (SCIM Users)
        await principals.saw(principal.name)
    return principal


class JWTAuthMiddleware(AbstractAuthenticationMiddleware):
    """`Authorization: Bearer <JWT>` → `request.user` is the verified `Principal`."""

    async def authenticate_request(self, connection: ASGIConnection) -> AuthenticationResult:
        # the first Authorization header, read from the raw list (ASGI names are lower-case):
        # building the connection's header mapping costs more than the rest of this check
        raw = next((value for name, value in connection.scope["headers"] if name == b"authorization"), None)
        header = raw.decode("latin-1") if raw is not None else None
        if not header:
            raise Unauthenticated("missing bearer token", bearer_error=None)
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                "authorization header must be 'Bearer <token>'", bearer_error="invalid_request"
            )
        principal = await authenticate(connection, token.strip())
        return AuthenticationResult(user=principal, auth=None)
