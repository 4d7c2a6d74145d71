"""`jax_export`: a serialized `jax.export` artifact (`model.jax`, StableHLO plus its pytrees).

The artifact runs without the model's Python code: it is deserialized, wrapped in
`jax.jit` and compiled for each batch bucket (`batch_buckets`, default powers of two up
to max_batch_size) before the model is ready; batches are padded up to a bucket.
Tensor names come from the artifact's pytrees: the keys of a dict argument or result,
else `INPUT__<i>` / `OUTPUT__<i>` by position.

JAX grabs most of a GPU's memory when it starts; the gateway turns that preallocation
off (XLA_PYTHON_CLIENT_PREALLOCATE=false, unless the environment already sets it) so
JAX models allocate what they use and share the GPU.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import export as jax_export  # noqa: E402

from accel_base.proto import model_config_pb2 as mc  # noqa: E402
from backends.base import BackendUnavailable, Device, TensorSpec, first_line  # noqa: E402
from backends.buckets import (
    BucketedBackend,  # noqa: E402
    batch_buckets,
    check_batch_dimension,
    dynamic_beyond_batch,
    zero_feed,
)

log = logging.getLogger(__name__)

# Served models may take 64-bit tensors; without this JAX would silently narrow them.
jax.config.update("jax_enable_x64", True)

_NUMPY_TO_V2 = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
    np.dtype(ml_dtypes.bfloat16): "BF16",
}


def _leaf_names(tree, count: int, prefix: str, model: str) -> list[str]:
    """A name per leaf of `tree`: the dict keys on its path joined by dots (`a.x`), or
    PREFIX__<position> for a leaf reached through no dict at all."""
    indexed = jax.tree_util.tree_unflatten(tree, list(range(count)))
    names = [""] * count
    for path, index in jax.tree_util.tree_flatten_with_path(indexed)[0]:
        keys = [str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey)]
        names[index] = ".".join(keys) if keys else f"{prefix}__{index}"
    if len(set(names)) != len(names):
        raise BackendUnavailable(
            f"model '{model}': the artifact's tensors do not have distinct names ({names}); "
            "export a function that takes and returns one flat dict of named arrays"
        )
    return names


def _spec(name: str, aval, model: str) -> TensorSpec:
    datatype = _NUMPY_TO_V2.get(np.dtype(aval.dtype))
    if datatype is None:
        raise BackendUnavailable(
            f"model '{model}': tensor '{name}' has dtype {aval.dtype}, which has no V2 datatype"
        )
    return TensorSpec(name, datatype, tuple(d if isinstance(d, int) else -1 for d in aval.shape))


class JaxExportBackend(BucketedBackend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        try:
            self._exported = jax_export.deserialize(bytearray(artifact.read_bytes()))
        except Exception as exc:  # flatbuffer and version errors come in many types
            reason = first_line(exc)
            raise BackendUnavailable(
                f"model '{config.name}': cannot read {artifact.name} as a serialized "
                f"jax.export artifact: {reason}"
            ) from None
        self._device = self._jax_device(device)
        exported = self._exported
        input_names = _leaf_names(exported.in_tree, len(exported.in_avals), "INPUT", config.name)
        output_names = _leaf_names(
            exported.out_tree, len(exported.out_avals), "OUTPUT", config.name
        )
        self._inputs = [
            _spec(n, aval, config.name)
            for n, aval in zip(input_names, exported.in_avals, strict=True)
        ]
        self._outputs = [
            _spec(n, aval, config.name)
            for n, aval in zip(output_names, exported.out_avals, strict=True)
        ]
        self._output_position = {name: i for i, name in enumerate(output_names)}
        if config.max_batch_size > 0:
            check_batch_dimension(
                self._inputs, config.name, "symbolic", "export with jax.export.symbolic_shape"
            )
        self._call = jax.jit(exported.call)
        self._buckets = batch_buckets(config)
        started = time.perf_counter()
        for rows in self._buckets or (None,):
            self._warm_up(rows)
        log.info(
            "model '%s' (jax.export) on %s, compiled for batch sizes %s in %.1f s",
            config.name,
            self._device,
            list(self._buckets) or "[unbatched]",
            time.perf_counter() - started,
        )

    def _jax_device(self, device: Device):
        platform = "cpu" if device.kind == "cpu" else "cuda"
        if platform not in self._exported.platforms:
            raise BackendUnavailable(
                f"model '{self.config.name}' was exported for {', '.join(self._exported.platforms)}"
                f", not {platform}; export with platforms=[..., '{platform}'] or change the "
                "instance_group kind"
            )
        try:
            devices = jax.devices("cpu" if device.kind == "cpu" else "gpu")
        except RuntimeError:
            devices = []
        if device.index >= len(devices):
            raise BackendUnavailable(
                f"model '{self.config.name}' asks for {device} but JAX sees {len(devices)} such "
                "device(s); use KIND_CPU or install jax with CUDA support"
            )
        return devices[device.index]

    def _warm_up(self, rows: int | None) -> None:
        self._execute(zero_feed(self._inputs, rows))

    @classmethod
    def gpu_capable(cls) -> bool:
        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:
            return False

    def inline_capable(self) -> bool:  # type: ignore[override]
        # Buckets are compiled at load; a dynamic dimension besides the batch may meet a
        # new shape and compile, which must not happen on the event loop.
        return not dynamic_beyond_batch(self._inputs)

    def _run_bucket(
        self, feed: dict[str, np.ndarray], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        leaves = self._execute(feed)
        outputs = {}
        for name in output_names:
            array = np.asarray(leaves[self._output_position[name]])
            outputs[name] = array.view(np.uint16) if array.dtype == ml_dtypes.bfloat16 else array
        return outputs

    def _execute(self, inputs: dict[str, np.ndarray]) -> list:
        leaves = []
        for spec in self._inputs:
            array = inputs[spec.name]
            if spec.datatype == "BF16":  # BF16 travels as uint16 bit patterns
                array = array.view(ml_dtypes.bfloat16)
            leaves.append(jax.device_put(array, self._device))
        args, kwargs = jax.tree_util.tree_unflatten(self._exported.in_tree, leaves)
        return jax.tree_util.tree_leaves(self._call(*args, **kwargs))

    def memory_bytes(self) -> int:
        # The weights are constants inside the serialized module: its size bounds them.
        return self.artifact.stat().st_size

    def unload(self) -> None:
        del self._call, self._exported
