"""The random-weight ``mlp`` models: batch-independent outputs, configs, determinism, mlp_wide."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from models import mlp
from models.onnx_graphs import IR_VERSION, OPSET


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("mlp-repo")
    assert mlp.build(repo) == "mlp"
    return repo


def onnx_path(repo: Path, name: str) -> Path:
    return repo / name / "1" / "model.onnx"


def parse_config(repo: Path, name: str) -> model_config_pb2.ModelConfig:
    text = (repo / name / "config.pbtxt").read_text(encoding="utf-8")
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def inputs(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, mlp.N_FEATURES), dtype=np.float32)


def test_batch_equals_rows_run_alone(repo: Path) -> None:
    x = inputs(5)
    batched = mlp.reference_outputs(onnx_path(repo, "mlp"), x)
    assert batched.shape == (5, 10) and batched.dtype == np.float32
    rows = np.concatenate([mlp.reference_outputs(repo / "mlp", x[i : i + 1]) for i in range(5)])
    np.testing.assert_allclose(batched, rows, rtol=0, atol=1e-5)


def test_outputs_finite_and_distinct(repo: Path) -> None:
    y = mlp.reference_outputs(repo / "mlp", inputs(5))
    assert np.isfinite(y).all()
    # He scaling keeps the logits O(1): neither vanishing nor blowing up through the layers.
    assert 0.1 < float(np.abs(y).max()) < 100
    assert not np.allclose(y, y[0]), "every row gave the same output"
    assert len({row.tobytes() for row in y}) == 5


def test_graph_io_and_versions(repo: Path) -> None:
    path = onnx_path(repo, "mlp")
    model = onnx.load(path)
    onnx.checker.check_model(model)
    assert model.ir_version == IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)]
    assert [n.op_type for n in model.graph.node] == ["Gemm", "Relu", "Gemm", "Relu", "Gemm"]
    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    assert shapes == {
        "w1": (784, 1024),
        "b1": (1024,),
        "w2": (1024, 1024),
        "b2": (1024,),
        "w3": (1024, 10),
        "b3": (10,),
    }
    n_weights = sum(int(np.prod(s)) for s in shapes.values())
    assert 7.4e6 < 4 * n_weights < 7.6e6  # ~7.5 MB of FP32 weights

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("INPUT0", "tensor(float)", ["batch", 784])
    assert (out.name, out.type, out.shape) == ("OUTPUT0", "tensor(float)", ["batch", 10])


def test_example_config(repo: Path) -> None:
    cfg = parse_config(repo, "mlp")
    assert (cfg.name, cfg.platform, cfg.max_batch_size) == ("mlp", "onnxruntime_onnx", 64)
    fp32 = model_config_pb2.TYPE_FP32
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [("INPUT0", fp32, [784])]
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == [("OUTPUT0", fp32, [10])]
    assert cfg.HasField("dynamic_batching")
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2000
    assert list(cfg.dynamic_batching.preferred_batch_size) == []
    text = (repo / "mlp" / "config.pbtxt").read_text(encoding="utf-8")
    assert "preferred_batch_size" not in text
    assert len(cfg.parameters) == 0


def test_config_options(tmp_path: Path) -> None:
    mlp.write_mlp(
        tmp_path,
        "mlp_tuned",
        16,
        dynamic_batching=True,
        max_batch_size=32,
        max_queue_delay_us=500,
        preferred_batch_sizes=(8, 16),
        intra_op_threads=2,
    )
    cfg = parse_config(tmp_path, "mlp_tuned")
    assert (cfg.name, cfg.max_batch_size) == ("mlp_tuned", 32)
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8, 16]
    assert dict(cfg.parameters) == {
        "intra_op_thread_count": model_config_pb2.ModelParameter(string_value="2")
    }

    mlp.write_mlp(tmp_path, "mlp_plain", 16, dynamic_batching=False)
    cfg = parse_config(tmp_path, "mlp_plain")
    assert (cfg.name, cfg.max_batch_size) == ("mlp_plain", 64)
    assert not cfg.HasField("dynamic_batching")
    assert len(cfg.parameters) == 0


def test_same_seed_same_bytes_whatever_the_name(repo: Path, tmp_path: Path) -> None:
    mlp.write_mlp(tmp_path, "mlp_batched", mlp.HIDDEN, dynamic_batching=True, max_batch_size=8)
    mlp.write_mlp(tmp_path, "mlp_unbatched", mlp.HIDDEN, dynamic_batching=False)
    reference = onnx_path(repo, "mlp").read_bytes()
    assert onnx_path(tmp_path, "mlp_batched").read_bytes() == reference
    assert onnx_path(tmp_path, "mlp_unbatched").read_bytes() == reference

    mlp.write_mlp(tmp_path, "mlp_seed1", mlp.HIDDEN, dynamic_batching=True, seed=1)
    other = onnx_path(tmp_path, "mlp_seed1").read_bytes()
    assert len(other) == len(reference) and other != reference


def test_main_writes_one_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path), "--name", "tiny", "--hidden", "8", "--preferred-batch-size", "4"]
    assert mlp.main([*argv, "--preferred-batch-size", "8", "--intra-op-threads", "1"]) == 0
    assert "wrote" in capsys.readouterr().out
    cfg = parse_config(tmp_path, "tiny")
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.parameters["intra_op_thread_count"].string_value == "1"
    y = mlp.reference_outputs(tmp_path / "tiny", inputs(2))
    assert y.shape == (2, 10) and np.isfinite(y).all()


def test_mlp_wide_builds_and_runs(tmp_path: Path) -> None:
    started = time.perf_counter()
    assert mlp.build_wide(tmp_path) == "mlp_wide"
    elapsed = time.perf_counter() - started
    path = onnx_path(tmp_path, "mlp_wide")
    assert 280e6 < path.stat().st_size < 310e6
    # Generous: ~3 s on 2 cores; a regression to the slow protobuf copy paths shows up here.
    assert elapsed < 30, f"mlp_wide took {elapsed:.1f} s to build"
    cfg = parse_config(tmp_path, "mlp_wide")
    assert (cfg.name, cfg.max_batch_size) == ("mlp_wide", 64)
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2000
    y = mlp.reference_outputs(path, inputs(1))
    assert y.shape == (1, 10) and np.isfinite(y).all()
