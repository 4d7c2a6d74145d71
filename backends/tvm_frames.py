"""Frame lookups for TVMScript's parser that skip inspect's search for each frame's module.

TVMScript calls `inspect.stack()` (and `inspect.getouterframes`) for every function it
parses, to read the caller's locals and source position. For a frame whose file is not
a module's (an import's "<frozen importlib._bootstrap>", TVMScript's own "<ast>"),
inspect scans all of `sys.modules` to look for one, on every call. MetaSchedule parses a
few hundred tensor intrinsics when it first tunes, in the tuning process and again in
each worker that builds candidates: that scan took 120 of a two-trial tuning run's 150 s
on two cores. These give what inspect gives for one line of context (the frame, its
file as the code names it, line, function, code line and position) from the frame
itself; other context sizes go to inspect's own functions.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import itertools
import linecache
import sys
import threading
from collections.abc import Iterator
from types import FrameType

# inspect's own, kept before anything patches them.
_STACK, _OUTER_FRAMES = inspect.stack, inspect.getouterframes
_lock = threading.Lock()
_users = 0  # blocks inside quick_frame_lookups(), over all threads


def _frame_info(frame: FrameType) -> inspect.FrameInfo:
    code = frame.f_code
    # The instruction's position, as inspect reads it (no module search there).
    if frame.f_lasti < 0:
        position: tuple = (None, None, None, None)
    else:
        position = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
    lineno = position[0] if position[0] is not None else frame.f_lineno
    line = linecache.getline(code.co_filename, lineno, frame.f_globals)
    return inspect.FrameInfo(
        frame, code.co_filename, lineno, code.co_name, [line] if line else None,
        0 if line else None, positions=dis.Positions(lineno, *position[1:]),
    )  # fmt: skip


def outer_frames(frame: FrameType | None, context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.getouterframes`, without the module search for one line of context."""
    if context != 1:
        return _OUTER_FRAMES(frame, context)
    infos = []
    while frame is not None:
        infos.append(_frame_info(frame))
        frame = frame.f_back
    return infos


def stack(context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.stack`, without the module search for one line of context."""
    return outer_frames(sys._getframe(1), context)


def install() -> None:
    """For good, in a process that only tunes (MetaSchedule's build and run workers)."""
    inspect.stack, inspect.getouterframes = stack, outer_frames


@contextlib.contextmanager
def quick_frame_lookups() -> Iterator[None]:
    """inspect.stack and inspect.getouterframes as above while any thread is inside such
    a block (two models may tune at once, each on a thread of its own)."""
    global _users
    with _lock:
        _users += 1
        if _users == 1:
            install()
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                inspect.stack, inspect.getouterframes = _STACK, _OUTER_FRAMES
