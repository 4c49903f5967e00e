"""What the tests share to speak to a server over HTTP: the Unity Catalog API's prefix (`UC`), and
a bearer header for a principal (`bearer`), minted with the server's own development key: from
its `Settings`, or from a live server's data dir (anything with a `data_dir`)."""

from __future__ import annotations

from typing import Any

from catalog.auth import mint_dev_token
from catalog.settings import Settings

UC = "/api/2.1/unity-catalog"


def bearer(server: Any, sub: str = "admin", **claims: Any) -> dict[str, str]:
    """The Authorization header of `sub` (and any further claims: `on_behalf_of`, ...)."""
    settings = server if isinstance(server, Settings) else Settings(data_dir=server.data_dir)
    return {"Authorization": f"Bearer {mint_dev_token(settings, sub, **claims)}"}
