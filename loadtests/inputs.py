"""Request inputs for the load tests: from a model's metadata or from a data file.

Nothing here imports Locust, gevent or grpc, so it is usable (and tested) on its own.

Shapes come from the model's metadata (HTTP `GET /v2/models/<m>` or gRPC `ModelMetadata`):
a -1 in the first dimension becomes the batch size, a -1 elsewhere becomes `dim_value`.
Values are drawn from a generator with a fixed seed, so every run sends the same data; or
they come from a data file, a `.npz` or a JSON object mapping input name -> (nested list)
array. A key `<model>/<input>` takes precedence over `<input>`, so one file can feed
several models.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accel_base.datatypes import NUMPY_DTYPES, to_raw

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    array: np.ndarray  # BF16 as uint16 bit patterns, BYTES as an object array of bytes

    @property
    def raw(self) -> bytes:
        """The tensor's bytes as the binary extension and `raw_input_contents` carry them."""
        return to_raw(self.array, self.datatype)

    def json_data(self) -> list:
        """The flat `data` list of the JSON form (BYTES as str)."""
        flat = self.array.reshape(-1)
        if self.datatype == "BYTES":
            return [element.decode("utf-8", "replace") for element in flat]
        return flat.tolist()


@dataclass(frozen=True)
class ModelInputs:
    model: str
    inputs: list[InputTensor]
    outputs: list[str]


def parse_models(spec: str) -> list[tuple[str, float]]:
    """`"simple,mlp:3"` -> `[("simple", 1.0), ("mlp", 3.0)]` (weights default to 1)."""
    models: list[tuple[str, float]] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, weight = item.partition(":")
        try:
            value = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"model '{item}': weight '{weight}' is not a number") from None
        if not name or not value > 0:
            raise ValueError(f"model '{item}': expected NAME or NAME:WEIGHT with WEIGHT > 0")
        models.append((name, value))
    if not models:
        raise ValueError("no model given (expected NAME[:WEIGHT][,NAME[:WEIGHT]...])")
    return models


def resolve_shape(shape: list[int], batch_size: int, dim_value: int) -> tuple[int, ...]:
    return tuple(
        dim if dim >= 0 else (batch_size if index == 0 else dim_value)
        for index, dim in enumerate(shape)
    )


def generate(datatype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values valid for any model of the datatype: small non-negative integers,
    floats in [0, 1), short ASCII strings."""
    if datatype not in NUMPY_DTYPES:
        raise ValueError(f"unknown datatype '{datatype}'")
    count = int(np.prod(shape, dtype=np.int64))
    if datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if datatype == "BYTES":
        words = rng.integers(0, 1_000_000, size=count)
        return np.array([f"w{word}".encode() for word in words], dtype=np.object_).reshape(shape)
    if datatype == "BF16":  # the upper half of the float32 bit pattern
        values = rng.random(size=shape, dtype=np.float32)
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    dtype = NUMPY_DTYPES[datatype]
    if dtype.kind == "f":
        return rng.random(size=shape).astype(dtype)
    return rng.integers(0, 16, size=shape).astype(dtype)


def load_data_file(path: Path) -> dict[str, np.ndarray]:
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    if path.suffix == ".json":
        mapping = json.loads(path.read_text())
        if not isinstance(mapping, dict):
            raise ValueError(f"{path}: expected a JSON object mapping input name -> array")
        return {key: np.asarray(value) for key, value in mapping.items()}
    raise ValueError(f"{path}: data file must be .npz or .json")


def _from_data(array: np.ndarray, datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        flat = [e.encode() if isinstance(e, str) else bytes(e) for e in array.reshape(-1)]
        return np.array(flat, dtype=np.object_).reshape(array.shape)
    if datatype == "BF16" and array.dtype.kind == "f":
        return (array.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return array.astype(NUMPY_DTYPES[datatype])


def build_inputs(
    metadata: dict[str, Any],
    *,
    batch_size: int = 1,
    dim_value: int = 16,
    seed: int = 0,
    data: dict[str, np.ndarray] | None = None,
) -> ModelInputs:
    """The inputs of one request to the model whose V2 metadata (JSON form) is given."""
    model = metadata["name"]
    rng = np.random.default_rng(seed)
    tensors: list[InputTensor] = []
    for spec in metadata.get("inputs", []):
        name, datatype = spec["name"], spec["datatype"]
        given = None
        if data is not None:
            given = data.get(f"{model}/{name}", data.get(name))
            if given is None:
                log.warning("data file has no '%s' for model '%s': generating it", name, model)
        if given is not None:
            array = _from_data(np.asarray(given), datatype)
        else:
            shape = resolve_shape(list(spec["shape"]), batch_size, dim_value)
            array = generate(datatype, shape, rng)
        tensors.append(InputTensor(name, datatype, tuple(array.shape), array))
    outputs = [spec["name"] for spec in metadata.get("outputs", [])]
    return ModelInputs(model, tensors, outputs)


def http_binary_body(inputs: ModelInputs) -> tuple[bytes, int]:
    """Body of a binary-extension infer request: the JSON header, then each input's bytes;
    returns the body and the header's length (`Inference-Header-Content-Length`)."""
    raws = [tensor.raw for tensor in inputs.inputs]
    header = {
        "inputs": [
            {
                "name": tensor.name,
                "datatype": tensor.datatype,
                "shape": list(tensor.shape),
                "parameters": {"binary_data_size": len(raw)},
            }
            for tensor, raw in zip(inputs.inputs, raws, strict=True)
        ],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in inputs.outputs],
    }
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    return header_bytes + b"".join(raws), len(header_bytes)


def http_json_body(inputs: ModelInputs) -> tuple[bytes, int | None]:
    """Body of a JSON infer request. BF16 has no JSON form: such inputs still go binary
    (the extension allows mixing), and then the header length is returned too."""
    entries, raws = [], []
    for tensor in inputs.inputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if tensor.datatype == "BF16":
            raw = tensor.raw
            raws.append(raw)
            entry["parameters"] = {"binary_data_size": len(raw)}
        else:
            entry["data"] = tensor.json_data()
        entries.append(entry)
    outputs = [{"name": name, "parameters": {"binary_data": False}} for name in inputs.outputs]
    header = json.dumps({"inputs": entries, "outputs": outputs}, separators=(",", ":")).encode()
    if raws:
        return header + b"".join(raws), len(header)
    return header, None
