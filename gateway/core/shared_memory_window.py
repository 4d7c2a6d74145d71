"""The bytes of one registered window of a client's shared-memory object: copied in and
out through a mapping, guarded against the client shrinking its object.

A mapping is how the bytes cross at memory speed (on the machines measured, a 4 MiB
memcpy through a mapping took a fifth to a twentieth of a pread of the same bytes). But
touching a mapped page past the end of its file raises SIGBUS, which would kill the
server, and a client may truncate its object at any time. So the mapping is only ever
touched by accel_base/_guarded_copy.c, whose memcpy returns False on SIGBUS: the request
then gets a 400, and the server goes on. Where that extension was not built (no C
compiler at install), or the object cannot be mapped, the window is read and written
with pread/pwrite on the object's descriptor instead, which cannot fault.
"""

from __future__ import annotations

import mmap
import os

try:
    from accel_base._guarded_copy import copy as guarded_copy
except ImportError:  # built where a C compiler was found at install (setup.py)
    guarded_copy = None


class Window:
    """[offset, offset + size) of the object open as `fd`, which it owns (a mapping keeps
    a descriptor of its own: the given one is closed then, so a region holds one).
    `read_into` and `write_from` take byte offsets within the window, checked by the
    caller."""

    def __init__(self, fd: int, offset: int, size: int) -> None:
        self._fd, self._offset = fd, offset
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        if guarded_copy is None:
            return
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            self._map = mmap.mmap(fd, offset - start + size, offset=start)
        except (OSError, ValueError):  # e.g. out of address space: the descriptor will do
            return
        self._view = memoryview(self._map)[offset - start :]
        os.close(fd)
        self._fd = -1

    def _through_map(self, buffer: memoryview, at: int, inward: bool) -> bool:
        """The guarded copy between `buffer` and the window at `at` (into the window if
        `inward`); False on SIGBUS, or where the object no longer reaches the copy's end:
        a page cut short by a truncation reads zeros past the file's end and takes writes
        that vanish, where only whole pages gone fault."""
        assert self._view is not None
        with self._view[at : at + len(buffer)] as window:
            copied = guarded_copy(window, buffer) if inward else guarded_copy(buffer, window)
        return copied and self.file_size() >= self._offset + at + len(buffer)

    def file_size(self) -> int:
        """The object's size now (a mapping's size() is its file's, through its own
        descriptor)."""
        return self._map.size() if self._map is not None else os.fstat(self._fd).st_size

    @property
    def mapped(self) -> bool:
        return self._view is not None

    def read_into(self, buffer: memoryview, at: int) -> bool:
        """Fill `buffer` (bytes) from `at`; False if the object ends before its end."""
        if self._view is not None:
            return self._through_map(buffer, at, inward=False)
        done = 0
        while done < len(buffer):
            got = os.preadv(self._fd, [buffer[done:]], self._offset + at + done)
            if got == 0:
                return False
            done += got
        return True

    def write_from(self, buffer: memoryview, at: int) -> bool:
        """Write `buffer` (bytes) at `at`; False if the object no longer reaches its end
        (only a mapping notices: pwrite grows the object again). OSError: /dev/shm full."""
        if self._view is not None:
            return self._through_map(buffer, at, inward=True)
        done = 0
        while done < len(buffer):
            done += os.pwritev(self._fd, [buffer[done:]], self._offset + at + done)
        return True

    def close(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._map is not None:
            self._map.close()  # (and its descriptor)
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
