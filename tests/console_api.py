"""Data for the web console's tests, set up with the Python client (`catalog.client`) over the
same `httpx.Client` the test uses: a live server's, or the in-process `TestClient`."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from rest import UC

from catalog.client import Client


class Api:
    """`headers(principal)` gives the `Authorization` header of a token for that principal."""

    def __init__(self, http: httpx.Client, headers: Callable[[str], dict[str, str]]) -> None:
        self.http = http
        self.headers = headers

    def client(self, principal: str = "admin") -> Client:
        """The Python client, as `principal`, on the test's HTTP client (which it does not close)."""
        token = self.headers(principal)["Authorization"].removeprefix("Bearer ")
        return Client(token=token, http=self.http)

    def create_store(self, name: str, *, description: str = "", as_: str = "admin") -> str:
        """`main.default.<name>`, owned by `as_`; its full name."""
        full_name = f"main.default.{name}"
        self.client(as_).memory_stores.create(full_name, description=description or None)
        return full_name

    def create_group(self, name: str, members: list[str]) -> None:
        self.client().groups.create(name, members=members)

    def grant(self, kind: str, full_name: str, principal: str, *privileges: str) -> None:
        self.client().grants.update(kind, full_name, principal, add=list(privileges))

    def grants(self, kind: str, full_name: str) -> dict[str, list[str]]:
        return {a.principal: list(a.privileges) for a in self.client().grants.get(kind, full_name)}

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
        sources = [{"memory_store": s, "scope": sc, "path": p} for s, sc, p in derived_from]
        self.client().store(store).write(
            scope, path, contents, description=description, derived_from=sources or None
        )

    def get_store_as(self, principal: str, store: str) -> httpx.Response:
        """A REST read of the store's metadata by `principal` (allowed or denied, audited)."""
        return self.http.get(f"{UC}/memory-stores/{store}", headers=self.headers(principal))
