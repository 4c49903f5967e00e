"""The web console's session: a cookie holding the bearer token, verified on every request
exactly as the API verifies `Authorization: Bearer` (`catalog.auth.authenticate`), and the CSRF
token that every state-changing form carries.

Why the cookie holds the token itself rather than the id of a session kept on the server: the
console then has no credential of its own. Each request is authenticated by the same verifier,
algorithm allow-list, keys (a rotated JWKS key included) and expiry as an API call with that
token, in any number of server processes, with no session table to keep, prune or erase; the
session ends when the token expires, whatever the browser keeps. Its exposure is that of the
token the person pasted: the cookie is HttpOnly (no script reads it), SameSite=Strict (no other
site's page sends it), Path=/console (no API request carries it), Secure over https, and never
written to a URL or the audit log. Signing out removes it from the browser; a copy taken before
then stays valid until the token's `exp`, as the token itself does (short-lived tokens keep that
short). A token too long for a cookie (browsers keep about 4 KB) is refused at sign-in.

CSRF: a form's token is HMAC-SHA256 keyed with the session's bearer token, so it is bound to the
session (another sign-in gives another one), needs no state, and reveals nothing of the token.
A page of another origin can neither read it nor make the browser send the cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult

from catalog.auth import Principal, authenticate
from catalog.errors import InvalidParameter, PermissionDenied, Unauthenticated

COOKIE = "catalog_console"
COOKIE_PATH = "/console"
MAX_COOKIE_TOKEN = 3800  # characters: a browser keeps a cookie of about 4096 bytes with its name
_CSRF_LABEL = b"memory-catalog console csrf v1"
FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FORM_FIELDS = 20

Req = Request[Principal, str, Any]


class SignInRequired(Unauthenticated):
    """A console page was asked for without a usable session: answered by a redirect to the
    sign-in page (`ended`: there was a session cookie, but its token is no longer accepted)."""

    def __init__(self, message: str, *, ended: bool = False) -> None:
        super().__init__(message)
        self.ended = ended


class CsrfRefused(PermissionDenied):
    """A state-changing form without the CSRF token of the session, or posted from another origin."""


class ConsoleSession(AbstractAuthenticationMiddleware):
    """The session cookie → `request.user` (the verified principal), `request.auth` (the token).
    The sign-in page and the static files are excluded (`exclude_from_auth`)."""

    async def authenticate_request(self, connection: ASGIConnection) -> AuthenticationResult:
        token = connection.cookies.get(COOKIE)
        if not token:
            raise SignInRequired("no console session")
        try:
            principal = await authenticate(connection, token)
        except SignInRequired:
            raise
        except Unauthenticated as exc:
            raise SignInRequired(
                f"the session's token is no longer accepted: {exc.message}", ended=True
            ) from exc
        return AuthenticationResult(user=principal, auth=token)


def csrf_token(session_token: str) -> str:
    """The CSRF token of the session whose bearer token this is."""
    mac = hmac.new(session_token.encode(), _CSRF_LABEL, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def same_origin(request: Req) -> bool:
    """Whether a POST comes from a page of this server: its `Origin` (sent by browsers with every
    POST) names the host it was sent to. Clients that send no `Origin` rely on the CSRF token alone."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin != "null" and urlsplit(origin).netloc.lower() == host.lower()


def check_csrf(request: Req, form: dict[str, str]) -> None:
    """403 (and a denied audit event) unless the form carries the session's CSRF token and comes
    from this origin."""
    if not same_origin(request):
        raise CsrfRefused("cross-origin form posts are refused")
    given = form.get("csrf", "")
    if not given or not hmac.compare_digest(given.encode(), csrf_token(request.auth).encode()):
        raise CsrfRefused(
            "the form's CSRF token is missing or does not match this session; reload the page and try again"
        )


async def read_form(request: Req, fields: frozenset[str]) -> dict[str, str]:
    """The URL-encoded form of a POST, each field at most once and no other: 400 naming the
    field otherwise. Absent fields are absent from the answer."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != FORM_TYPE:
        raise InvalidParameter(f"the form must be sent as {FORM_TYPE}", "content-type")
    body = await request.body()
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FORM_FIELDS)
    except UnicodeDecodeError:
        raise InvalidParameter("the form is not UTF-8 text", "form") from None
    except ValueError:
        raise InvalidParameter(f"the form has more than {MAX_FORM_FIELDS} fields", "form") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        name = key[:60]
        if key not in fields:
            raise InvalidParameter(f"unknown form field {name!r}", name)
        if key in form:
            raise InvalidParameter(f"form field {name!r} may be given only once", name)
        if "\x00" in value:
            raise InvalidParameter(f"{name} must not contain NUL characters", name)
        form[key] = value
    return form


def next_page(value: str | None) -> str:
    """Where to go after signing in: a console page of this server, else the console's start."""
    if (
        value
        and value.startswith(COOKIE_PATH + "/")
        and "\\" not in value
        and not any(ord(c) < 0x20 for c in value)
        and not value.startswith(COOKIE_PATH + "/sign-")
    ):
        return value
    return COOKIE_PATH + "/"
