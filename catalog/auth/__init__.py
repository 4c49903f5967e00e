"""Authentication: bearer JWTs verified against the dev key, a static public key or a JWKS."""

from catalog.auth.discovery import (
    PROTECTED_RESOURCE,
    PROTECTED_RESOURCE_METADATA,
    ProtectedResourceMetadata,
    bearer_challenge,
    metadata_url,
    protected_resource_metadata,
)
from catalog.auth.middleware import (
    AUTH_EXEMPT_PATHS,
    AuthParts,
    JWTAuthMiddleware,
    authenticate,
    install_auth,
)
from catalog.auth.principal import Principal
from catalog.auth.signing import ensure_dev_key, load_dev_private_key
from catalog.auth.tokens import ALLOWED_ALGORITHMS, TokenVerifier, mint_dev_token

__all__ = [
    "ALLOWED_ALGORITHMS",
    "AUTH_EXEMPT_PATHS",
    "PROTECTED_RESOURCE",
    "PROTECTED_RESOURCE_METADATA",
    "AuthParts",
    "JWTAuthMiddleware",
    "Principal",
    "ProtectedResourceMetadata",
    "TokenVerifier",
    "authenticate",
    "bearer_challenge",
    "ensure_dev_key",
    "install_auth",
    "load_dev_private_key",
    "metadata_url",
    "mint_dev_token",
    "protected_resource_metadata",
]
