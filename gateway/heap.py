"""The garbage collector and the long-lived heap.

The modules, frameworks and models a gateway loads are some hundred thousand objects
that live as long as they stay loaded. Python's full (oldest-generation) collection walks
every one of them, though none is garbage: 50-80 ms measured on the event loop of a
single-core gateway under load, a stall that every request in flight waits out (and
overload refusals with them). After each load or unload, `settle()` collects once and
freezes what is left (gc.freeze): later collections walk only the objects made since.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect everything (the unfrozen heap too: an unloaded model's cycles go now),
    then take the survivors out of later collections."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
