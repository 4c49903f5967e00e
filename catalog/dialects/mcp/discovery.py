"""Protected resource metadata (RFC 9728), where MCP clients look for it before they sign in.

An MCP client that is answered 401 reads `resource_metadata` from the answer's `WWW-Authenticate`
(or, given none, tries `/.well-known/oauth-protected-resource` followed by the MCP server's path,
then the bare form), and learns there which authorization server issues the tokens this server
accepts. Both forms are served:

- `/.well-known/oauth-protected-resource/mcp/memory-stores/{full_name}`: one store's MCP server;
- `/.well-known/oauth-protected-resource`: the server as a whole (every route takes the same
  bearer tokens).

The authorization server named is the token issuer, `CATALOG_JWT_ISSUER` (an identity provider's
URL in production). In development mode the issuer is `memory-catalog-dev`, which no OAuth flow can
reach, and none is named: `catalog token` mints the tokens there (docs/agents/mcp.md says so).

Like `/healthz`, these routes are open without a token (`catalog.auth`'s AUTH_EXEMPT_PATHS:
`/.well-known/`) and leave no audit event (`catalog.web.middleware`'s UNAUDITED). They read no
database: the metadata of a store's MCP server is answered for any name, so it tells nobody which
stores exist.
"""

from __future__ import annotations

from litestar import Response, get
from litestar.params import FromPath

from catalog.auth import PROTECTED_RESOURCE_METADATA, ProtectedResourceMetadata, protected_resource_metadata
from catalog.auth.discovery import SERVER_NAME, origin
from catalog.dialects.mcp.routes import BASE
from catalog.web.deps import Ctx, Req

# public, and read by browser-based clients (MCP Inspector) from another origin
_HEADERS = {"Access-Control-Allow-Origin": "*", "Cache-Control": "public, max-age=300"}


@get(
    PROTECTED_RESOURCE_METADATA,
    operation_id="getProtectedResourceMetadata",
    tags=["operations"],
    summary="How to get a token for this server",
    description="RFC 9728's protected resource metadata of the server as a whole: the token "
    "issuer (`CATALOG_JWT_ISSUER`, when it is a URL; none in development mode) as its authorization "
    "server, and the bearer token sent in the `Authorization` header.",
)
async def server_metadata(request: Req, ctx: Ctx) -> Response[ProtectedResourceMetadata]:
    resource = origin(str(request.base_url))
    metadata = protected_resource_metadata(resource, ctx.settings.jwt_issuer, SERVER_NAME)
    return Response(metadata, headers=_HEADERS)


@get(
    f"{PROTECTED_RESOURCE_METADATA}{BASE}/{{full_name:str}}",
    operation_id="getMcpProtectedResourceMetadata",
    tags=["operations"],
    summary="How to get a token for a memory store's MCP server",
    description="RFC 9728's protected resource metadata of the MCP server of one memory store (as "
    "the MCP authorization specification asks, and as a 401 of that server names it in "
    "`WWW-Authenticate`): the token issuer as its authorization server. Answered for any name: "
    "whether the store exists, and who may use it, is decided by the MCP server itself.",
)
async def mcp_server_metadata(
    request: Req, ctx: Ctx, full_name: FromPath[str]
) -> Response[ProtectedResourceMetadata]:
    resource = f"{origin(str(request.base_url))}{BASE}/{full_name}"
    name = f"{SERVER_NAME}: the memory tools of {full_name}"
    return Response(protected_resource_metadata(resource, ctx.settings.jwt_issuer, name), headers=_HEADERS)
