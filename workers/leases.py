"""Which byte ranges of a worker's output arena the gateway still reads.

Outputs are handed to the response encoders as views into the arena, not copies. Every
view of one reply's outputs is based on one holder array; the reply's range stays
leased until the holder, and so the last view, is gone. The worker writes the next
batch's outputs into the largest range that no lease holds.
"""

from __future__ import annotations

import weakref

import numpy as np


class OutputLeases:
    def __init__(self) -> None:
        # id(weak reference to the holder) -> (the reference, start, end). Keyed by id,
        # as an array cannot be hashed; the reference lives here, so its id stays unique.
        self._live: dict[int, tuple[weakref.ref, int, int]] = {}

    def __len__(self) -> int:
        return len(self._live)

    def lease(self, holder: np.ndarray, start: int, end: int) -> None:
        """Hold [start, end) until `holder` is garbage."""
        # A plain weak reference with a callback: a fraction of weakref.finalize's cost,
        # which is paid on every batch.
        ref = weakref.ref(holder, self._released)
        self._live[id(ref)] = (ref, start, end)

    def _released(self, ref: weakref.ref) -> None:
        # Also called for leases that forget() dropped: an unknown one is no error.
        self._live.pop(id(ref), None)

    def forget(self) -> None:
        """The arena was replaced: old leases hold the old mapping, not this one."""
        self._live.clear()

    def window(self, size: int) -> tuple[int, int]:
        """The largest free range [start, limit) of an arena of `size` bytes."""
        if not self._live:
            return 0, size
        best = (0, 0)
        cursor = 0
        # A copy first: a collection during the loop may release a lease.
        for start, end in sorted([(start, end) for _, start, end in list(self._live.values())]):
            if start - cursor > best[1] - best[0]:
                best = (cursor, start)
            cursor = max(cursor, end)
        if size - cursor > best[1] - best[0]:
            best = (cursor, size)
        return best
