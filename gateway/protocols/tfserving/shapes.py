"""TF Serving's leniency with shapes: it feeds a request's tensor to the session as it
comes, so a `[1]` tensor runs on a signature input declared `[-1, 1]`, and its own tests
and clients rely on that. The gateway checks shapes before anything runs, so the TF
Serving fronts fit such a tensor to the declared shape first, and answer each output
shaped as the fitted input in the request's shape, as TensorFlow's element-wise graph
would have kept it. Only size-1 dimensions at the end are added or dropped (a `[64]`
row is not made a batch of one: TF Serving refuses that too). Nothing that fits already
changes, and what cannot be fitted is refused by the core with the input's name and
both shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Shape = tuple[int, ...]


def _fits(shape: Shape, declared: Sequence[int]) -> bool:
    if len(shape) != len(declared):
        return False
    return all(d in (-1, s) for d, s in zip(declared, shape, strict=True))


def fitted(shape: Shape, declared: Sequence[int]) -> Shape | None:
    """The shape to run a tensor of `shape` as, for an input declared `declared` (-1:
    any size): `shape` itself when it fits; else with size-1 dimensions added at its end
    or dropped from it; for a declared `[-1]` (a signature of unknown rank is served as
    one), the values flattened. None: nothing fits."""
    if _fits(shape, declared):
        return shape
    rank = len(declared)
    if rank > len(shape):
        candidate = shape + (1,) * (rank - len(shape))
    elif list(declared) == [-1]:
        candidate = (math.prod(shape),)
    elif shape[rank:] == (1,) * (len(shape) - rank):
        candidate = shape[:rank]
    else:
        return None
    return candidate if _fits(candidate, declared) else None
