"""Writes Triton ``config.pbtxt`` files as protobuf text format, without a protobuf dependency.

Only the handful of ModelConfig fields the example repository needs are supported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ONNX_PLATFORM = "onnxruntime_onnx"


@dataclass(frozen=True)
class TensorConfig:
    """One ``input``/``output`` entry; ``data_type`` is Triton's enum name, e.g. TYPE_FP32."""

    name: str
    data_type: str
    dims: tuple[int, ...]


def _quote(text: str) -> str:
    # Text-format strings use C-style escapes; names are ours, but stay correct regardless.
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _tensor_block(field: str, tensors: Sequence[TensorConfig]) -> list[str]:
    entries = []
    for t in tensors:
        dims = ", ".join(str(d) for d in t.dims)
        entries.append(
            "  {\n"
            f"    name: {_quote(t.name)}\n"
            f"    data_type: {t.data_type}\n"
            f"    dims: [ {dims} ]\n"
            "  }"
        )
    return [f"{field} [", ",\n".join(entries), "]"]


def model_config_text(
    name: str,
    max_batch_size: int,
    inputs: Sequence[TensorConfig] = (),
    outputs: Sequence[TensorConfig] = (),
    platform: str = ONNX_PLATFORM,
) -> str:
    """Render a ModelConfig; empty ``inputs``/``outputs`` are omitted so the server completes
    them from the model file."""
    lines = [
        f"name: {_quote(name)}",
        f"platform: {_quote(platform)}",
        f"max_batch_size: {max_batch_size}",
    ]
    if inputs:
        lines += _tensor_block("input", inputs)
    if outputs:
        lines += _tensor_block("output", outputs)
    return "\n".join(lines) + "\n"


def write_config(model_dir: Path, text: str) -> Path:
    """Write ``<model_dir>/config.pbtxt``."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "config.pbtxt"
    path.write_text(text, encoding="utf-8")
    return path
