"""Which byte ranges of a worker's output arena the gateway still reads.

Outputs are handed to the response encoders as views into the arena, not copies, so
a range stays leased until the last view of it is gone; the worker writes the next
batch's outputs into the largest range that no lease holds.
"""

from __future__ import annotations

import itertools


class OutputLeases:
    def __init__(self) -> None:
        self._live: dict[int, tuple[int, int]] = {}
        self._ids = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def hold(self, start: int, end: int) -> int:
        lease = next(self._ids)
        self._live[lease] = (start, end)
        return lease

    def release(self, lease: int) -> None:
        # Called by finalizers, possibly after forget(): an unknown lease is no error.
        self._live.pop(lease, None)

    def forget(self) -> None:
        """The arena was replaced: old leases hold the old mapping, not this one."""
        self._live.clear()

    def window(self, size: int) -> tuple[int, int]:
        """The largest free range [start, limit) of an arena of `size` bytes."""
        best = (0, 0)
        cursor = 0
        for start, end in sorted(self._live.values()):
            if start - cursor > best[1] - best[0]:
                best = (cursor, start)
            cursor = max(cursor, end)
        if size - cursor > best[1] - best[0]:
            best = (cursor, size)
        return best
