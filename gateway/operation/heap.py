"""The garbage collector and the long-lived heap.

The modules, frameworks and models a gateway loads are some hundred thousand objects
that live as long as they stay loaded. Python's full (oldest-generation) collection walks
every one of them, though none is garbage: 50-80 ms measured on the event loop of a
single-core gateway under load, a stall that every request in flight waits out (and
overload refusals with them). After each load or unload, `settle()` collects once and
freezes what is left (gc.freeze): later collections walk only the objects made since.

Memory a client made us hold and then left (a connection's unfinished messages, cut or
closed) goes back to the system with `released`: glibc keeps freed reads of a few
hundred KiB in its heap, and 64 MiB of them stayed resident after the connection closed.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc

_TRIM_PAST = 16 << 20  # bytes let go since the last trim
_let_go = 0
_trim_on: asyncio.AbstractEventLoop | None = None  # the loop a trim waits on
try:
    _malloc_trim = ctypes.CDLL(None).malloc_trim  # glibc's; other C libraries: nothing
except (AttributeError, OSError):
    _malloc_trim = None


def settle() -> None:
    """Collect everything (the unfrozen heap too: an unloaded model's cycles go now),
    then take the survivors out of later collections."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def released(size: int) -> None:
    """`size` bytes a client made us hold were freed: past 16 MiB since the last time,
    the C heap's free pages go back to the system, once, in a turn of the event loop of
    its own (about a millisecond; never on the path of requests that finish)."""
    global _let_go, _trim_on
    _let_go += size
    if _let_go < _TRIM_PAST or _malloc_trim is None:
        return
    if _trim_on is not None and _trim_on.is_running():
        return  # one is coming (a loop stopped before it came runs none)
    try:
        _trim_on = asyncio.get_running_loop()
    except RuntimeError:
        _trim()
        return
    _trim_on.call_soon(_trim)  # after the rest of what is being let go now


def _trim() -> None:
    global _let_go, _trim_on
    _let_go, _trim_on = 0, None
    _malloc_trim(0)
