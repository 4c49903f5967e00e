"""Token verification: every failure is 401 UNAUTHENTICATED with a short reason."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rest import UC, bearer

from catalog.auth import TokenVerifier, ensure_dev_key, mint_dev_token
from catalog.auth.signing import PRIVATE_KEY_FILE
from catalog.auth.tokens import LEEWAY_SECONDS
from catalog.errors import Unauthenticated
from catalog.settings import DEV_AUDIENCE, DEV_ISSUER, Settings


def claims(**overrides: object) -> dict[str, object]:
    now = int(time.time())
    base: dict[str, object] = {
        "sub": "alice",
        "iss": DEV_ISSUER,
        "aud": DEV_AUDIENCE,
        "iat": now,
        "exp": now + 600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def dev_key(settings: Settings) -> Ed25519PrivateKey:
    return ensure_dev_key(settings.keys_dir)


def sign(settings: Settings, **overrides: object) -> str:
    return jwt.encode(claims(**overrides), dev_key(settings), algorithm="EdDSA")


def status_and_reason(client, token: str) -> tuple[int, dict]:
    r = client.get(f"{UC}/metastore_summary", headers={"Authorization": f"Bearer {token}"})
    return r.status_code, r.json()


def test_valid_token_is_accepted(client, settings):
    assert status_and_reason(client, sign(settings))[0] == 200


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def test_refusals(client, settings):
    other = Ed25519PrivateKey.generate()
    good = sign(settings)
    head, body, sig = good.split(".")
    tampered_body = _b64({**claims(), "sub": "admin"})
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = (
        dev_key(settings)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    cases = {
        "none algorithm": _b64({"alg": "none", "typ": "JWT"}) + "." + _b64(claims(sub="admin")) + ".",
        "wrong key": jwt.encode(claims(), other, algorithm="EdDSA"),
        "tampered claims": f"{head}.{tampered_body}.{sig}",
        "expired": sign(settings, exp=int(time.time()) - 120),
        "wrong issuer": sign(settings, iss="someone-else"),
        "wrong audience": sign(settings, aud="another-service"),
        "missing sub": sign(settings, sub=None),
        "missing exp": sign(settings, exp=None),
        "missing iat": sign(settings, iat=None),
        "empty sub": sign(settings, sub=""),
        "NUL in sub": sign(settings, sub="ad\u0000min"),
        "NUL in on_behalf_of": sign(settings, on_behalf_of="bo\u0000b"),
        # the subject and the end user are scopes where no other is named: a scope's rules hold
        "a control character in sub": sign(settings, sub="ad\nmin"),
        "blank on_behalf_of": sign(settings, on_behalf_of="  "),
        "a control character in on_behalf_of": sign(settings, on_behalf_of="bo\tb"),
        "on_behalf_of longer than a scope": sign(settings, on_behalf_of="u" * 257),
        "hs256 with the public key as secret": _hs256(claims(), public_pem),
        "rs256 from an unknown key": jwt.encode(claims(), rsa_key, algorithm="RS256"),
        "exp as a numeric string": sign(settings, exp=str(int(time.time()) + 600)),
        "iat as a numeric string": sign(settings, iat=str(int(time.time()))),
        "nbf as a numeric string": sign(settings, nbf=str(int(time.time()) - 10)),
        "garbage": "not-a-token",
        "signature stripped": f"{head}.{body}.",
    }
    for name, token in cases.items():
        status, err = status_and_reason(client, token)
        assert status == 401, name
        assert err["error_code"] == "UNAUTHENTICATED", name
        assert set(err) == {"error_code", "message", "details"} and err["details"] == []
        assert len(err["message"]) < 80, name


def _hs256(payload: dict, secret: bytes) -> str:
    """An HS256 token keyed with the public key's bytes (the classic algorithm-confusion attack)."""
    import hashlib
    import hmac

    header = _b64({"alg": "HS256", "typ": "JWT"})
    body = _b64(payload)
    mac = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}." + base64.urlsafe_b64encode(mac).decode().rstrip("=")


def test_leeway_is_thirty_seconds(client, settings):
    assert status_and_reason(client, sign(settings, exp=int(time.time()) - 10))[0] == 200
    assert status_and_reason(client, sign(settings, exp=int(time.time()) - 45))[0] == 401


def test_missing_and_malformed_headers(client):
    assert client.get(f"{UC}/catalogs").status_code == 401
    r = client.get(f"{UC}/catalogs", headers={"Authorization": "Basic YWRtaW46eA=="})
    assert r.status_code == 401 and r.json()["error_code"] == "UNAUTHENTICATED"
    assert client.get(f"{UC}/catalogs", headers={"Authorization": "Bearer "}).status_code == 401


