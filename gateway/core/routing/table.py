"""Which variant serves a request: a pure function of the weights and a point in [0, 1).

Without a sticky key the points are the golden-ratio sequence frac(n * 0.618...):
any run of N requests splits between the variants within a few requests of the
weights, where random draws would stray by about sqrt(N). With a sticky key the
point is a hash of the key, so the same key reaches the same variant for as long
as the weights stay the same.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from dataclasses import dataclass

GOLDEN = 0.6180339887498949  # (sqrt(5) - 1) / 2


# Compared and hashed by identity: a router keys its per-variant counters by route on
# every request, and a field-wise hash costs a Python call each time.
@dataclass(frozen=True, slots=True, eq=False)
class Route:
    model: str
    version: str
    weight: float


def key_point(key: str) -> float:
    """A point in [0, 1) that depends only on `key` (stable across processes and runs,
    unlike hash())."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class RouteTable:
    """Routes with positive weights, each owning a share of [0, 1) in proportion."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = [r for r in routes if r.weight > 0]
        if not self.routes:
            raise ValueError("a route table needs a route with a positive weight")
        total = sum(r.weight for r in self.routes)
        running, self._bounds = 0.0, []
        for route in self.routes:
            running += route.weight
            self._bounds.append(running / total)
        self._bounds[-1] = 1.0  # whatever the rounding, the last share ends at 1
        self._count = 0

    def choose(self, key: str | None = None) -> Route:
        if key is None:
            self._count += 1
            point = (self._count * GOLDEN) % 1.0
        else:
            point = key_point(key)
        return self.routes[min(bisect_right(self._bounds, point), len(self.routes) - 1)]
