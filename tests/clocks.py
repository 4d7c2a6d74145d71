"""Clocks for tests that check what the code decides from times, not this machine's speed."""

from __future__ import annotations

from collections.abc import Callable


def runs_take(run_ns: int) -> Callable[[], int]:
    """An instance's clock (`Instance(clock_ns=...)`) by which every run takes `run_ns`:
    it is read once at a run's start and once at its end."""
    now = [0]

    def clock_ns() -> int:
        now[0] += run_ns
        return now[0]

    return clock_ns


class FakeClock:
    """Seconds that pass only when a test (or a test's backend) says: `clock()` reads them,
    `advance(s)` moves them on. A batcher on it never sees a window run out by waiting."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
