"""Batch-size buckets for backends compiled for fixed shapes.

A compiled backend runs only the batch sizes it was compiled for; a batch of another
size is padded with zero rows up to the next bucket and the extra rows are cut off
the outputs. The dynamic batcher pads for us when it is on (it reads
`Backend.allowed_batch_sizes`); backends pad direct calls with
`gateway.scheduling.batch.pad`, the batcher's own helper.
"""

from __future__ import annotations

from backends.base import BackendUnavailable
from backends.parameters import string_parameter
from gateway.proto import model_config_pb2 as mc


def default_buckets(max_batch_size: int) -> tuple[int, ...]:
    """Powers of two up to max_batch_size, and max_batch_size itself."""
    sizes = []
    size = 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return (*sizes, max_batch_size)


def batch_buckets(config: mc.ModelConfig, key: str = "batch_buckets") -> tuple[int, ...]:
    """The config's comma-separated bucket list, or the default for its max_batch_size."""
    if config.max_batch_size <= 0:
        return ()  # an unbatched model runs its one declared shape
    text = string_parameter(config, key)
    if not text:
        return default_buckets(config.max_batch_size)
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise BackendUnavailable(
            f"model '{config.name}': parameter {key} must be comma-separated integers, got '{text}'"
        ) from None
    if not sizes or sizes[0] < 1 or sizes[-1] != config.max_batch_size:
        raise BackendUnavailable(
            f"model '{config.name}': parameter {key} '{text}' must list sizes >= 1 ending at "
            f"max_batch_size {config.max_batch_size}, so that every batch has a bucket"
        )
    return tuple(sizes)
