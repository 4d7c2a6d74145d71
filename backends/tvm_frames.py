"""Frame lookups for TVMScript's parser that skip inspect's search for each frame's module.

TVMScript calls `inspect.stack()` (and `inspect.getouterframes`) for every function it
parses, to read the caller's locals and source line. For a frame whose file is not a
module's (an import's "<frozen importlib._bootstrap>", TVMScript's own "<ast>"), inspect
scans all of `sys.modules` to look for one, on every call. MetaSchedule parses a few
hundred tensor intrinsics when it first tunes, in the tuning process and again in each
worker that builds candidates: that scan took 120 of a two-trial tuning run's 150 s on
two cores. The parser reads only each frame's file, line, function, code line and
locals, which these give from the frame itself.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import sys
import threading
from collections.abc import Iterator
from types import FrameType

_patched = threading.Lock()  # one patcher at a time: inspect is process-wide


def _frame_info(frame: FrameType, context: int) -> inspect.FrameInfo:
    filename = frame.f_code.co_filename
    lineno = frame.f_lineno
    line = linecache.getline(filename, lineno, frame.f_globals) if context > 0 else ""
    return inspect.FrameInfo(
        frame, filename, lineno, frame.f_code.co_name, [line] if line else None,
        0 if line else None,
    )  # fmt: skip


def outer_frames(frame: FrameType | None, context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.getouterframes`, without the module search."""
    infos = []
    while frame is not None:
        infos.append(_frame_info(frame, context))
        frame = frame.f_back
    return infos


def stack(context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.stack`, without the module search."""
    return outer_frames(sys._getframe(1), context)


def install() -> None:
    """For good, in a process that only tunes (MetaSchedule's build and run workers)."""
    inspect.stack, inspect.getouterframes = stack, outer_frames


@contextlib.contextmanager
def quick_frame_lookups() -> Iterator[None]:
    """inspect.stack and inspect.getouterframes as above, inside the block."""
    with _patched:
        saved = inspect.stack, inspect.getouterframes
        inspect.stack, inspect.getouterframes = stack, outer_frames
        try:
            yield
        finally:
            inspect.stack, inspect.getouterframes = saved
