"""The FP16/FP32 models: every framework's artifact computes y16 = x16 * 2 in FP16 and
y32 = x32 * 2 + float32(x16) in FP32, bit for bit, with the names a server needs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from models import mixed_precision as mp

Runner = Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]

# Model -> (platform, the framework that writes and re-loads it).
MODELS = {
    "mixed_onnx": ("onnxruntime_onnx", "onnxruntime"),
    "mixed_torchscript": ("pytorch_libtorch", "torch"),
    "mixed_torch_export": ("pytorch_export", "torch"),
    "mixed_torch_compile": ("pytorch_export", "torch"),
    "mixed_savedmodel": ("tensorflow_savedmodel", "tensorflow"),
    "mixed_jax": ("jax_export", "jax"),
}


def parse_config(repo: Path, name: str) -> model_config_pb2.ModelConfig:
    text = (repo / name / "config.pbtxt").read_text(encoding="utf-8")
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def load(version_dir: Path, name: str) -> Runner:
    """Version 1 of ``name`` re-loaded with its own framework, as numpy in, numpy out."""
    if name == "mixed_onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(
            str(version_dir / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        return lambda x16, x32: dict(
            zip(mp.OUTPUTS, session.run(list(mp.OUTPUTS), {"x16": x16, "x32": x32}), strict=True)
        )
    if name == "mixed_torchscript":
        import torch

        from models.digits_torch import torchscript_allowed

        with torchscript_allowed():
            module = torch.jit.load(str(version_dir / "model.pt"))

        def run_script(x16: np.ndarray, x32: np.ndarray) -> dict[str, np.ndarray]:
            outputs = module(torch.from_numpy(x16), torch.from_numpy(x32))
            # Positional, in the order the config lists the outputs.
            assert isinstance(outputs, tuple) and len(outputs) == 2
            return {n: t.numpy() for n, t in zip(mp.OUTPUTS, outputs, strict=True)}

        return run_script
    if name in ("mixed_torch_export", "mixed_torch_compile"):
        import torch

        program = torch.export.load(version_dir / "model.pt2").module()
        # Positional, in the order of the program's user inputs (it was exported that way).
        return lambda x16, x32: {
            n: t.numpy() for n, t in program(torch.from_numpy(x16), torch.from_numpy(x32)).items()
        }
    if name == "mixed_savedmodel":
        import tensorflow as tf

        signature = tf.saved_model.load(str(version_dir / "model.savedmodel")).signatures[
            "serving_default"
        ]
        return lambda x16, x32: {
            n: t.numpy() for n, t in signature(x16=tf.constant(x16), x32=tf.constant(x32)).items()
        }
    import jax

    exported = jax.export.deserialize(bytearray((version_dir / "model.jax").read_bytes()))
    return lambda x16, x32: {
        n: np.asarray(t) for n, t in exported.call({"x16": x16, "x32": x32}).items()
    }


@pytest.fixture(scope="module", params=list(MODELS))
def model(request: pytest.FixtureRequest, repo: Path) -> tuple[str, Runner]:
    name = request.param
    pytest.importorskip(MODELS[name][1])
    return name, load(repo / name / "1", name)


def inputs(batch: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(batch)
    x16 = rng.standard_normal((batch, mp.WIDTH)).astype(np.float16)
    x32 = rng.standard_normal((batch, mp.WIDTH)).astype(np.float32)
    # Edge cases in the first row: doubling 40000 overflows FP16 (inf) while the FP32 path
    # holds it, doubling 3e38 overflows FP32, an FP16 subnormal stays exact, and inf and nan
    # go through both paths.
    x16[0] = [40000, np.float16(6e-8), np.inf, np.nan]
    x32[0, 1] = 3.0e38
    return x16, x32


@pytest.mark.parametrize("batch", [1, 3, mp.MAX_BATCH_SIZE])
def test_formulas_and_dtypes(model: tuple[str, Runner], batch: int) -> None:
    name, run = model
    x16, x32 = inputs(batch)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = mp.reference(x16, x32)
    out = run(x16, x32)
    assert sorted(out) == ["y16", "y32"], name
    assert out["y16"].dtype == np.float16 and out["y32"].dtype == np.float32, name
    assert out["y16"].shape == out["y32"].shape == (batch, mp.WIDTH)
    # Exact: doubling is exact and the FP32 sum rounds once, in every framework.
    np.testing.assert_array_equal(out["y16"], expected["y16"])
    np.testing.assert_array_equal(out["y32"], expected["y32"])
    assert np.isposinf(out["y16"][0, 0]) and np.isfinite(out["y32"][0, 0])
    assert np.isposinf(out["y32"][0, 1]) and out["y16"][0, 1] == np.float16(12e-8)


def test_reference_dtypes() -> None:
    out = mp.reference(np.ones((2, 4)), np.ones((2, 4)))
    assert out["y16"].dtype == np.float16 and out["y32"].dtype == np.float32
    np.testing.assert_array_equal(out["y32"], np.full((2, 4), 3, np.float32))


@pytest.mark.parametrize("name", list(MODELS))
def test_config(repo: Path, name: str) -> None:
    if not (repo / name).is_dir():
        pytest.importorskip(MODELS[name][1])
    cfg = parse_config(repo, name)
    assert (cfg.name, cfg.platform, cfg.max_batch_size) == (name, MODELS[name][0], 8)
    if name == "mixed_torchscript":
        fp16, fp32 = model_config_pb2.TYPE_FP16, model_config_pb2.TYPE_FP32
        assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [
            ("x16", fp16, [4]),
            ("x32", fp32, [4]),
        ]
        assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == [
            ("y16", fp16, [4]),
            ("y32", fp32, [4]),
        ]
    else:
        assert len(cfg.input) == 0 and len(cfg.output) == 0
    if name == "mixed_torch_compile":
        assert cfg.HasField("dynamic_batching")
        assert cfg.parameters["compile_mode"].string_value == "default"
        assert cfg.parameters["batch_buckets"].string_value == "1,4,8"


def test_savedmodel_signature_names(repo: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    path = repo / "mixed_savedmodel" / "1" / "model.savedmodel"
    signature = tf.saved_model.load(str(path)).signatures["serving_default"]
    _, kwargs = signature.structured_input_signature
    assert {k: v.dtype for k, v in kwargs.items()} == {"x16": tf.float16, "x32": tf.float32}
    outputs = signature.structured_outputs
    assert {k: v.dtype for k, v in outputs.items()} == {"y16": tf.float16, "y32": tf.float32}


def test_jax_export_trees(repo: Path) -> None:
    jax = pytest.importorskip("jax")
    exported = jax.export.deserialize(
        bytearray((repo / "mixed_jax" / "1" / "model.jax").read_bytes())
    )
    assert [str(a) for a in exported.in_avals] == ["float16[batch,4]", "float32[batch,4]"]
    assert [str(a) for a in exported.out_avals] == ["float16[batch,4]", "float32[batch,4]"]
    assert "'x16'" in str(exported.in_tree) and "'y32'" in str(exported.out_tree)


def test_torch_export_names(repo: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.export.graph_signature import InputKind

    program = torch.export.load(repo / "mixed_torch_export" / "1" / "model.pt2")
    specs = program.graph_signature.input_specs
    assert [s.arg.name for s in specs if s.kind == InputKind.USER_INPUT] == ["x16", "x32"]
    assert program.call_spec.out_spec.context == ["y16", "y32"]
    (batch,) = program.range_constraints.values()
    assert (int(batch.lower), int(batch.upper)) == (1, mp.MAX_BATCH_SIZE)
