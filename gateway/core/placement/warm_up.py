"""The batch a freshly loaded model runs once before it serves: the largest it will see.

Frameworks allocate much of their memory on the first run (ONNX Runtime's arenas, a
compiled graph's buffers), and the largest batch allocates the most, so the footprint
measured after this run is the one placement must count on.
"""

from __future__ import annotations

import numpy as np

from accel_base.batch import BatchShapeError, padded_size
from accel_base.datatypes import NUMPY_DTYPES, v2_datatype
from accel_base.proto import model_config_pb2 as mc
from gateway.core.scheduling.sequence.controls import sequence_of_one


def warm_up_inputs(
    config: mc.ModelConfig, allowed_batch_sizes: tuple[int, ...] | None = None
) -> dict[str, np.ndarray]:
    """Zeros (empty strings for BYTES) for every input the config declares, at the
    largest batch (max_batch_size, padded to a size a compiled backend allows); a
    dimension of any size (-1) is 1. A sequence model's control and state inputs as for
    sequences of one request."""
    rows: list[int] = []
    if config.max_batch_size > 0:  # as the batcher pads its largest batch
        try:
            rows = [padded_size(config.max_batch_size, allowed_batch_sizes)]
        except BatchShapeError:  # buckets that stop short: the largest of them
            rows = [max(allowed_batch_sizes or [config.max_batch_size])]
    feed = {}
    for tensor in config.input:
        shape = tuple(rows + [d if d >= 0 else 1 for d in tensor.dims])
        datatype = v2_datatype(tensor.data_type)
        if datatype == "BYTES":
            feed[tensor.name] = np.full(shape, b"", dtype=object)
        else:
            feed[tensor.name] = np.zeros(shape, dtype=NUMPY_DTYPES[datatype])
    return feed | sequence_of_one(config, rows[0] if rows else 1, bool(rows))
