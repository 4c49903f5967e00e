"""Data for the web console's tests, set up over the REST API with plain httpx calls: the one
place to switch to `catalog.client` once it exists. Works on a live server's `httpx.Client` and on
the in-process `TestClient` (an `httpx.Client` too)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

UC = "/api/2.1/unity-catalog"
SCIM = "/api/2.0/preview/scim/v2/Groups"


class Api:
    """`headers(principal)` gives the `Authorization` header of a token for that principal."""

    def __init__(self, http: httpx.Client, headers: Callable[[str], dict[str, str]]) -> None:
        self.http = http
        self.headers = headers

    def _ok(self, response: httpx.Response) -> httpx.Response:
        assert response.status_code == 200, (
            f"{response.request.method} {response.request.url}: {response.text}"
        )
        return response

    def create_store(self, name: str, *, description: str = "", as_: str = "admin") -> str:
        """`main.default.<name>`, owned by `as_`; its full name."""
        body = {"name": name, "catalog_name": "main", "schema_name": "default", "description": description}
        self._ok(self.http.post(f"{UC}/memory-stores", headers=self.headers(as_), json=body))
        return f"main.default.{name}"

    def create_group(self, name: str, members: list[str]) -> None:
        body = {"displayName": name, "members": [{"value": m} for m in members]}
        self._ok(self.http.post(SCIM, headers=self.headers("admin"), json=body))

    def grant(self, kind: str, full_name: str, principal: str, *privileges: str) -> None:
        body = {"changes": [{"principal": principal, "add": list(privileges)}]}
        self._ok(
            self.http.patch(f"{UC}/permissions/{kind}/{full_name}", headers=self.headers("admin"), json=body)
        )

    def grants(self, kind: str, full_name: str) -> dict[str, list[str]]:
        r = self._ok(self.http.get(f"{UC}/permissions/{kind}/{full_name}", headers=self.headers("admin")))
        return {a["principal"]: a["privileges"] for a in r.json()["privilege_assignments"]}

    def write(
        self,
        store: str,
        scope: str,
        path: str,
        contents: str,
        *,
        description: str | None = None,
        derived_from: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    ) -> None:
        body: dict[str, object] = {"path": path, "contents": contents}
        if description:
            body["description"] = description
        if derived_from:
            body["derived_from"] = [{"memory_store": s, "scope": sc, "path": p} for s, sc, p in derived_from]
        self._ok(
            self.http.post(
                f"{UC}/memory-stores/{store}/entries",
                params={"scope": scope},
                headers=self.headers("admin"),
                json=body,
            )
        )

    def get_store_as(self, principal: str, store: str) -> httpx.Response:
        """A REST read of the store's metadata by `principal` (allowed or denied, audited)."""
        return self.http.get(f"{UC}/memory-stores/{store}", headers=self.headers(principal))
