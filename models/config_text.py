"""Writes Triton ``config.pbtxt`` files as protobuf text format, without a protobuf dependency.

Only the handful of ModelConfig fields the example repository needs are supported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ONNX_PLATFORM = "onnxruntime_onnx"


@dataclass(frozen=True)
class TensorConfig:
    """One ``input``/``output`` entry; ``data_type`` is Triton's enum name, e.g. TYPE_FP32."""

    name: str
    data_type: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class DynamicBatching:
    """A ``dynamic_batching`` block; an empty ``preferred_batch_sizes`` is left out, so the server
    batches whatever has queued up to max_batch_size."""

    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    # False: every partial batch waits out its window (Triton's rule), not only when another
    # request is expected (the gateway's adaptive window; the adaptive_batch_window parameter).
    adaptive: bool = True


def quote(text: str) -> str:
    # Text-format strings use C-style escapes; names are ours, but stay correct regardless.
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _tensor_block(field: str, tensors: Sequence[TensorConfig]) -> list[str]:
    entries = []
    for t in tensors:
        dims = ", ".join(str(d) for d in t.dims)
        entries.append(
            "  {\n"
            f"    name: {quote(t.name)}\n"
            f"    data_type: {t.data_type}\n"
            f"    dims: [ {dims} ]\n"
            "  }"
        )
    return [f"{field} [", ",\n".join(entries), "]"]


def _dynamic_batching_block(batching: DynamicBatching) -> list[str]:
    lines = [
        "dynamic_batching {",
        f"  max_queue_delay_microseconds: {batching.max_queue_delay_us}",
    ]
    if batching.preferred_batch_sizes:
        sizes = ", ".join(str(s) for s in batching.preferred_batch_sizes)
        lines.append(f"  preferred_batch_size: [ {sizes} ]")
    return [*lines, "}"]


def _parameters_block(parameters: Mapping[str, str]) -> list[str]:
    # ModelConfig.parameters is a map<string, ModelParameter>: one entry block per key.
    lines = []
    for key, value in parameters.items():
        lines += [
            "parameters {",
            f"  key: {quote(key)}",
            f"  value: {{ string_value: {quote(value)} }}",
            "}",
        ]
    return lines


def model_config_text(
    name: str,
    max_batch_size: int,
    inputs: Sequence[TensorConfig] = (),
    outputs: Sequence[TensorConfig] = (),
    platform: str = ONNX_PLATFORM,
    dynamic_batching: DynamicBatching | None = None,
    parameters: Mapping[str, str] | None = None,
    backend: str | None = None,
) -> str:
    """Render a ModelConfig; empty ``inputs``/``outputs`` are omitted so the server completes
    them from the model file. ``dynamic_batching``/``parameters`` are written only when given.
    ``backend`` (e.g. "tvm") replaces ``platform`` for backends Triton names that way."""
    kind = f"backend: {quote(backend)}" if backend else f"platform: {quote(platform)}"
    lines = [
        f"name: {quote(name)}",
        kind,
        f"max_batch_size: {max_batch_size}",
    ]
    if inputs:
        lines += _tensor_block("input", inputs)
    if outputs:
        lines += _tensor_block("output", outputs)
    if dynamic_batching is not None:
        lines += _dynamic_batching_block(dynamic_batching)
        if not dynamic_batching.adaptive:
            parameters = {**(parameters or {}), "adaptive_batch_window": "false"}
    if parameters:
        lines += _parameters_block(parameters)
    return "\n".join(lines) + "\n"


def write_config(model_dir: Path, text: str) -> Path:
    """Write ``<model_dir>/config.pbtxt``."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "config.pbtxt"
    path.write_text(text, encoding="utf-8")
    return path
