"""Triton's classic ``simple`` example: element-wise sum and difference of two INT32 vectors."""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

from models.config_text import DynamicBatching, TensorConfig, model_config_text, write_config
from models.onnx_graphs import BATCH, make_model, save_model, tensor

NAME = "simple"
MAX_BATCH_SIZE = 8
WIDTH = 16


def build(repo: Path, name: str = NAME, batching: DynamicBatching | None = None) -> str:
    """Write ``<repo>/<name>`` (``simple`` unless told), optionally with dynamic batching;
    returns the model name."""
    shape = [BATCH, WIDTH]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        name,
        [tensor("INPUT0", TensorProto.INT32, shape), tensor("INPUT1", TensorProto.INT32, shape)],
        [tensor("OUTPUT0", TensorProto.INT32, shape), tensor("OUTPUT1", TensorProto.INT32, shape)],
    )
    model_dir = repo / name
    doc = "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1"
    save_model(make_model(graph, doc=doc), model_dir)
    inputs = [TensorConfig(n, "TYPE_INT32", (WIDTH,)) for n in ("INPUT0", "INPUT1")]
    outputs = [TensorConfig(n, "TYPE_INT32", (WIDTH,)) for n in ("OUTPUT0", "OUTPUT1")]
    text = model_config_text(name, MAX_BATCH_SIZE, inputs, outputs, dynamic_batching=batching)
    write_config(model_dir, text)
    return name
