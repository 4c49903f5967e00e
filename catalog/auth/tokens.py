"""Token verification.

Rules:
- only EdDSA, RS256 and ES256 are accepted, and each key verifies only its own algorithm
  (an Ed25519 key never verifies an RS256 token; HS256 and `none` are never accepted);
- `exp`, `iat`, `sub`, `iss`, `aud` are required; issuer and audience must match; 30 s leeway;
  `exp`, `iat` and `nbf` are JSON numbers (NumericDate): a string of digits is refused, although
  PyJWT would read it as a number;
- the optional `on_behalf_of` claim (a non-empty string) names the end user an app acts for;
- every failure is `Unauthenticated` with a short reason, nothing else.

A token that verified is remembered (by its SHA-256) for at most `VERIFIED_TTL` seconds and never
past its expiry (with the leeway): the same token sent again skips the signature check, which was
most of the cost of authenticating a request. A remembered token is still refused once its key is
no longer offered (a JWKS that dropped it), and a different string (any byte of a forged or
altered token) is never a hit.

Keys come from one source: the data dir's development key, a static public key
(`CATALOG_JWT_PUBLIC_KEY`, PEM text or a path to a PEM file), or a JWKS URL fetched off the event
loop, cached, and refetched for an unknown `kid` at most once every `refetch_interval` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from catalog.auth.principal import Principal
from catalog.auth.signing import ensure_dev_key, key_id, load_dev_private_key
from catalog.errors import Unauthenticated
from catalog.settings import Settings
from catalog.wire.inputs import MAX_PRINCIPAL, MAX_SCOPE, name_like

ALLOWED_ALGORITHMS = ("EdDSA", "RS256", "ES256")
LEEWAY_SECONDS = 30
REQUIRED_CLAIMS = ["exp", "iat", "sub", "iss", "aud"]
TIME_CLAIMS = ("exp", "iat", "nbf")
MAX_TOKEN_BYTES = 8192
VERIFIED_TTL = 60.0  # how long a verified token is remembered (never past its expiry)
VERIFIED_MAX = 10_000  # how many are remembered (the least recently used go first)


def algorithm_for(key: Any) -> str:
    if isinstance(key, Ed25519PublicKey):
        return "EdDSA"
    if isinstance(key, RSAPublicKey):
        return "RS256"
    if isinstance(key, EllipticCurvePublicKey) and isinstance(key.curve, SECP256R1):
        return "ES256"
    raise ValueError(f"unsupported verification key type {type(key).__name__}")


def load_public_key(value: str) -> Any:
    text = value.strip()
    if not text.startswith("-----BEGIN"):
        text = Path(text).read_text()
    key = serialization.load_pem_public_key(text.encode())
    algorithm_for(key)  # refuse unsupported key types at start
    return key


class JwksKeySource:
    def __init__(self, url: str, *, ttl: float = 300.0, refetch_interval: float = 10.0) -> None:
        self.url = url
        self.ttl = ttl
        self.refetch_interval = refetch_interval
        self._keys: dict[str | None, Any] = {}
        self._fetched_at = float("-inf")
        self._lock = asyncio.Lock()
        self.fetches = 0

    def _fetch_blocking(self) -> dict[str | None, Any]:
        with urllib.request.urlopen(self.url, timeout=5) as response:  # noqa: S310 (configured URL)
            document = json.loads(response.read(1_000_000))
        keys: dict[str | None, Any] = {}
        for jwk in document.get("keys", []):
            try:
                parsed = jwt.PyJWK.from_dict(jwk)
                algorithm_for(parsed.key)
            except (jwt.PyJWKError, ValueError, KeyError, TypeError):
                continue  # a key we may not use is simply not offered
            keys[jwk.get("kid")] = parsed.key
        return keys

    async def get(self, kid: str | None) -> Any:
        now = time.monotonic()
        stale = now - self._fetched_at > self.ttl
        if stale or self._lookup(kid) is None:
            async with self._lock:
                now = time.monotonic()
                if (now - self._fetched_at > self.ttl) or (
                    self._lookup(kid) is None and now - self._fetched_at >= self.refetch_interval
                ):
                    try:
                        keys = await asyncio.to_thread(self._fetch_blocking)
                    except (OSError, ValueError) as exc:
                        if not self._keys:
                            raise Unauthenticated("verification keys unavailable") from exc
                    else:
                        self._keys = keys
                        self.fetches += 1
                    self._fetched_at = now
        key = self._lookup(kid)
        if key is None:
            raise Unauthenticated("unknown signing key")
        return key

    def _lookup(self, kid: str | None) -> Any:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)


class StaticKeySource:
    def __init__(self, key: Any) -> None:
        self.key = key

    async def get(self, kid: str | None) -> Any:
        return self.key


@dataclass(frozen=True)
class _Verified:
    principal: Principal
    kid: str | None
    key: Any
    until: float  # wall-clock seconds: the earlier of expiry + leeway and now + VERIFIED_TTL


class TokenVerifier:
    def __init__(self, settings: Settings) -> None:
        self._verified: OrderedDict[bytes, _Verified] = OrderedDict()
        self.signature_checks = 0
        self.issuer = settings.jwt_issuer
        self.audience = settings.jwt_audience
        self.source: JwksKeySource | StaticKeySource
        if settings.jwks_url:
            self.source = JwksKeySource(settings.jwks_url)
        elif settings.jwt_public_key:
            self.source = StaticKeySource(load_public_key(settings.jwt_public_key))
        else:
            self.source = StaticKeySource(ensure_dev_key(settings.keys_dir).public_key())

    async def verify(self, token: str) -> Principal:
        if len(token) > MAX_TOKEN_BYTES:
            raise Unauthenticated("token too large")
        digest = hashlib.sha256(token.encode()).digest()
        known = self._verified.get(digest)
        if known is not None:
            if time.time() < known.until and await self.source.get(known.kid) is known.key:
                self._verified.move_to_end(digest)
                return known.principal
            del self._verified[digest]  # expired, or its key is gone: verified again (and refused)
        principal, kid, key, expiry = await self._check(token)
        self._verified[digest] = _Verified(
            principal, kid, key, min(expiry + LEEWAY_SECONDS, time.time() + VERIFIED_TTL)
        )
        if len(self._verified) > VERIFIED_MAX:
            self._verified.popitem(last=False)
        return principal

    async def _check(self, token: str) -> tuple[Principal, str | None, Any, float]:
        """The token's principal, key id, key and expiry, once its signature and claims hold."""
        self.signature_checks += 1
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated("malformed token") from exc
        algorithm = header.get("alg")
        if algorithm not in ALLOWED_ALGORITHMS:
            raise Unauthenticated("token algorithm not allowed")
        kid = header.get("kid") if isinstance(header.get("kid"), str) else None
        key = await self.source.get(kid)
        if algorithm != algorithm_for(key):
            raise Unauthenticated("token algorithm does not match the key")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": REQUIRED_CLAIMS, "verify_signature": True},
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("token expired") from exc
        except jwt.InvalidIssuerError as exc:
            raise Unauthenticated("wrong token issuer") from exc
        except jwt.InvalidAudienceError as exc:
            raise Unauthenticated("wrong token audience") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"token lacks the '{exc.claim}' claim") from exc
        except jwt.InvalidSignatureError as exc:
            raise Unauthenticated("bad token signature") from exc
        except jwt.ImmatureSignatureError as exc:
            raise Unauthenticated("token issued in the future") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated("invalid token") from exc
        for claim in TIME_CLAIMS:
            value = claims.get(claim)
            if claim in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise Unauthenticated(f"the token's '{claim}' claim must be a number (epoch seconds)")
        # the subject and the end user are scopes where no other is named (MCP's tools, a
        # conversation's default scope): each holds to a scope's rules, or the token is refused
        sub = claims.get("sub")
        if not name_like(sub, MAX_PRINCIPAL):
            raise Unauthenticated("token subject must be a non-empty string without control characters")
        on_behalf_of = claims.get("on_behalf_of")
        if on_behalf_of is not None and not name_like(on_behalf_of, MAX_SCOPE):
            raise Unauthenticated(f"on_behalf_of must be 1-{MAX_SCOPE} characters, no control characters")
        return Principal(name=sub, on_behalf_of=on_behalf_of), kid, key, float(claims["exp"])


def mint_dev_token(
    settings: Settings,
    sub: str,
    *,
    on_behalf_of: str | None = None,
    ttl: int = 3600,
    now: float | None = None,
) -> str:
    """A token signed with the data dir's development key (development mode only)."""
    if not settings.dev_mode:
        raise RuntimeError("tokens can only be minted in development mode (no JWKS or public key configured)")
    keys_dir = settings.keys_dir
    key = (
        load_dev_private_key(keys_dir)
        if (keys_dir / "dev_ed25519.pem").exists()
        else ensure_dev_key(keys_dir)
    )
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {
        "sub": sub,
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "iat": issued,
        "exp": issued + ttl,
    }
    if on_behalf_of:
        claims["on_behalf_of"] = on_behalf_of
    return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": key_id(key.public_key())})
