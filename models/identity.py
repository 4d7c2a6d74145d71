"""One Identity model per KServe V2 datatype, for round-trip tests of every wire encoding."""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

from models.config_text import TensorConfig, model_config_text, write_config
from models.onnx_graphs import BATCH, make_model, save_model, tensor

MAX_BATCH_SIZE = 8

# Model-name suffix -> (Triton config enum, ONNX element type). V2 "BYTES" is Triton's
# TYPE_STRING and ONNX's STRING (arbitrary byte strings at the protocol level).
DATATYPES: dict[str, tuple[str, int]] = {
    "bool": ("TYPE_BOOL", TensorProto.BOOL),
    "uint8": ("TYPE_UINT8", TensorProto.UINT8),
    "uint16": ("TYPE_UINT16", TensorProto.UINT16),
    "uint32": ("TYPE_UINT32", TensorProto.UINT32),
    "uint64": ("TYPE_UINT64", TensorProto.UINT64),
    "int8": ("TYPE_INT8", TensorProto.INT8),
    "int16": ("TYPE_INT16", TensorProto.INT16),
    "int32": ("TYPE_INT32", TensorProto.INT32),
    "int64": ("TYPE_INT64", TensorProto.INT64),
    "fp16": ("TYPE_FP16", TensorProto.FLOAT16),
    "fp32": ("TYPE_FP32", TensorProto.FLOAT),
    "fp64": ("TYPE_FP64", TensorProto.DOUBLE),
    "bf16": ("TYPE_BF16", TensorProto.BFLOAT16),
    "bytes": ("TYPE_STRING", TensorProto.STRING),
}


def model_name(suffix: str) -> str:
    return f"identity_{suffix}"


def build_one(repo: Path, suffix: str) -> str:
    """Write ``<repo>/identity_<suffix>``; returns the model name."""
    triton_type, onnx_type = DATATYPES[suffix]
    name = model_name(suffix)
    # [batch, variable length]; the inner dimension is left unnamed (Triton dims [ -1 ]).
    shape = [BATCH, None]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [tensor("INPUT0", onnx_type, shape)],
        [tensor("OUTPUT0", onnx_type, shape)],
    )
    model_dir = repo / name
    save_model(make_model(graph, doc=f"OUTPUT0 = INPUT0 ({triton_type})"), model_dir)
    text = model_config_text(
        name,
        MAX_BATCH_SIZE,
        [TensorConfig("INPUT0", triton_type, (-1,))],
        [TensorConfig("OUTPUT0", triton_type, (-1,))],
    )
    write_config(model_dir, text)
    return name


def build(repo: Path) -> list[str]:
    """Write every identity model; returns their names."""
    return [build_one(repo, suffix) for suffix in DATATYPES]