def test_open_routes_need_no_token(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200


def test_on_behalf_of_is_carried(settings):
    verifier = TokenVerifier(settings)
    principal = asyncio.run(verifier.verify(mint_dev_token(settings, "app", on_behalf_of="user-123")))
    assert principal.name == "app" and principal.on_behalf_of == "user-123"
    with pytest.raises(Unauthenticated):
        asyncio.run(verifier.verify(sign(settings, on_behalf_of=42)))


def test_dev_key_is_private(settings):
    ensure_dev_key(settings.keys_dir)
    mode = stat.S_IMODE((settings.keys_dir / PRIVATE_KEY_FILE).stat().st_mode)
    assert mode == 0o600


def test_static_public_key_verifies_its_own_algorithm_only(tmp_path: Path):
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "pub.pem").write_bytes(pem)
    settings = Settings(
        data_dir=tmp_path, jwt_public_key=str(tmp_path / "pub.pem"), jwt_issuer="corp", jwt_audience="mc"
    )
    verifier = TokenVerifier(settings)
    good = jwt.encode(claims(iss="corp", aud="mc"), key, algorithm="ES256")
    assert asyncio.run(verifier.verify(good)).name == "alice"
    with pytest.raises(Unauthenticated):
        asyncio.run(verifier.verify(_hs256(claims(iss="corp", aud="mc"), pem)))
    with pytest.raises(Unauthenticated, match="issuer"):
        asyncio.run(verifier.verify(jwt.encode(claims(aud="mc"), key, algorithm="ES256")))
    assert not (tmp_path / "keys").exists()  # production mode makes no dev key


class _Jwks:
    def __init__(self) -> None:
        self.keys: list[dict] = []
        self.hits = 0

    def serve(self) -> ThreadingHTTPServer:
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.hits += 1
                body = json.dumps({"keys": jwks.keys}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def _jwk(private_key, kid: str, alg: str) -> dict:
    data = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(private_key.public_key()))
    return {**data, "kid": kid, "alg": alg, "use": "sig"}


@contextlib.contextmanager
def _identity_provider(tmp_path: Path) -> Iterator[tuple[_Jwks, rsa.RSAPrivateKey, TokenVerifier]]:
    """A JWKS endpoint offering one RS256 key (`k1`) and a verifier that trusts it."""
    jwks = _Jwks()
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks.keys = [_jwk(rsa_key, "k1", "RS256")]
    server = jwks.serve()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        yield (
            jwks,
            rsa_key,
            TokenVerifier(Settings(data_dir=tmp_path, jwks_url=url, jwt_issuer="idp", jwt_audience="mc")),
        )
    finally:
        server.shutdown()


def test_jwks_keys_are_cached_and_unknown_kid_refetch_is_rate_limited(tmp_path: Path):
    with _identity_provider(tmp_path) as (jwks, rsa_key, verifier):

        async def scenario() -> None:
            token = jwt.encode(claims(iss="idp", aud="mc"), rsa_key, algorithm="RS256", headers={"kid": "k1"})
            for _ in range(5):
                assert (await verifier.verify(token)).name == "alice"
            assert jwks.hits == 1  # cached
            unknown = jwt.encode(
                claims(iss="idp", aud="mc"), rsa_key, algorithm="RS256", headers={"kid": "k9"}
            )
            for _ in range(5):
                with pytest.raises(Unauthenticated, match="unknown signing key"):
                    await verifier.verify(unknown)
            assert jwks.hits == 1  # within the refetch interval: no hammering of the JWKS endpoint
            # after the interval, a new kid is fetched once
            ec_key = ec.generate_private_key(ec.SECP256R1())
            jwks.keys.append(_jwk(ec_key, "k2", "ES256"))
            verifier.source._fetched_at -= 11  # type: ignore[union-attr]
            rotated = jwt.encode(
                claims(iss="idp", aud="mc"), ec_key, algorithm="ES256", headers={"kid": "k2"}
            )
            assert (await verifier.verify(rotated)).name == "alice"
            assert jwks.hits == 2
            # a token claiming RS256 under the EC key's kid is refused
            forged = jwt.encode(
                claims(iss="idp", aud="mc"), rsa_key, algorithm="RS256", headers={"kid": "k2"}
            )
            with pytest.raises(Unauthenticated):
                await verifier.verify(forged)

        asyncio.run(scenario())


def test_a_verified_token_is_remembered_until_it_expires_and_no_other_string_hits(settings):
    verifier = TokenVerifier(settings)
    # valid for about three more seconds (the 30 s leeway)
    token = sign(settings, exp=int(time.time()) - LEEWAY_SECONDS + 3)
    head, body, sig = token.split(".")

    async def scenario() -> None:
        for _ in range(3):
            assert (await verifier.verify(token)).name == "alice"
        assert verifier.signature_checks == 1  # remembered
        # the same signature over other claims is a different string: checked, and refused
        with pytest.raises(Unauthenticated, match="bad token signature"):
            await verifier.verify(f"{head}.{_b64({**claims(), 'sub': 'admin'})}.{sig}")
        assert verifier.signature_checks == 2
        await asyncio.sleep(
            max(0.0, json.loads(base64.urlsafe_b64decode(body + "==="))["exp"] + LEEWAY_SECONDS - time.time())
            + 0.2
        )
        with pytest.raises(Unauthenticated, match="token expired"):  # not remembered past its expiry
            await verifier.verify(token)

    asyncio.run(scenario())


