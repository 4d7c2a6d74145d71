"""The quick frame lookups give TVMScript what inspect's would, and only inside the block."""

from __future__ import annotations

import inspect

from backends.tvm_frames import outer_frames, quick_frame_lookups, stack


def _fields(infos):
    return [(i.filename, i.lineno, i.function, i.code_context, i.frame) for i in infos]


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
    assert outer_frames(frame, context=0)[0].code_context is None


def test_inspect_is_patched_only_inside_the_block():
    original = inspect.stack, inspect.getouterframes
    with quick_frame_lookups():
        assert (inspect.stack, inspect.getouterframes) == (stack, outer_frames)
        assert inspect.stack()[0].function == "test_inspect_is_patched_only_inside_the_block"
    assert (inspect.stack, inspect.getouterframes) == original
