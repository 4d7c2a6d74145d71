"""How many inference requests the fronts may hold admitted at once (--shed-lag-ms).

The event loop can be on time while requests still wait: a model that runs on threads of
the same core, or a thousand connections each with one request out -- to the server, a
closed loop of a thousand. Little's law bounds that wait: admitted at once, at most the
requests answered in (service time + the wait allowed), plus HEADROOM; past that, the
fronts refuse a new request at once (gateway/operation/shedding.py asks).

Both figures are measured per model each RATE_WINDOW_S from the core's counts of
requests in flight (gateway/operation/drain.py): the rate of answers, and the service time as the
least mean time a request spent inside over the windows so far (the time inside, by
Little's law, is the integral of the count over the answers; its least is the one with
the least waiting). The limit is the sum over the models answering, plus HEADROOM: a
cheap model's requests beside a slow one's count at their own service time, and do not
pull the slow one's down (measured over every model at once, a window of only the cheap
one's requests once set the service time for all, for good). So a model that takes 20 ms
keeps a closed loop of 64 clients, and a model served inline in 0.2 ms admits some 4 ms
worth of requests at a 1 ms target. A model with requests in flight and none answered in
a window (runs longer than a window) keeps its part; one with nothing in flight has none.
A window with nothing in flight at all forgets everything: UNMEASURED_LIMIT holds until
the first FIRST_WINDOW_S of work is measured (a surge on a thousand idle connections
would otherwise be admitted whole, and wait as long as a thousand take).

Only answers with a result count (a request that failed fast says nothing of how long
serving takes).

Pure: time comes in as arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable

HEADROOM = 8
RATE_WINDOW_S = 0.1
FIRST_WINDOW_S = 0.01
UNMEASURED_LIMIT = 64


# Per model: its counters' epoch (new counters start at 0), answered, seconds inside.
Served = dict[str, tuple[int, int, float]]


class AdmittedLimit:
    def __init__(self, wait_s: float, served: Callable[[], Served] | None) -> None:
        """`wait_s`: the wait allowed (0: no limit); `served`: the core's counters per
        model (InFlight.served; None: no limit)."""
        self.wait_s = wait_s
        self._served = served if wait_s > 0 else None
        self.value = math.inf if self._served is None else UNMEASURED_LIMIT
        self.service_s: dict[str, float] = {}  # per model, the least mean time inside
        self._parts: dict[str, float] = {}  # per model: rate x (service time + wait)
        self._measured = False
        # The current window: (start, the counters then, whether work was in flight at
        # any moment it was asked).
        self._window: tuple[float, Served, bool] | None = None

    def follow(self, now: float, working: bool) -> None:
        """At `now`, with requests in flight (`working`) or not; once a window has
        passed, the limit follows it."""
        if self._served is None:
            return
        if self._window is None:
            self._window = (now, self._served(), working)
            return
        began, then, worked = self._window
        worked = worked or working
        if now - began < (RATE_WINDOW_S if self._measured else FIRST_WINDOW_S):
            self._window = (began, then, worked)
            return
        served = self._served()
        for model, (epoch, answered, inside) in served.items():
            epoch_then, answered_then, inside_then = then.get(model, (epoch, 0, 0.0))
            if epoch_then != epoch:  # counted anew since the window began
                answered_then, inside_then = 0, 0.0
            answers = answered - answered_then
            if answers > 0:
                least = min(self.service_s.get(model, math.inf), (inside - inside_then) / answers)
                self.service_s[model] = least
                self._parts[model] = answers / (now - began) * (least + self.wait_s)
            elif inside <= inside_then:  # nothing of it in flight: no part of the limit
                self._parts.pop(model, None)
        for model in [m for m in self._parts if m not in served]:
            del self._parts[model]
        if self._parts:
            self.value = sum(self._parts.values()) + HEADROOM
            self._measured = True
        elif not worked:  # idle: what was measured may not hold for the next load
            self.value, self._measured = UNMEASURED_LIMIT, False
            self.service_s.clear()
        self._window = (now, served, False)
