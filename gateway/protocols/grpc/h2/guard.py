"""What one HTTP/2 connection may make the server do in a second, beyond its calls.

A frame that asks nothing of a call still costs the server a turn: a PING or SETTINGS
is answered, an empty frame parsed, a header block decoded (pure-Python HPACK: a
Huffman-coded block decodes at some 5 MB/s), a reset stream set up and torn down. The
floods that took servers down (CVE-2019-9512 PING, CVE-2019-9515 SETTINGS,
CVE-2019-9518 empty frames, CVE-2023-44487 rapid reset, CVE-2024-27316 CONTINUATION)
send these as fast as the network goes. Each kind has a budget over a sliding second,
far above what a client library sends (grpc's pings its BDP probes and keepalives, a
few a second at most); past it the connection ends with GOAWAY ENHANCE_YOUR_CALM. Pure:
time comes in as an argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocols.grpc.h2.frames import ENHANCE_YOUR_CALM, H2Error


@dataclass(frozen=True)
class FloodLimits:
    """Most of each a connection may send in any second."""

    pings: int = 100  # PING frames that want an answer
    settings: int = 100  # SETTINGS frames that want an acknowledgement
    resets: int = 1000  # streams the client reset, or that we refused
    empty: int = 100  # DATA, HEADERS or CONTINUATION frames that carry nothing
    # PRIORITY, unknown types, acknowledgements we did not ask for, resets of closed
    # streams and of calls at their own deadline
    idle: int = 1000
    # WINDOW_UPDATE frames: these, and what we sent earns (writer.py: 4 an answer, 2 a
    # DATA frame; a client credits what it receives).
    window_updates: int = 1000
    # CPU spent decoding header blocks (a repeated block is free): grpc's client with a
    # trace id and request id new on every call, 64 calls at once, cost 77 us a block
    # and about 300 ms a second at 3,800 calls a second (pure-Python HPACK).
    header_decoding_ms: int = 500
    continuations: int = 32  # CONTINUATION frames in one header block


class Budget:
    """Counts spent over a sliding window: this window's count, plus the last one's
    weighted by how much of it still lies within the window (two numbers, not a log)."""

    __slots__ = ("limit", "window_s", "_start", "_current", "_previous")

    def __init__(self, limit: int, now: float, window_s: float = 1.0) -> None:
        self.limit = limit
        self.window_s = window_s
        self._start = now
        self._current: float = 0
        self._previous: float = 0

    def refund(self, amount: int) -> None:
        """Give `amount` back (what the other side earned), at most one limit ahead."""
        self._current = max(self._current - amount, -self.limit)

    def spend(self, now: float, amount: float = 1) -> bool:
        """Count `amount`; False once the window holds more than the limit."""
        elapsed = now - self._start
        if elapsed >= self.window_s:
            windows = int(elapsed // self.window_s)
            self._previous = self._current if windows == 1 else 0
            self._current = 0
            self._start += windows * self.window_s
            elapsed -= windows * self.window_s
        self._current += amount
        carried = self._previous * (1.0 - elapsed / self.window_s)
        return carried + self._current <= self.limit


class FloodGuard:
    """One connection's budgets; `spend` raises H2Error(ENHANCE_YOUR_CALM) past one."""

    def __init__(self, limits: FloodLimits, now: float) -> None:
        self.limits = limits
        self._budgets = {
            name: Budget(getattr(limits, name), now)
            for name in ("pings", "settings", "resets", "empty", "idle", "window_updates",
                         "header_decoding_ms")
        }  # fmt: skip

    def refund(self, name: str, amount: int) -> None:
        self._budgets[name].refund(amount)

    def spend(self, name: str, now: float, amount: float = 1) -> None:
        budget = self._budgets[name]
        if not budget.spend(now, amount):
            what = name.replace("_", " ")
            raise H2Error(
                ENHANCE_YOUR_CALM, f"more than {budget.limit} {what} in a second: a flood"
            )
