"""A shared-memory arena: one memfd mapping that one process writes and the other reads.

memfd_create gives anonymous shared memory: no /dev/shm name to leak, freed by the
kernel once the last descriptor and mapping are gone, and passed to the other process
as a file descriptor over the instance's socket.
"""

from __future__ import annotations

import contextlib
import mmap
import os

ALIGNMENT = 64  # every tensor starts on a cache line (and on any dtype's alignment)
MIN_ARENA_BYTES = 1 << 20


def aligned(offset: int) -> int:
    return (offset + ALIGNMENT - 1) & ~(ALIGNMENT - 1)


def grown_size(needed: int, current: int = 0) -> int:
    """A new arena size for `needed` bytes: at least double the old, in whole MiB."""
    size = max(needed + needed // 2, 2 * current, MIN_ARENA_BYTES)
    return (size + MIN_ARENA_BYTES - 1) // MIN_ARENA_BYTES * MIN_ARENA_BYTES


class Arena:
    def __init__(self, size: int, fd: int | None = None, name: str = "accel-gateway") -> None:
        """A new arena of `size` bytes, or (with `fd`) a mapping of the other side's."""
        if fd is None:
            fd = os.memfd_create(name, os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
            except OSError:
                os.close(fd)
                raise
        self.fd = fd
        self.size = size
        self.buffer = mmap.mmap(fd, size)

    def close(self) -> None:
        """Drop this side's descriptor and mapping. Arrays that still view the mapping keep
        it alive (mmap refuses to close while exported); it goes when they do."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(BufferError):
            self.buffer.close()
