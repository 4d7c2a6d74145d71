"""Batch-size buckets for backends compiled for fixed shapes.

A compiled backend runs only the batch sizes it was compiled for; a batch of another
size is padded with zero rows up to the next bucket and the extra rows are cut off
the outputs. The dynamic batcher pads for us when it is on (it reads
`Backend.allowed_batch_sizes`); `run_padded` pads direct calls with the batcher's own
`accel_base.batch.pad`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable

import numpy as np

from accel_base.batch import pad, padded_size
from accel_base.datatypes import NUMPY_DTYPES
from accel_base.proto import model_config_pb2 as mc
from backends.base import Backend, BackendUnavailable, TensorSpec
from backends.parameters import string_parameter

Feed = dict[str, np.ndarray]


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


def run_padded(inputs: Feed, buckets: tuple[int, ...], run: Callable[[Feed], Feed]) -> Feed:
    """`run` on `inputs` padded up to their bucket, with the padding rows cut off the
    outputs; `run` on `inputs` as they are when there are no buckets."""
    if not buckets:
        return run(inputs)
    rows = len(next(iter(inputs.values())))
    outputs = run(pad(inputs, rows, padded_size(rows, buckets)))
    return {name: array[:rows] for name, array in outputs.items()}


def zero_feed(specs: list[TensorSpec], rows: int | None) -> Feed:
    """Zeros for every input, `rows` deep (1 for any other -1 dimension): a warm-up batch."""
    feed = {}
    for spec in specs:
        shape = tuple(max(d, 1) for d in spec.shape)
        if rows is not None:
            shape = (rows, *shape[1:])
        feed[spec.name] = np.zeros(shape, NUMPY_DTYPES[spec.datatype])
    return feed


def dynamic_beyond_batch(specs: list[TensorSpec]) -> bool:
    """Whether a dimension other than the batch is -1, so a request may bring a shape
    no bucket was compiled for."""
    return any(-1 in spec.shape[1:] for spec in specs)


def check_batch_dimension(specs: list[TensorSpec], model: str, kind: str, fix: str) -> None:
    """Every input of a model with max_batch_size > 0 must have a -1 first dimension."""
    for spec in specs:
        if not spec.shape or spec.shape[0] != -1:
            raise BackendUnavailable(
                f"model '{model}': input '{spec.name}' has shape {list(spec.shape)}, without "
                f"the {kind} first dimension that max_batch_size > 0 needs; {fix} or set "
                "max_batch_size 0"
            )


class BucketedBackend(Backend):
    """A backend compiled for fixed batch sizes (`_buckets`, empty for an unbatched
    model) that describes its tensors with `_inputs` and `_outputs`: a batch is padded up
    to its bucket, run by `_run_bucket`, and cut back to its own rows."""

    _inputs: list[TensorSpec]
    _outputs: list[TensorSpec]
    _buckets: tuple[int, ...]

    def allowed_batch_sizes(self) -> tuple[int, ...] | None:
        return self._buckets or None

    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    def outputs(self) -> list[TensorSpec]:
        return list(self._outputs)

    def run(self, inputs: Feed, output_names: list[str]) -> Feed:
        return run_padded(inputs, self._buckets, lambda feed: self._run_bucket(feed, output_names))

    @abstractmethod
    def _run_bucket(self, feed: Feed, output_names: list[str]) -> Feed:
        """Run one batch whose size is one of the buckets (any size when there are none)."""
