"""Per-principal rate limits: a token bucket per principal, per server process.

Rules:
- off unless `CATALOG_RATE_LIMIT` (requests per second) is set; a principal may send `burst`
  requests at once, then `rate` per second;
- a request over the limit is answered 429 `REQUEST_LIMIT_EXCEEDED` with `Retry-After` (whole
  seconds until a request would be allowed) and is audited like any other;
- only authenticated requests count (the principal is the token's subject); buckets of the least
  recently seen principals are forgotten beyond `max_principals` (they start full again).
"""

from __future__ import annotations

import time
from collections import OrderedDict


class RateLimiter:
    def __init__(self, rate: float, burst: int, *, max_principals: int = 100_000) -> None:
        assert rate > 0 and burst >= 1
        self.rate = rate
        self.burst = float(burst)
        self.max_principals = max_principals
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, when

    def take(self, principal: str, now: float | None = None) -> float | None:
        """None when the request may go ahead; else the seconds until one would be allowed."""
        now = time.monotonic() if now is None else now
        tokens, then = self._buckets.pop(principal, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens >= 1.0:
            self._buckets[principal] = (tokens - 1.0, now)
            wait = None
        else:
            self._buckets[principal] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
        while len(self._buckets) > self.max_principals:
            self._buckets.popitem(last=False)
        return wait
