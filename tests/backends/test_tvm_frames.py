"""The quick frame lookups give TVMScript what inspect's would, and only inside the block."""

from __future__ import annotations

import inspect
import threading

from backends.tvm_frames import outer_frames, quick_frame_lookups, stack


def _fields(infos):
    # The first frame's two calls sit on one line at two columns: positions from its caller on.
    return [
        (i.filename, i.lineno, i.function, i.code_context, i.index, i.frame)
        + ((i.positions,) if n else ())
        for n, i in enumerate(infos)
    ]


def caller_of_stack():
    return inspect.stack(), stack()  # one line: both see the same line number


def _real_files(infos):
    # Frames of no file ("<frozen ...>", "<string>"): where inspect's search finds a
    # module, it may name another file or line for them.
    return _fields([i for i in infos if not i.filename.startswith("<")])


def test_the_same_frames_lines_and_code_as_inspect():
    slow, quick = caller_of_stack()
    assert _real_files(slow) == _real_files(quick)
    assert quick[0].function == "caller_of_stack" and "inspect.stack()" in quick[0].code_context[0]
    frame = inspect.currentframe()
    slow, quick = inspect.getouterframes(frame), outer_frames(frame)  # one line, as above
    assert _real_files(slow) == _real_files(quick) and len(slow) == len(quick)
    # Other context sizes are inspect's own answers.
    slow, quick = inspect.getouterframes(frame, 3), outer_frames(frame, 3)  # one line
    assert _real_files(slow) == _real_files(quick) and len(quick[0].code_context) == 3


def test_inspect_is_patched_only_inside_the_block():
    original = inspect.stack, inspect.getouterframes
    with quick_frame_lookups():
        assert (inspect.stack, inspect.getouterframes) == (stack, outer_frames)
        assert inspect.stack()[0].function == "test_inspect_is_patched_only_inside_the_block"
    assert (inspect.stack, inspect.getouterframes) == original


def test_blocks_on_two_threads_overlap_and_the_last_one_out_restores_inspect():
    original = inspect.stack
    inside, leave = threading.Event(), threading.Event()

    def tune():
        with quick_frame_lookups():
            inside.set()
            leave.wait(10)

    other = threading.Thread(target=tune)
    other.start()
    assert inside.wait(10)
    with quick_frame_lookups():  # not held up by the other thread's block
        assert inspect.stack is stack
    assert inspect.stack is stack  # the other thread is still inside its block
    leave.set()
    other.join(10)
    assert inspect.stack is original
