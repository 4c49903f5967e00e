"""How a client that holds no token finds out how to sign in (RFC 6750, RFC 9728, and the MCP
authorization specification, which builds on them).

- Every 401 carries `WWW-Authenticate: Bearer` with `resource_metadata`, the URL of the protected
  resource metadata that describes what answered: the route's own (`/.well-known/oauth-protected-
  resource` followed by the route's path) when the route is a protected resource of its own (its
  handler's `opt` holds `PROTECTED_RESOURCE`: each memory store's MCP server), else the server's
  (`/.well-known/oauth-protected-resource`). A refused token adds `error="invalid_token"` and the
  reason as `error_description`; no token at all, no error (RFC 6750, section 3.1).
- The metadata (`protected_resource_metadata`) names the resource, the token issuer as its
  authorization server (`CATALOG_JWT_ISSUER`, when it is an issuer identifier, an http(s) URL, as
  an identity provider's is), and the one way a token is sent (the header). In development mode
  the issuer is `memory-catalog-dev`, which no OAuth flow can reach: the metadata then names no
  authorization server (RFC 9728 lets it), and `catalog token` mints the tokens.

The routes that serve the metadata are open without a token and leave no audit event, as
`/healthz` (`catalog.dialects.mcp.discovery`).
"""

from __future__ import annotations

import re

import msgspec

# where RFC 9728 puts a resource's metadata: this, followed by the resource's path when it has one
PROTECTED_RESOURCE_METADATA = "/.well-known/oauth-protected-resource"
# the `opt` flag of a route that is a protected resource of its own (its metadata: the path-suffixed form)
PROTECTED_RESOURCE = "protected_resource"
SERVER_NAME = "Memory Catalog"

_UNQUOTABLE = re.compile(r"[^\x20-\x21\x23-\x5b\x5d-\x7e]")  # RFC 6750: no `"` or `\` in a value


def origin(base_url: str) -> str:
    """`http://host:port` of a request's base URL (no trailing slash)."""
    return base_url.rstrip("/")


def metadata_url(base_url: str, resource_path: str | None) -> str:
    """The URL of the metadata of the resource at `resource_path` (None: the server as a whole)."""
    suffix = "/" + resource_path.strip("/") if resource_path and resource_path.strip("/") else ""
    return f"{origin(base_url)}{PROTECTED_RESOURCE_METADATA}{suffix}"


def _quoted(value: str) -> str:
    return '"' + _UNQUOTABLE.sub("?", value)[:300] + '"'


def bearer_challenge(metadata: str, error: str | None = None, description: str | None = None) -> str:
    """The `WWW-Authenticate` value of a 401: the Bearer scheme, the error (when a token or a
    header was refused) and the metadata URL."""
    params = []
    if error is not None:
        params.append(f"error={_quoted(error)}")
        if description:
            params.append(f"error_description={_quoted(description)}")
    params.append(f"resource_metadata={_quoted(metadata)}")
    return "Bearer " + ", ".join(params)


class ProtectedResourceMetadata(msgspec.Struct, kw_only=True, omit_defaults=True):
    """RFC 9728's metadata of a protected resource: bearer tokens from `authorization_servers`
    (the issuer the server checks `iss` against, `CATALOG_JWT_ISSUER`; absent in development
    mode, where `catalog token` mints them), sent in the `Authorization` header only."""

    resource: str  # the resource's URL: the server's origin, or a memory store's MCP server
    resource_name: str
    authorization_servers: list[str] | None = None
    bearer_methods_supported: list[str] = msgspec.field(default_factory=lambda: ["header"])


_ISSUER_IDENTIFIER = re.compile(r"^https?://[^\s/?#]+[^\s?#]*$")


def protected_resource_metadata(resource: str, issuer: str, name: str) -> ProtectedResourceMetadata:
    """The metadata of `resource`, whose tokens `issuer` signs (named when it is a URL)."""
    servers = [issuer] if _ISSUER_IDENTIFIER.match(issuer) else None
    return ProtectedResourceMetadata(resource=resource, resource_name=name, authorization_servers=servers)
