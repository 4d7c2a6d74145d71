"""What an ONNX file declares, read with the `onnx` package alone: its input and output
tensors and the operators it uses. The compiled backends (TVM, OpenCL) read their
metadata here rather than from a runtime that would have to load the whole model first.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from backends.base import BackendUnavailable, TensorSpec

_ONNX_TO_V2 = {
    onnx.TensorProto.BOOL: "BOOL",
    onnx.TensorProto.UINT8: "UINT8",
    onnx.TensorProto.UINT16: "UINT16",
    onnx.TensorProto.UINT32: "UINT32",
    onnx.TensorProto.UINT64: "UINT64",
    onnx.TensorProto.INT8: "INT8",
    onnx.TensorProto.INT16: "INT16",
    onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64",
    onnx.TensorProto.FLOAT16: "FP16",
    onnx.TensorProto.FLOAT: "FP32",
    onnx.TensorProto.DOUBLE: "FP64",
    onnx.TensorProto.BFLOAT16: "BF16",
    onnx.TensorProto.STRING: "BYTES",
}


def load(path: Path, model: str) -> onnx.ModelProto:
    try:
        return onnx.load(str(path))
    except Exception as exc:  # protobuf decode errors come in several types
        raise BackendUnavailable(
            f"model '{model}': cannot read {path.name} as ONNX: {exc}"
        ) from exc


def _spec(value: onnx.ValueInfoProto, model: str, unsupported: set[str]) -> TensorSpec:
    tensor_type = value.type.tensor_type
    datatype = _ONNX_TO_V2.get(tensor_type.elem_type)
    if datatype is None or datatype in unsupported:
        name = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
        raise BackendUnavailable(
            f"model '{model}': tensor '{value.name}' has type {name}, which this backend "
            "cannot run; serve it with onnxruntime_onnx"
        )
    shape = tuple(d.dim_value if d.dim_value > 0 else -1 for d in tensor_type.shape.dim)
    return TensorSpec(value.name, datatype, shape)


def tensor_specs(
    graph_model: onnx.ModelProto, model: str, unsupported: set[str] = frozenset()
) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's inputs (initializers excluded) and outputs, in graph order."""
    graph = graph_model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = [_spec(v, model, unsupported) for v in graph.input if v.name not in initializers]
    outputs = [_spec(v, model, unsupported) for v in graph.output]
    return inputs, outputs


def operators(graph_model: onnx.ModelProto) -> set[str]:
    """Every operator type the main graph uses."""
    return {node.op_type for node in graph_model.graph.node}


def with_batch_size(graph_model: onnx.ModelProto, rows: int) -> onnx.ModelProto:
    """A copy whose inputs have `rows` as their first dimension: one static batch bucket."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(graph_model)
    initializers = {init.name for init in fixed.graph.initializer}
    for value in fixed.graph.input:
        if value.name in initializers:
            continue
        first = value.type.tensor_type.shape.dim[0]
        first.Clear()
        first.dim_value = rows
    return fixed
