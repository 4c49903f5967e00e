"""What requests and answers are made of, and how their parts are checked, for every slice:
- `bodies`: the bases of wire types (`Input` refuses unknown fields, `Output` leaves defaults out);
- `names`: catalog, schema and store names; `entry_keys`: the scope, session and path of an entry;
- `metadata`: an entry's metadata and filters; `inputs`: limits every text input is held to;
- `pagination`: page sizes and signed page tokens.
"""

from catalog.wire.bodies import Degraded, Input, Output, SearchLeg, rfc3339

__all__ = ["Degraded", "Input", "Output", "SearchLeg", "rfc3339"]
