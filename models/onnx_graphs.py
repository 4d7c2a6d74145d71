"""Small helpers shared by the model builders: one opset, one IR version, one file layout."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx import helper

# Opset 17 covers every operator we use; IR version 9 is pinned explicitly because the default
# of newer onnx releases can run ahead of what deployed onnxruntime builds accept.
OPSET = 17
IR_VERSION = 9
PRODUCER = "accel-gateway models"

# A symbolic leading dimension; Triton treats it as the batch dimension when max_batch_size > 0.
BATCH = "batch"

Dim = int | str | None


def tensor(name: str, elem_type: int, dims: Sequence[Dim]) -> onnx.ValueInfoProto:
    """Graph input/output description; ``None`` leaves a dimension unnamed and unknown."""
    return helper.make_tensor_value_info(name, elem_type, list(dims))


def make_model(graph: onnx.GraphProto, doc: str = "", *, check: bool = True) -> onnx.ModelProto:
    """Wrap ``graph`` in a model with our opset and IR version, and validate it unless ``check``
    is false (large models: save, then :func:`check_file`)."""
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name=PRODUCER,
        doc_string=doc,
    )
    if check:
        # Fail at build time rather than when the server first loads the file.
        onnx.checker.check_model(model, full_check=True)
    return model


def check_file(path: Path) -> None:
    """Validate a saved model like :func:`make_model` does. Checking an in-memory ModelProto
    serializes it and parses it again in C++; for a model of hundreds of MB, reading the file is
    several times faster and needs no second copy."""
    onnx.checker.check_model(path, full_check=True)


def save_model(model: onnx.ModelProto, model_dir: Path, version: int = 1) -> Path:
    """Write ``model`` as ``<model_dir>/<version>/model.onnx`` (Triton's default file name)."""
    path = model_dir / str(version) / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, path)
    return path


def model_file(model_path: Path, version: int = 1) -> Path:
    """Accept either a model.onnx file or the model's directory in the repository."""
    model_path = Path(model_path)
    return model_path / str(version) / "model.onnx" if model_path.is_dir() else model_path
