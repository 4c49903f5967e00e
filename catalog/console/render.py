"""HTML out: the console's templates (Jinja2, autoescaped, shipped in the package), the headers
every console page carries, and the error pages (what the API answers as JSON, said as a page)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from litestar import MediaType, Request, Response
from litestar.response import Redirect

from catalog.auth import Principal
from catalog.console.session import COOKIE, COOKIE_PATH, CsrfRefused, SignInRequired, csrf_token
from catalog.recorder import note_refusal
from catalog.web.errors import handle_exception

_templates = Environment(
    loader=PackageLoader("catalog.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _epoch_ms(value: int | None) -> str:
    if value is None:
        return ""
    return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


_templates.filters["ms"] = _epoch_ms

# Every console answer: no script or style but the console's own files, no framing, not cached
# (pages show what a principal may see), no referrer beyond this origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

TITLES = {
    400: "The request was not accepted",
    401: "Sign-in needed",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed here",
    409: "Conflict",
    413: "Too large",
    429: "Too many requests",
    503: "Temporarily unavailable",
    504: "Took too long",
}


def page(
    request: Request[Any, Any, Any], template: str, *, status: int = 200, **values: Any
) -> Response[str]:
    """A console page; the signed-in principal and the session's CSRF token are in every one."""
    user = request.scope.get("user")
    token = request.scope.get("auth")
    html = _templates.get_template(template).render(
        principal=user.name if isinstance(user, Principal) else None,
        csrf=csrf_token(token) if isinstance(token, str) else "",
        **values,
    )
    return Response(content=html, status_code=status, media_type=MediaType.HTML, headers=SECURITY_HEADERS)


def redirect(location: str) -> Redirect:
    """303 See Other: after a form, the browser asks for the page with GET."""
    return Redirect(path=location, status_code=303, headers=SECURITY_HEADERS)


def console_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The console's exception handler: a page without a session goes to sign-in; any other error
    is the API's answer (same status, code, message, logging and audit) as a page."""
    if isinstance(exc, SignInRequired):
        note_refusal("unauthenticated", exc.message)
        query = {"next": request.url.path} if request.method == "GET" else {}
        if exc.ended:
            query["why"] = "ended"
        response: Response[Any] = redirect(
            f"{COOKIE_PATH}/sign-in" + (f"?{urlencode(query)}" if query else "")
        )
        if exc.ended:
            response.delete_cookie(COOKIE, path=COOKIE_PATH)
        return response
    if isinstance(exc, CsrfRefused):
        note_refusal("deny", exc.message)
    answer = handle_exception(request, exc)
    body = answer.content if isinstance(answer.content, dict) else {}
    details = body.get("details") or []
    status = answer.status_code or 500
    response = page(
        request,
        "error.html",
        status=status,
        title=TITLES.get(status, "Something went wrong"),
        status_code=status,
        error_code=body.get("error_code", ""),
        message=body.get("message", ""),
        field=details[0].get("field") if details and isinstance(details[0], dict) else None,
        back=request.headers.get("referer") if _same_site_referer(request) else None,
    )
    for name in ("Retry-After", "Allow"):
        if name in answer.headers:
            response.headers[name] = answer.headers[name]
    return response


def _same_site_referer(request: Request[Any, Any, Any]) -> bool:
    referer = request.headers.get("referer", "")
    origin = f"{request.url.scheme}://{request.headers.get('host', '')}{COOKIE_PATH}/"
    return referer.startswith(origin)
