"""The web console at /console/: pages rendered on the server from the same services the REST
routes call. Each request passes through the app's RequestMiddleware (one audit event per request)
and, but for the sign-in page and the static files, through the console's session
(`session.ConsoleSession`), which authenticates the cookie's token as a bearer token is
authenticated. Forms that change something carry the session's CSRF token and are answered with
a redirect (303) to the page they came from. The console's icon is served at the root
(`/favicon.ico`, where browsers look for it) with neither a session nor an audit event."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Request, Response, Router, get, post
from litestar.middleware import DefineMiddleware
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.static_files import create_static_files_router

from catalog.access import SecurableType
from catalog.auth import Principal, authenticate
from catalog.console import service
from catalog.console.render import console_error, page, redirect
from catalog.console.session import (
    COOKIE,
    COOKIE_PATH,
    MAX_COOKIE_TOKEN,
    ConsoleSession,
    CsrfRefused,
    check_csrf,
    next_page,
    read_form,
    same_origin,
)
from catalog.errors import CatalogError, FieldError, InvalidParameter, Unauthenticated
from catalog.governance.permissions import service as permissions
from catalog.recorder import note_success_status
from catalog.web.deps import Ctx

Req = Request[Principal, str, Any]
Query = FromQuery[str | None]
# `scope` is Litestar's name for the ASGI scope: the parameter is read under another name
ScopeQuery = Annotated[str | None, QueryParameter(name="scope")]
PathPart = FromPath[str]

# the console's paths: the API's bearer-token middleware leaves them to the console's session
CONSOLE_PATHS = r"^/console(/|$)"
OPEN = {"exclude_from_auth": True}


# --- signing in and out ------------------------------------------------------------------------------


WHY = {
    "ended": "Your session ended: its token expired or is no longer accepted. Sign in again.",
    "signed-out": "You are signed out.",
}


@get("/sign-in", opt=OPEN, include_in_schema=False)
async def sign_in_page(request: Req, next: Query = None, why: Query = None) -> Response[str]:
    return page(
        request, "sign_in.html", title="Sign in", next=next_page(next), notice=WHY.get(why or ""), error=None
    )


@post("/sign-in", opt=OPEN, include_in_schema=False, status_code=303)
async def sign_in(request: Req) -> Response[Any]:
    """The token from the form is verified as a bearer token is; the cookie then holds it. No CSRF
    token (there is no session yet), but a browser's post must come from the console's origin."""
    form = await read_form(request, frozenset({"token", "next"}))
    if not same_origin(request):  # another site signing this browser in to a session of its own
        raise CsrfRefused("cross-origin sign-in is refused")
    target = next_page(form.get("next"))
    token = form.get("token", "").strip()
    problem = None
    if not token:
        problem = "Token: paste a token (for example the output of `catalog token --sub NAME`)"
    elif len(token) > MAX_COOKIE_TOKEN:
        problem = f"Token: at most {MAX_COOKIE_TOKEN} characters fit in the console's cookie"
    if problem is not None:
        request.scope["state"]["error_code"] = InvalidParameter.error_code
        return page(
            request, "sign_in.html", status=400, title="Sign in", next=target, notice=None, error=problem
        )
    try:
        await authenticate(request, token)
    except Unauthenticated as exc:
        request.scope["state"]["error_code"] = exc.error_code
        return page(
            request,
            "sign_in.html",
            status=401,
            title="Sign in",
            next=target,
            notice=None,
            error=f"The token was not accepted: {exc.message}.",
        )
    response = redirect(target)
    response.set_cookie(
        COOKIE,
        token,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@post("/sign-out", include_in_schema=False, status_code=303)
async def sign_out(request: Req) -> Response[Any]:
    check_csrf(request, await read_form(request, frozenset({"csrf"})))
    response = redirect(f"{COOKIE_PATH}/sign-in?why=signed-out")
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


# --- browsing --------------------------------------------------------------------------------------


def _view(request: Req, template: str, title: str, found: Any, **values: Any) -> Response[str]:
    """A page; one that says a refusal inside it (`service.Refusal`) is answered with its status,
    and its code is the request's error code (as an error page's would be)."""
    refusal: service.Refusal | None = getattr(found, "refusal", None)
    if refusal is not None:
        request.scope["state"]["error_code"] = refusal.error_code
    status = refusal.status if refusal is not None else 200
    return page(request, template, status=status, title=title, view=found, **values)


@get("/", include_in_schema=False)
async def catalogs_view(request: Req, ctx: Ctx, page_token: Query = None) -> Response[str]:
    found = await service.catalogs_page(ctx, request.user, page_token)
    return page(request, "catalogs.html", title="Catalogs", view=found)


@get("/catalogs/{name:str}", include_in_schema=False)
async def catalog_view(
    request: Req, ctx: Ctx, name: PathPart, page_token: Query = None, done: Query = None
) -> Response[str]:
    found = await service.catalog_page(ctx, request.user, name, page_token)
    return _view(request, "catalog.html", f"Catalog {found.catalog.name}", found, done=done)


@get("/schemas/{full_name:str}", include_in_schema=False)
async def schema_view(
    request: Req, ctx: Ctx, full_name: PathPart, page_token: Query = None, done: Query = None
) -> Response[str]:
    found = await service.schema_page(ctx, request.user, full_name, page_token)
    return _view(request, "schema.html", f"Schema {found.schema.full_name}", found, done=done)


@get("/stores/{full_name:str}", include_in_schema=False)
async def store_view(
    request: Req,
    ctx: Ctx,
    full_name: PathPart,
    principal: Query = None,
    entry_scope: ScopeQuery = None,
    q: Query = None,
    mode: Query = None,
    page_token: Query = None,
    done: Query = None,
) -> Response[str]:
    found = await service.store_page(
        ctx,
        request.user,
        full_name,
        about=principal,
        scope=entry_scope,
        query=q,
        mode=mode,
        page_token=page_token,
    )
    return _view(
        request,
        "store.html",
        f"Memory store {found.store.full_name}",
        found,
        modes=service.SEARCH_MODES,
        done=done,
    )


@post("/review/{full_name:str}", include_in_schema=False, status_code=303)
async def review_entry(request: Req, ctx: Ctx, full_name: PathPart) -> Response[Any]:
    """Approve or reject an entry held for review (the store page's review queue; MANAGE): audited
    as `entries.review`, its provenance's review naming the console."""
    form = await read_form(request, service.REVIEW_FIELDS)
    check_csrf(request, form)
    note_success_status(303)  # the decision's audit event records what this request answers
    done = await service.review(ctx, request.user, full_name, form)
    return redirect(f"/console/stores/{full_name}?{urlencode({'done': done})}#review")


# the fields of the grants form as the permissions service names them (`changes[0].scopes[1]`:
# `scopes`), as the form names them
_FORM_FIELD = {"principal": "principal", "add": "privilege", "remove": "privilege", "scopes": "scopes"}


@post("/grants/{securable_type:str}/{full_name:str}", include_in_schema=False, status_code=303)
async def change_grants(
    request: Req, ctx: Ctx, securable_type: PathPart, full_name: PathPart
) -> Response[Any]:
    """Add or remove one privilege of one principal, or scope patterns of its grant (the grants
    panel's forms). A change refused (no MANAGE, a bad principal or pattern) is answered with the
    page the form was sent from, its grants panel saying why, and the refusal's status."""
    form = await read_form(request, frozenset({"csrf", "op", "principal", "privilege", "scopes"}))
    check_csrf(request, form)
    try:
        change = service.grant_form(securable_type, form)
        note_success_status(303)  # the change's audit event records what this request answers
        target, done = await service.change_grant(ctx, request.user, securable_type, full_name, change)
    except FieldError as err:
        field = re.sub(r"\[\d+\]$", "", (err.field or "").rpartition(".")[2])
        refused = (
            InvalidParameter(err.message, _FORM_FIELD[field]) if err.field and field in _FORM_FIELD else err
        )
        return await _refused_grant(request, ctx, securable_type, full_name, refused)
    except CatalogError as err:
        return await _refused_grant(request, ctx, securable_type, full_name, err)
    return redirect(f"{target}?{urlencode({'done': done})}#grants")


async def _refused_grant(
    request: Req, ctx: Ctx, securable_type: str, full_name: str, err: CatalogError
) -> Response[Any]:
    """The page a refused grants form was sent from, its grants panel saying why; the error page
    when the refusal is not one to say inside a page, or the page cannot be shown."""
    if not service.refused_inside(err):
        raise err
    refusal = service.Refusal.of(err)
    user = request.user
    try:
        kind = permissions.parse_securable_type(securable_type)
        if kind is SecurableType.CATALOG:
            found: Any = await service.catalog_page(ctx, user, full_name, None)
            title, template = f"Catalog {found.catalog.name}", "catalog.html"
        elif kind is SecurableType.SCHEMA:
            found = await service.schema_page(ctx, user, full_name, None)
            title, template = f"Schema {found.schema.full_name}", "schema.html"
        elif kind is SecurableType.MEMORY_STORE:
            found = await service.store_page(
                ctx, user, full_name, about=None, scope=None, query=None, mode=None, page_token=None
            )
            title, template = f"Memory store {found.store.full_name}", "store.html"
        else:
            raise err
    except CatalogError:
        raise err from None
    found = replace(found, grants_refused=refusal)
    return _view(request, template, title, found, modes=service.SEARCH_MODES, done=None)


# --- audit and lineage ------------------------------------------------------------------------------


@get("/audit", include_in_schema=False)
async def audit_log(
    request: Req,
    ctx: Ctx,
    principal: Query = None,
    action: Query = None,
    decision: Query = None,
    securable: Query = None,
    since: Query = None,
    until: Query = None,
    page_token: Query = None,
) -> Response[str]:
    filters = service.AuditFilters(
        principal=principal or None,
        action=action or None,
        decision=decision or None,
        securable=securable or None,
        since=since or None,
        until=until or None,
    )
    found = await service.audit_page(ctx, request.user, filters, page_token)
    return page(request, "audit.html", title="Audit log", view=found)


@get("/lineage/{full_name:str}", include_in_schema=False)
async def lineage_graph(
    request: Req, ctx: Ctx, full_name: PathPart, direction: Query = None, depth: Query = None
) -> Response[str]:
    found = await service.lineage_page(ctx, request.user, full_name, direction, depth)
    return page(request, "lineage.html", title=f"Lineage of {found.full_name}", view=found)


# --- the icon ----------------------------------------------------------------------------------------

# Browsers ask for /favicon.ico by themselves, on any page of the server; the console's pages
# name it too (<link rel="icon">). It is served at the root, as `/healthz` is: without a token
# (catalog.auth's AUTH_EXEMPT_PATHS) and without an audit event (catalog.web.middleware's
# UNAUDITED), so that a browser's asking for it is neither refused nor recorded as a denial.
FAVICON_PATH = "/favicon.ico"
FAVICON_TYPE = "image/svg+xml"
_FAVICON = (Path(__file__).parent / "static" / "favicon.svg").read_bytes()


@get(FAVICON_PATH, include_in_schema=False)
async def favicon() -> Response[bytes]:
    """The console's icon (the server's only one), cached a day."""
    return Response(
        content=_FAVICON,
        media_type=FAVICON_TYPE,
        headers={
            "Cache-Control": "public, max-age=86400",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'",
        },
    )


static_files = create_static_files_router(
    path="/static",
    directories=[Path(__file__).parent / "static"],
    opt=OPEN,
    include_in_schema=False,
    name="console-static",
)

router = Router(
    path=COOKIE_PATH,
    route_handlers=[
        sign_in_page,
        sign_in,
        sign_out,
        catalogs_view,
        catalog_view,
        schema_view,
        store_view,
        change_grants,
        review_entry,
        audit_log,
        lineage_graph,
        static_files,
    ],
    middleware=[DefineMiddleware(ConsoleSession, exclude_http_methods=[])],
    exception_handlers={Exception: console_error},
    include_in_schema=False,
)
