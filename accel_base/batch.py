"""Merge requests into one batch, pad it to a size the backend accepts, split the outputs.

Pure functions on numpy arrays: no asyncio, no clock. Shapes are checked before
anything is concatenated, so a mismatch is an error and never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


class BatchShapeError(ValueError):
    """Inputs or outputs whose shapes do not fit the batch they belong to."""


# Given (name, shape, dtype) of every input of a batch, arrays to write the batch into
# (a worker process's shared-memory arena, say).
Allocator = Callable[[list[tuple[str, tuple[int, ...], np.dtype]]], dict[str, np.ndarray]]


def merge_key(feed: dict[str, np.ndarray]) -> tuple:
    """Requests with equal keys can share a batch: same inputs, dtypes and trailing dims."""
    # Computed for every request a batcher queues: a list sorted only when there is more
    # than one input (names are unique, so only they are compared), and the dtypes as they are.
    key = [(name, array.dtype, array.shape[1:]) for name, array in feed.items()]
    if len(key) > 1:
        key.sort()
    return tuple(key)


def _check_keys(feeds: Sequence[dict[str, np.ndarray]]) -> None:
    key = merge_key(feeds[0])
    for position, feed in enumerate(feeds[1:], start=1):
        if merge_key(feed) != key:
            raise BatchShapeError(
                f"request {position} of the batch has inputs {merge_key(feed)}, the first has {key}"
            )


def merge(feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate each input along the batch dimension (no copy for a single request)."""
    first = feeds[0]
    if len(feeds) == 1:
        return first
    _check_keys(feeds)
    return {name: np.concatenate([feed[name] for feed in feeds]) for name in first}


def merge_padded(
    feeds: Sequence[dict[str, np.ndarray]], rows: int, target: int, allocate: Allocator | None
) -> dict[str, np.ndarray]:
    """merge() then pad() to `target` rows; with `allocate`, straight into its arrays, so
    that each input row is copied once."""
    if allocate is None:
        return pad(merge(feeds), rows, target)
    _check_keys(feeds)
    first = feeds[0]
    specs = [(name, (target, *array.shape[1:]), array.dtype) for name, array in first.items()]
    merged = allocate(specs)
    for name, out in merged.items():
        start = 0
        for feed in feeds:
            count = feed[name].shape[0]
            out[start : start + count] = feed[name]
            start += count
        if start < target:
            out[start:] = b"" if out.dtype == np.object_ else 0
    return merged


def padded_size(rows: int, allowed: Sequence[int] | None) -> int:
    """The smallest allowed batch size that holds `rows` (rows itself when any size goes)."""
    if not allowed:
        return rows
    for size in sorted(allowed):
        if size >= rows:
            return size
    raise BatchShapeError(f"batch of {rows} rows is larger than every allowed size {list(allowed)}")


def pad(feed: dict[str, np.ndarray], rows: int, target: int) -> dict[str, np.ndarray]:
    """Append `target - rows` filler rows (zeros, or empty bytes) to every input."""
    if target == rows:
        return feed
    padded = {}
    for name, array in feed.items():
        filler = np.zeros((target - rows, *array.shape[1:]), dtype=array.dtype)
        if array.dtype == np.object_:
            filler.fill(b"")
        padded[name] = np.concatenate([array, filler])
    return padded


def split(
    outputs: dict[str, np.ndarray], row_counts: Sequence[int], padded_rows: int
) -> list[dict[str, np.ndarray]]:
    """Give each request its own rows of every output; padding rows are dropped."""
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != padded_rows:
            raise BatchShapeError(
                f"output '{name}' has shape {list(array.shape)}, but the batch had "
                f"{padded_rows} rows; the backend must return one output row per input row"
            )
    parts = []
    start = 0
    for count in row_counts:
        parts.append({name: array[start : start + count] for name, array in outputs.items()})
        start += count
    return parts
