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

Large tensors' buffers stay in the heap between requests (`keep_freed_buffers`). A 4 MiB
request makes several buffers of its size (the body, the output, the response), and
glibc by default gives such blocks back to the kernel as soon as they are freed: every
request then faulted its memory in again, page by page. With identity at 4 MiB, c=4, on
one core, that was about half the server's CPU a request over gRPC (36.6 requests/s,
then 66 with the heap kept here, 72-77 with glibc's environment variables) and a tenth
to a sixth over HTTP (85, then 92; 100-103). The price is up to HEAP_TRIM_THRESHOLD of freed
memory held between requests; `settle()` gives it all back after a load or an unload,
so that a thread instance's measured footprint (its load's growth) starts clean.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc

_TRIM_PAST = 16 << 20  # bytes let go since the last trim
_let_go = 0
_trim_on: asyncio.AbstractEventLoop | None = None  # the loop a trim waits on
try:
    _libc = ctypes.CDLL(None)
    _malloc_trim = _libc.malloc_trim  # glibc's; other C libraries: nothing
    _mallopt = _libc.mallopt
except (AttributeError, OSError):
    _malloc_trim = _mallopt = None
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
# Blocks up to this size come from the heap, not from their own mapping (the largest
# request body is 64 MiB by default; glibc's own adaptive limit stops at 32 MiB).
HEAP_MMAP_THRESHOLD = 64 << 20
HEAP_TRIM_THRESHOLD = 256 << 20  # freed memory kept at the heap's top before it shrinks


def keep_freed_buffers() -> None:
    """Keep large freed blocks in the heap for the next request (see the module)."""
    if _mallopt is not None:
        _mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)
        _mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD)


def settle() -> None:
    """Collect everything (the unfrozen heap too: an unloaded model's cycles go now),
    then take the survivors out of later collections."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    if _malloc_trim is not None:  # what the heap kept for requests goes back now
        _malloc_trim(0)


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
