"""How many inference requests the fronts may hold admitted at once (--shed-lag-ms).

The event loop can be on time while requests still wait: a model that runs on threads of
the same core, or a thousand connections each with one request out -- to the server, a
closed loop of a thousand. Little's law bounds that wait: admitted at once, at most the
requests answered in (service time + the wait allowed), plus HEADROOM; past that, the
fronts refuse a new request at once (gateway/shedding.py asks).

Both figures are measured each RATE_WINDOW_S from the core's count of requests in flight
(gateway/drain.py): the rate of answers, and the service time as the least mean time a
request spent inside over the windows so far (the time inside, by Little's law, is the
integral of the count over the answers; its least is the one with the least waiting).
So a model that takes 20 ms keeps a closed loop of 64 clients, and a model served inline
in 0.2 ms admits some 4 ms worth of requests at a 1 ms target. A window with requests in
flight and none answered (runs longer than a window) leaves the limit as it was; one
with nothing in flight forgets both: UNMEASURED_LIMIT holds until the first FIRST_WINDOW_S
of work is measured (a surge on a thousand idle connections would otherwise be admitted
whole, and wait as long as a thousand take).

Only answers with a result count (a request that failed fast says nothing of how long
serving takes). Known defect: the least is over every window since the last idle one and
over every model, so a window of only a cheap model's requests beside a slow one pulls
it down for good, and the limit then refuses part of the slow model's closed loop
(README, "A known defect").

Pure: time comes in as arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable

HEADROOM = 8
RATE_WINDOW_S = 0.1
FIRST_WINDOW_S = 0.01
UNMEASURED_LIMIT = 64


class AdmittedLimit:
    def __init__(self, wait_s: float, served: Callable[[], tuple[int, float]] | None) -> None:
        """`wait_s`: the wait allowed (0: no limit); `served`: the core's (requests
        answered, seconds spent inside) so far, counters (None: no limit)."""
        self.wait_s = wait_s
        self._served = served if wait_s > 0 else None
        self.value = math.inf if self._served is None else UNMEASURED_LIMIT
        self.service_s = math.inf  # the least mean time inside, over the windows
        self._measured = False
        # The current window: (start, answered then, seconds inside then, whether work
        # was in flight at any moment it was asked).
        self._window: tuple[float, int, float, bool] | None = None

    def follow(self, now: float, working: bool) -> None:
        """At `now`, with requests in flight (`working`) or not; once a window has
        passed, the limit follows it."""
        if self._served is None:
            return
        if self._window is None:
            self._window = (now, *self._served(), working)
            return
        began, answered_then, inside_then, worked = self._window
        worked = worked or working
        if now - began < (RATE_WINDOW_S if self._measured else FIRST_WINDOW_S):
            self._window = (began, answered_then, inside_then, worked)
            return
        answered, inside = self._served()
        answers = answered - answered_then
        if answers > 0:
            self.service_s = min(self.service_s, (inside - inside_then) / answers)
            rate = answers / (now - began)
            self.value = rate * (self.service_s + self.wait_s) + HEADROOM
            self._measured = True
        elif not worked:  # idle: what was measured may not hold for the next load
            self.value, self.service_s, self._measured = UNMEASURED_LIMIT, math.inf, False
        self._window = (now, answered, inside, False)
