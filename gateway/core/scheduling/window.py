"""The adaptive batch window: a partial batch waits only when another request is likely.

Triton holds a partial batch until `max_queue_delay_microseconds` has passed since its
oldest request arrived, even when nothing else is coming: a client alone pays the whole
window on every request (the batched `mlp` at concurrency 1 ran 0.14x the unbatched one).

The rule: with an instance free, a partial batch waits only if at least `EXPECTED` more
requests are expected before its window ends. The expectation comes from `ArrivalRate`:
- the arrivals that came while other requests of the model were pending, per second that
  requests were pending, over the last `TAU_S` or so: the rate at which a queued request
  sees company arrive. A client that waits for each answer before it sends again never
  arrives while its own request is pending, so alone it never waits.
- none at all while as many requests are pending (queued or running) as the most pending
  at once in the last one or two `TAU_S`, when at least `CEILING_HITS` arrivals reached
  that most: N clients that each wait for their answer hit N again and again and then
  have nobody left to send, so 8 such clients do not wait out a window sized for 64
  (Triton's rule held the batched `mlp` at concurrency 8 to 0.4x the unbatched model).
  An open loop's highest point, reached once in a burst, does not count: sending early
  there only makes smaller batches and a longer backlog.
Under load arrivals overlap and batches fill as the config says.
`max_queue_delay_microseconds` stays the upper bound, and a model's parameter
`adaptive_batch_window: false` restores Triton's rule exactly.
"""

from __future__ import annotations

import math

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable
from backends.parameters import bool_parameter

# Memory of the arrival estimate, in seconds: long enough to span many windows, short enough
# that a load which stops is forgotten within a second or two.
TAU_S = 0.5
# Arrivals expected in the rest of the window for waiting to be worth it.
EXPECTED = 1.0
# Arrivals that must reach the same highest count of pending requests within a period
# before it counts as closed-loop clients' ceiling.
CEILING_HITS = 8
PARAMETER = "adaptive_batch_window"  # false: Triton's rule, the window always waited out


class ArrivalRate:
    """Arrivals per second of pending time: arrivals that find another request pending,
    over the time some request was pending, both decayed with time constant `tau_s`."""

    def __init__(self, tau_s: float = TAU_S) -> None:
        self._tau_s = tau_s
        self._overlaps = 0.0  # decayed count of arrivals that found company
        self._busy_s = 0.0  # decayed seconds during which a request was pending
        self._pending = 0
        self._last: float | None = None
        # The most requests pending at once, in this period of tau_s and in the one before,
        # and how many arrivals reached it.
        self._peak, self._peak_hits = 0, 0
        self._peak_before, self._hits_before = 0, 0
        self._period_start: float | None = None

    def _advance(self, now: float) -> None:
        if self._last is None:
            self._last = now
            return
        elapsed = now - self._last  # (conditionals, not max(): twice a request)
        if elapsed < 0.0:
            elapsed = 0.0
        decay = math.exp(-elapsed / self._tau_s)
        self._overlaps *= decay
        self._busy_s = self._busy_s * decay + (elapsed if self._pending else 0.0)
        self._last = now

    def _track_peak(self, now: float) -> None:
        if self._period_start is None or now - self._period_start >= self._tau_s:
            recent = self._period_start is not None and now - self._period_start < 2 * self._tau_s
            self._peak_before = self._peak if recent else 0
            self._hits_before = self._peak_hits if recent else 0
            self._peak, self._peak_hits = 0, 0
            self._period_start = now

    def _reach(self) -> None:
        if self._pending > self._peak:
            self._peak, self._peak_hits = self._pending, 1
        elif self._pending == self._peak:
            self._peak_hits += 1

    def _at_ceiling(self) -> bool:
        """Whether as many requests are pending as a ceiling that arrivals keep reaching:
        closed-loop clients, all waiting. An open loop's highest point, reached once in a
        burst, is no ceiling: there, sending early only makes smaller batches."""
        if self._peak >= self._peak_before:
            ceiling, hits = self._peak, self._peak_hits
        else:
            ceiling, hits = self._peak_before, self._hits_before
        return ceiling > 0 and self._pending >= ceiling and hits >= CEILING_HITS

    def arrived(self, now: float, count: int = 1) -> None:
        """A request of the model was accepted (`count` of them at once: a front's bundle,
        whose members after the first each find company)."""
        self._advance(now)
        self._overlaps += count if self._pending else count - 1
        self._pending += count
        self._track_peak(now)
        self._reach()

    def answered(self, now: float, count: int = 1) -> None:
        """A request of the model left: answered, refused or cancelled."""
        self._advance(now)
        pending = self._pending - count
        self._pending = pending if pending > 0 else 0

    @property
    def pending(self) -> int:
        """Requests of the model accepted and not yet answered."""
        return self._pending

    def per_second(self, now: float) -> float:
        """How fast more requests are expected to arrive now (see the module's rule)."""
        self._advance(now)
        self._track_peak(now)
        if self._at_ceiling():
            return 0.0  # as many pending as a ceiling reached again and again: all waiting
        if self._overlaps < 1.0:  # less than one recent arrival in company: no evidence
            return 0.0
        # At least a microsecond of pending time: an estimate, not a division by zero.
        return self._overlaps / max(self._busy_s, 1e-6)


def worth_waiting(arrivals_per_s: float, remaining_s: float) -> bool:
    """Whether a partial batch should wait out the `remaining_s` of its window."""
    return arrivals_per_s * remaining_s >= EXPECTED


def adaptive_window(config: mc.ModelConfig) -> bool:
    """The model's `adaptive_batch_window` parameter: true unless it says false; a value
    that is neither is the client's mistake (400), not the backend's."""
    try:
        return bool_parameter(config, PARAMETER, True)
    except BackendUnavailable as exc:
        raise InvalidArgument(str(exc)) from None
