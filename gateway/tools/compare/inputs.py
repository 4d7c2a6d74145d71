"""The inputs a comparison sends: a data file (.npz, or a V2 JSON request body) or
tensors generated from the model's metadata with a seed; labels where given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from accel_base.datatypes import NUMPY_DTYPES

LABELS_KEY = "labels"  # the .npz array (or V2 JSON input) that holds labels
DYNAMIC_DIM = 8  # what a -1 in a tensor's shape becomes in generated data


class DataError(ValueError):
    """The data does not fit the model; the message says which tensor and why."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # one row's shape (without the batch dimension)


@dataclass(frozen=True)
class Signature:
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    batching: bool  # the model takes a batch dimension

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> Signature:
        """From V2 model metadata (HTTP's JSON, or gRPC's as a dict)."""
        tensors = metadata["inputs"]
        batching = bool(tensors) and all(list(t["shape"])[:1] == [-1] for t in tensors)
        specs = tuple(
            InputSpec(
                t["name"], t["datatype"], tuple(int(d) for d in t["shape"][1 if batching else 0 :])
            )
            for t in tensors
        )
        return cls(specs, tuple(t["name"] for t in metadata["outputs"]), batching)

    def describe(self) -> str:
        tensors = ", ".join(f"{s.name} {s.datatype} {list(s.shape)}" for s in self.inputs)
        batch = "batched" if self.batching else "unbatched"
        return f"inputs {tensors}; outputs {', '.join(self.outputs)}; {batch}"


@dataclass
class Dataset:
    """`count` samples: each input an array of [count, *row shape]."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str

    @property
    def count(self) -> int:
        return len(next(iter(self.inputs.values())))

    def batches(self, batch_size: int, batching: bool) -> list[dict[str, np.ndarray]]:
        """Whole batches of `batch_size` rows (the rest left out, so every request is
        the same size); without batching each sample alone, without the batch axis."""
        if not batching:
            return [{k: v[i] for k, v in self.inputs.items()} for i in range(self.count)]
        full = self.count // batch_size * batch_size
        return [
            {k: v[start : start + batch_size] for k, v in self.inputs.items()}
            for start in range(0, full, batch_size)
        ]


def _check(name: str, array: np.ndarray, spec: InputSpec) -> np.ndarray:
    dtype = NUMPY_DTYPES[spec.datatype]
    if spec.datatype == "BYTES":
        array = np.array([s if isinstance(s, bytes) else str(s).encode() for s in array.ravel()],
                         dtype=object).reshape(array.shape)  # fmt: skip
    elif array.dtype != dtype:
        if not np.can_cast(array.dtype, dtype, casting="same_kind"):
            raise DataError(
                f"input '{name}': data is {array.dtype}, the model takes {spec.datatype}"
            )
        array = array.astype(dtype)
    row = array.shape[1:]
    if len(row) != len(spec.shape) or any(
        d not in (-1, r) for d, r in zip(spec.shape, row, strict=True)
    ):
        raise DataError(
            f"input '{name}': a sample is shaped {list(row)}, the model takes {list(spec.shape)} "
            "(the data's first axis counts samples)"
        )
    return array


def _dataset(arrays: dict[str, np.ndarray], signature: Signature, source: str) -> Dataset:
    missing = [s.name for s in signature.inputs if s.name not in arrays]
    if missing:
        raise DataError(f"{source} has no data for input(s) {', '.join(missing)}")
    inputs = {s.name: _check(s.name, np.asarray(arrays[s.name]), s) for s in signature.inputs}
    labels = arrays.get(LABELS_KEY)
    counts = {len(v) for v in inputs.values()} | ({len(labels)} if labels is not None else set())
    if len(counts) != 1 or 0 in counts:
        raise DataError(f"{source}: every input (and '{LABELS_KEY}') needs the same number of "
                        f"samples, at least one; found {sorted(counts)}")  # fmt: skip
    return Dataset(inputs, None if labels is None else np.asarray(labels).ravel(), source)


def load(path: Path, signature: Signature) -> Dataset:
    """A .npz (an array per input name, first axis the samples, `labels` optional) or a
    .json V2 request body (`inputs` with name, shape, datatype, data; first axis the
    samples)."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return _dataset({k: data[k] for k in data.files}, signature, path.name)
    if path.suffix == ".json":
        try:
            body = orjson.loads(path.read_bytes())
            arrays = {
                t["name"]: np.asarray(t["data"], dtype=NUMPY_DTYPES[t["datatype"]]).reshape(
                    t["shape"]
                )
                for t in body["inputs"]
            }
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"{path.name} is not a V2 request body with tensor data: {exc}"
            ) from None
        return _dataset(arrays, signature, path.name)
    raise DataError(f"{path.name}: data files are .npz or .json (a V2 request body)")


def generate(signature: Signature, count: int, seed: int) -> Dataset:
    """`count` samples of random data shaped as the model takes it."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in signature.inputs:
        shape = (count, *(DYNAMIC_DIM if d < 0 else d for d in spec.shape))
        dtype = NUMPY_DTYPES[spec.datatype]
        if spec.datatype == "BYTES":
            words = rng.integers(0, 1000, size=shape)
            arrays[spec.name] = np.vectorize(lambda w: f"w{w}".encode(), otypes=[object])(words)
        elif spec.datatype == "BOOL":
            arrays[spec.name] = rng.random(shape) < 0.5
        elif dtype.kind == "f" and spec.datatype != "BF16":
            arrays[spec.name] = rng.standard_normal(shape).astype(dtype)
        else:
            arrays[spec.name] = rng.integers(0, 10, size=shape).astype(dtype)
    return Dataset(arrays, None, f"generated (seed {seed})")
