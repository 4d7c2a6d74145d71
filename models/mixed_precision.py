"""``mixed_*``: one FP16 and one FP32 input and output per model, in every framework.

Inputs ``x16`` FP16 [batch, 4] and ``x32`` FP32 [batch, 4]; outputs ``y16 = x16 * 2`` (FP16) and
``y32 = x32 * 2 + float32(x16)`` (FP32). Doubling is exact in binary floating point and the FP32
sum rounds once, so every framework must match :func:`reference` bit for bit: a backend that
converts a dtype on the way in or out shows up as a difference, not as a tolerance.

One function per framework, each importing its framework itself, so this module imports
without any of them. ``mixed_onnx`` is a hand-written ONNX graph (needs only onnx), so every
backend's conformance suite has a mixed model, onnxruntime's included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.config_text import DynamicBatching, TensorConfig, model_config_text, write_config

ONNX = "mixed_onnx"
TORCHSCRIPT = "mixed_torchscript"
TORCH_EXPORT = "mixed_torch_export"
TORCH_COMPILE = "mixed_torch_compile"
SAVEDMODEL = "mixed_savedmodel"
JAX = "mixed_jax"

WIDTH = 4
MAX_BATCH_SIZE = 8
COMPILE_BUCKETS = (1, 4, 8)
INPUTS = ("x16", "x32")
OUTPUTS = ("y16", "y32")


def reference(x16: np.ndarray, x32: np.ndarray) -> dict[str, np.ndarray]:
    """The outputs every mixed model must produce, in numpy."""
    x16 = np.asarray(x16, dtype=np.float16)
    x32 = np.asarray(x32, dtype=np.float32)
    return {"y16": x16 * np.float16(2), "y32": x32 * np.float32(2) + x16.astype(np.float32)}


def _version_dir(repo: Path, name: str) -> Path:
    path = Path(repo) / name / "1"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_onnx(repo: Path) -> list[str]:
    """``mixed_onnx`` (onnxruntime_onnx): Mul, Cast and Add in our usual opset, minimal config."""
    from onnx import TensorProto, helper, numpy_helper

    from models.onnx_graphs import BATCH, make_model, save_model, tensor

    shape = [BATCH, WIDTH]
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x16", "two16"], ["y16"]),
            helper.make_node("Mul", ["x32", "two32"], ["x32_doubled"]),
            helper.make_node("Cast", ["x16"], ["x16_as_fp32"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["x32_doubled", "x16_as_fp32"], ["y32"]),
        ],
        ONNX,
        [tensor("x16", TensorProto.FLOAT16, shape), tensor("x32", TensorProto.FLOAT, shape)],
        [tensor("y16", TensorProto.FLOAT16, shape), tensor("y32", TensorProto.FLOAT, shape)],
        initializer=[
            numpy_helper.from_array(np.array(2, np.float16), "two16"),
            numpy_helper.from_array(np.array(2, np.float32), "two32"),
        ],
    )
    model_dir = Path(repo) / ONNX
    save_model(make_model(graph, doc="y16 = x16 * 2, y32 = x32 * 2 + float32(x16)"), model_dir)
    write_config(model_dir, model_config_text(ONNX, MAX_BATCH_SIZE))
    return [ONNX]


def build_torch(repo: Path) -> list[str]:
    """``mixed_torchscript`` (pytorch_libtorch, tuple output in config order, config lists the
    tensors), ``mixed_torch_export`` (pytorch_export, dict output, minimal config) and
    ``mixed_torch_compile`` (the same .pt2, compiled per batch bucket)."""
    import shutil

    import torch

    from models.digits_torch import torchscript_allowed

    class Mixed(torch.nn.Module):
        def forward(self, x16: torch.Tensor, x32: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"y16": x16 * 2, "y32": x32 * 2 + x16.to(torch.float32)}

    class MixedTuple(Mixed):
        # TorchScript outputs have no names: the server maps them to the config's outputs by
        # position, as Triton's libtorch backend does.
        def forward(self, x16: torch.Tensor, x32: torch.Tensor) -> tuple[torch.Tensor, ...]:
            outputs = super().forward(x16, x32)
            return outputs["y16"], outputs["y32"]

    example = (torch.ones(2, WIDTH, dtype=torch.float16), torch.ones(2, WIDTH))
    with torchscript_allowed():
        script = torch.jit.trace(MixedTuple().eval(), example)
        torch.jit.save(script, _version_dir(repo, TORCHSCRIPT) / "model.pt")
    text = model_config_text(
        TORCHSCRIPT,
        MAX_BATCH_SIZE,
        [TensorConfig("x16", "TYPE_FP16", (WIDTH,)), TensorConfig("x32", "TYPE_FP32", (WIDTH,))],
        [TensorConfig("y16", "TYPE_FP16", (WIDTH,)), TensorConfig("y32", "TYPE_FP32", (WIDTH,))],
        platform="pytorch_libtorch",
    )
    write_config(Path(repo) / TORCHSCRIPT, text)

    # One Dim for both inputs: the sum needs equal batch sizes, and torch.export checks it.
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH_SIZE)
    program = torch.export.export(
        Mixed().eval(), example, dynamic_shapes={"x16": {0: batch}, "x32": {0: batch}}
    )
    pt2 = _version_dir(repo, TORCH_EXPORT) / "model.pt2"
    torch.export.save(program, pt2)
    shutil.copyfile(pt2, _version_dir(repo, TORCH_COMPILE) / "model.pt2")
    text = model_config_text(TORCH_EXPORT, MAX_BATCH_SIZE, platform="pytorch_export")
    write_config(Path(repo) / TORCH_EXPORT, text)
    text = model_config_text(
        TORCH_COMPILE,
        MAX_BATCH_SIZE,
        platform="pytorch_export",
        dynamic_batching=DynamicBatching(max_queue_delay_us=0),
        parameters={
            "compile_mode": "default",
            "batch_buckets": ",".join(str(b) for b in COMPILE_BUCKETS),
        },
    )
    write_config(Path(repo) / TORCH_COMPILE, text)
    return [TORCHSCRIPT, TORCH_EXPORT, TORCH_COMPILE]


def build_tensorflow(repo: Path) -> list[str]:
    """``mixed_savedmodel``: ``serving_default`` takes x16, x32 and returns {y16, y32}."""
    import tensorflow as tf

    class Mixed(tf.Module):
        @tf.function(
            input_signature=[
                tf.TensorSpec([None, WIDTH], tf.float16, name="x16"),
                tf.TensorSpec([None, WIDTH], tf.float32, name="x32"),
            ]
        )
        def serve(self, x16: tf.Tensor, x32: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y16": x16 * 2, "y32": x32 * 2 + tf.cast(x16, tf.float32)}

    module = Mixed()
    path = _version_dir(repo, SAVEDMODEL) / "model.savedmodel"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    text = model_config_text(SAVEDMODEL, MAX_BATCH_SIZE, platform="tensorflow_savedmodel")
    write_config(Path(repo) / SAVEDMODEL, text)
    return [SAVEDMODEL]


def build_jax(repo: Path) -> list[str]:
    """``mixed_jax``: a serialized jax.export of {x16, x32} -> {y16, y32}, batch symbolic."""
    import jax
    import jax.numpy as jnp
    from jax import export as jax_export

    def mixed(inputs: dict[str, jax.Array]) -> dict[str, jax.Array]:
        x16, x32 = inputs["x16"], inputs["x32"]
        # A Python 2 is weakly typed in JAX: it keeps x16's float16.
        return {"y16": x16 * 2, "y32": x32 * 2 + x16.astype(jnp.float32)}

    (batch,) = jax_export.symbolic_shape("batch", constraints=["batch >= 1"])
    spec = {
        "x16": jax.ShapeDtypeStruct((batch, WIDTH), jnp.float16),
        "x32": jax.ShapeDtypeStruct((batch, WIDTH), jnp.float32),
    }
    exported = jax_export.export(jax.jit(mixed), platforms=("cpu", "cuda"))(spec)
    (_version_dir(repo, JAX) / "model.jax").write_bytes(exported.serialize())
    write_config(Path(repo) / JAX, model_config_text(JAX, MAX_BATCH_SIZE, platform="jax_export"))
    return [JAX]
