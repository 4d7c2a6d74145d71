"""The digits classifier trained in PyTorch, Keras and JAX: each artifact re-loads with its own
framework, gives the accuracy the build logged, agrees with the PyTorch reference, and carries
the tensor names and shapes a server reads from it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from models import digits_training as dt
from models.accuracy import builder_accuracy, predict

# Model -> (platform, the framework whose builder writes it).
VARIANTS = {
    "digits_torchscript": ("pytorch_libtorch", "torch"),
    "digits_torch_export": ("pytorch_export", "torch"),
    "digits_torch_compile": ("pytorch_export", "torch"),
    "digits_torch_onnx": ("onnxruntime_onnx", "torch"),
    "digits_savedmodel": ("tensorflow_savedmodel", "tensorflow"),
    "digits_jax": ("jax_export", "jax"),
}
REFERENCE = "digits_torch_export"


def parse_config(repo: Path, name: str) -> model_config_pb2.ModelConfig:
    text = (repo / name / "config.pbtxt").read_text(encoding="utf-8")
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def needs(name: str) -> None:
    """Skip unless the framework that builds (and re-loads) ``name`` is installed."""
    pytest.importorskip(VARIANTS[name][1])


@pytest.fixture(scope="module")
def probabilities(repo: Path) -> Callable[[str], np.ndarray]:
    """Held-out probabilities of a model; each artifact is loaded once for the whole module."""
    cache: dict[str, np.ndarray] = {}

    def get(name: str) -> np.ndarray:
        if name not in cache:
            cache[name] = predict(repo / name, dt.held_out()[0])
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(VARIANTS))
def test_artifact_gives_the_logged_accuracy(built, probabilities, name: str) -> None:
    needs(name)
    (line,) = [ln for ln in built.lines if ln.startswith(f"{name}: ")]
    match = re.fullmatch(rf"{name}: held-out accuracy (\d\.\d{{4}}) \(450 images\)", line)
    assert match, line
    _, labels = dt.held_out()
    accuracy = dt.accuracy(probabilities(name), labels)
    assert f"{accuracy:.4f}" == match.group(1)
    assert 0.95 <= accuracy <= 0.995
    assert builder_accuracy(built.repo / name) == accuracy


@pytest.mark.parametrize("name", [n for n in VARIANTS if n != REFERENCE])
def test_agrees_with_the_pytorch_reference(probabilities, name: str) -> None:
    needs(REFERENCE)
    needs(name)
    reference, ours = probabilities(REFERENCE), probabilities(name)
    agreement = dt.agreement(reference, ours)
    assert agreement >= 0.99, f"{name} agrees with PyTorch on {agreement:.2%} only"
    # Same initial weights, same full-batch optimizer: not just the same top-1, the same
    # function up to float rounding (measured ~2e-4 for Keras and JAX).
    assert np.abs(reference - ours).max() < 5e-3
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, rtol=1e-5)


def test_shared_initial_weights_are_fixed() -> None:
    a, b = dt.initial_weights(), dt.initial_weights()
    assert {k: v.shape for k, v in a.items()} == {
        "w1": (64, 64),
        "b1": (64,),
        "w2": (64, 10),
        "b2": (10,),
    }
    for key in a:
        assert a[key].dtype == np.float32
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(dt.initial_weights(seed=1)["w1"], a["w1"])
    x, y = dt.training_data()
    assert x.shape == (1347, 64) and x.dtype == np.float32 and y.dtype == np.int64


@pytest.mark.parametrize("name", list(VARIANTS))
def test_config(repo: Path, name: str) -> None:
    cfg = parse_config(repo, name)
    assert (cfg.name, cfg.platform, cfg.max_batch_size) == (name, VARIANTS[name][0], 64)
    fp32 = model_config_pb2.TYPE_FP32
    if name == "digits_torchscript":
        # TorchScript carries neither names nor shapes: the config has to.
        assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [("pixels", fp32, [64])]
        assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == [
            ("probabilities", fp32, [10])
        ]
    else:
        assert len(cfg.input) == 0 and len(cfg.output) == 0
    if name == "digits_torch_compile":
        assert cfg.HasField("dynamic_batching")
        assert {k: v.string_value for k, v in cfg.parameters.items()} == {
            "compile_mode": "default",
            "batch_buckets": "1,8,64",
        }
    else:
        assert not cfg.HasField("dynamic_batching") and len(cfg.parameters) == 0


def test_torchscript_runs_any_batch(repo: Path) -> None:
    torch = pytest.importorskip("torch")
    from models.digits_torch import torchscript_allowed

    with torchscript_allowed():
        module = torch.jit.load(str(repo / "digits_torchscript" / "1" / "model.pt"))
    x = torch.from_numpy(dt.held_out()[0][:3])
    with torch.inference_mode():
        out = module(x)
    assert isinstance(out, torch.Tensor) and out.shape == (3, 10) and out.dtype == torch.float32


def test_torch_export_names_and_dynamic_batch(repo: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.export.graph_signature import InputKind

    pt2 = repo / "digits_torch_export" / "1" / "model.pt2"
    assert (repo / "digits_torch_compile" / "1" / "model.pt2").read_bytes() == pt2.read_bytes()
    program = torch.export.load(pt2)
    user_inputs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    ]
    assert user_inputs == ["pixels"]
    assert program.call_spec.out_spec.context == ["probabilities"]
    (batch,) = program.range_constraints.values()
    assert (int(batch.lower), int(batch.upper)) == (1, 64)
    module = program.module()
    x = torch.from_numpy(dt.held_out()[0][:64])
    with torch.inference_mode():
        assert module(x[:1])["probabilities"].shape == (1, 10)
        assert module(x)["probabilities"].shape == (64, 10)


def test_torch_onnx_graph(repo: Path) -> None:
    needs("digits_torch_onnx")
    import onnxruntime as ort

    path = repo / "digits_torch_onnx" / "1" / "model.onnx"
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    from models.torch_onnx import OPSET

    assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)]
    # Runnable by every onnxruntime the project supports (>= 1.18 reads IR 10).
    assert model.ir_version <= 10
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("pixels", "tensor(float)", ["batch", 64])
    assert (out.name, out.type, out.shape) == ("probabilities", "tensor(float)", ["batch", 10])


def test_savedmodel_signature(repo: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    from models.digits_keras import load_signature

    signature = load_signature(repo / "digits_savedmodel")
    args, kwargs = signature.structured_input_signature
    assert args == () and list(kwargs) == ["pixels"]
    assert kwargs["pixels"].dtype == tf.float32 and kwargs["pixels"].shape.as_list() == [None, 64]
    (key, spec), *rest = signature.structured_outputs.items()
    assert rest == [] and key == "probabilities"
    assert spec.dtype == tf.float32 and spec.shape.as_list() == [None, 10]


def test_jax_export_runs_without_our_code(repo: Path, tmp_path: Path) -> None:
    """Deserialized and called in a fresh interpreter that imports only JAX and numpy."""
    needs("digits_jax")
    path = repo / "digits_jax" / "1" / "model.jax"
    x, _ = dt.held_out()
    np.save(tmp_path / "x.npy", x[:5])
    script = f"""
import sys, jax, numpy as np
exported = jax.export.deserialize(bytearray(open({str(path)!r}, "rb").read()))
assert exported.platforms == ("cpu", "cuda"), exported.platforms
assert str(exported.in_avals[0].shape) == "(batch, 64)", exported.in_avals
out = exported.call({{"pixels": np.load({str(tmp_path / "x.npy")!r})}})
assert list(out) == ["probabilities"] and out["probabilities"].dtype == np.float32
np.save({str(tmp_path / "y.npy")!r}, np.asarray(out["probabilities"]))
assert "models" not in sys.modules
"""
    # -I: isolated, so neither the working directory nor PYTHONPATH puts our code in reach.
    done = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, predict(repo / "digits_jax", x[:5]), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_exports_are_deterministic(tmp_path: Path, repo: Path) -> None:
    """The same training twice writes the same weights: builds are reproducible."""
    from models import digits_torch

    digits_torch.write_torchscript(digits_torch.train(), tmp_path)
    x, _ = dt.held_out()
    again = predict(tmp_path / "digits_torchscript", x)
    np.testing.assert_array_equal(again, predict(repo / "digits_torchscript", x))