def test_a_remembered_token_is_refused_once_its_key_leaves_the_jwks(tmp_path: Path):
    with _identity_provider(tmp_path) as (jwks, rsa_key, verifier):
        token = jwt.encode(claims(iss="idp", aud="mc"), rsa_key, algorithm="RS256", headers={"kid": "k1"})

        async def scenario() -> None:
            assert (await verifier.verify(token)).name == "alice"
            assert (await verifier.verify(token)).name == "alice"
            assert verifier.signature_checks == 1
            jwks.keys = [_jwk(ec.generate_private_key(ec.SECP256R1()), "k2", "ES256")]  # k1 withdrawn
            verifier.source._fetched_at -= verifier.source.ttl + 1  # type: ignore[union-attr]
            with pytest.raises(Unauthenticated, match="unknown signing key"):
                await verifier.verify(token)

        asyncio.run(scenario())


# --- how a client without a token finds out how to sign in (RFC 6750, RFC 9728) ---------------------

METADATA = "/.well-known/oauth-protected-resource"


def test_a_401_names_the_bearer_scheme_and_where_to_learn_how_to_sign_in(client, settings):
    base = str(client.base_url).rstrip("/")
    server = f'resource_metadata="{base}{METADATA}"'
    r = client.get(f"{UC}/catalogs")  # no credentials: no error (RFC 6750, 3.1)
    assert r.status_code == 401 and r.headers["www-authenticate"] == f"Bearer {server}"
    r = client.get(f"{UC}/catalogs", headers={"Authorization": "Basic YWRtaW46eA=="})
    assert r.headers["www-authenticate"] == (
        'Bearer error="invalid_request", '
        "error_description=\"authorization header must be 'Bearer <token>'\", " + server
    )
    expired = sign(settings, exp=int(time.time()) - 3600, iat=int(time.time()) - 7200)
    r = client.get(f"{UC}/catalogs", headers={"Authorization": f"Bearer {expired}"})
    assert r.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", error_description="token expired", {server}'
    )
    # a memory store's MCP server is a protected resource of its own: its metadata is named
    mcp = client.post("/mcp/memory-stores/main.default.Somewhere", json={})
    assert mcp.status_code == 401
    assert mcp.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{base}{METADATA}/mcp/memory-stores/main.default.Somewhere"'
    )
    # an answer other than 401 challenges nothing
    assert "www-authenticate" not in client.get(f"{UC}/catalogs", headers=bearer(settings)).headers
    assert "www-authenticate" not in client.get(f"{UC}/catalogs/nope", headers=bearer(settings, "x")).headers


def audit_events_on(database_url: str, pattern: str) -> int:
    import asyncpg

    async def count() -> int:
        conn = await asyncpg.connect(database_url)
        try:
            query = (
                "SELECT count(*) FROM audit_events WHERE action_name LIKE $1 OR request_params::text LIKE $1"
            )
            return int(await conn.fetchval(query, pattern))
        finally:
            await conn.close()

    return asyncio.run(count())


def test_the_protected_resource_metadata_is_open_and_unaudited(client, database_url):
    """Development mode: the metadata names the resource and how a token is sent, and no
    authorization server (the issuer `memory-catalog-dev` is no URL an OAuth flow could reach)."""
    base = str(client.base_url).rstrip("/")
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):  # open: a bad token changes nothing
        r = client.get(METADATA, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json() == {
            "resource": base,
            "resource_name": "Memory Catalog",
            "bearer_methods_supported": ["header"],
        }
        assert r.headers["access-control-allow-origin"] == "*"
    # any store's name is answered, whether or not it exists: it tells nobody which ones do
    r = client.get(f"{METADATA}/mcp/memory-stores/main.default.no_such_store")
    assert r.status_code == 200
    assert r.json()["resource"] == f"{base}/mcp/memory-stores/main.default.no_such_store"
    assert "main.default.no_such_store" in r.json()["resource_name"]
    assert client.get(f"{METADATA}/api/2.1/unity-catalog").status_code == 404
    assert audit_events_on(database_url, "%oauth-protected-resource%") == 0


def test_an_identity_providers_issuer_is_named_as_the_authorization_server(own_settings):
    """What MCP clients read to run OAuth against the identity provider: its issuer URL (what
    `iss` must be), in a document the MCP SDK's own model accepts."""
    import dataclasses

    from fake_embedder import HashEncoder
    from litestar.testing import TestClient
    from mcp.shared.auth import ProtectedResourceMetadata

    from catalog.app import create_app

    issuer = "https://idp.example.com/realms/agents"
    settings = dataclasses.replace(own_settings, jwt_issuer=issuer)
    with TestClient(create_app(settings, encoder=HashEncoder())) as app:
        for path in (METADATA, f"{METADATA}/mcp/memory-stores/main.default.assistant"):
            r = app.get(path)
            assert r.status_code == 200 and r.json()["authorization_servers"] == [issuer], r.text
            parsed = ProtectedResourceMetadata.model_validate(r.json())
            assert [str(s) for s in parsed.authorization_servers] == [issuer]
        assert (
            r.json()["resource"]
            == f"{str(app.base_url).rstrip('/')}/mcp/memory-stores/main.default.assistant"
        )
