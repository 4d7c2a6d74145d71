"""The `tvm` backend: compilation, the on-disk cache, ahead-of-time libraries served by a
real gateway, and models TVM cannot import."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("tvm")

from backends import (
    BackendUnavailable,  # noqa: E402
    tvm_compile,  # noqa: E402
)
from backends.tvm_compile import MANIFEST, Manifest  # noqa: E402
from models.digits import held_out  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_conformance import load_backend  # noqa: E402


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    """An empty cache root for this test (the backend's cache lives under it)."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture
def compile_calls(monkeypatch) -> list[float]:
    """Every tvm.compile call made in this process, with its duration."""
    calls: list[float] = []
    original = tvm_compile.tvm.compile

    def counted(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - started)

    monkeypatch.setattr(tvm_compile.tvm, "compile", counted)
    return calls


def run_digits(backend, rows: int) -> np.ndarray:
    return backend.run({"pixels": held_out()[0][:rows]}, ["probabilities"])["probabilities"]


def test_second_load_comes_from_the_cache_without_compiling(
    example_repository, cache_home, compile_calls
):
    started = time.perf_counter()
    first = load_backend(example_repository / "digits_tvm")
    first_load_s = time.perf_counter() - started
    try:
        assert first.source == "compiled"
        assert len(compile_calls) == 3  # one library per bucket: 1, 8, 64
        expected = run_digits(first, 13)
    finally:
        first.unload()

    started = time.perf_counter()
    second = load_backend(example_repository / "digits_tvm")
    second_load_s = time.perf_counter() - started
    try:
        assert second.source == "cache"
        assert len(compile_calls) == 3, "the second load compiled again"
        np.testing.assert_array_equal(run_digits(second, 13), expected)
    finally:
        second.unload()
    print(
        f"digits_tvm: first load {first_load_s:.2f} s ({sum(compile_calls):.2f} s in "
        f"tvm.compile), second load {second_load_s * 1000:.1f} ms from the cache"
    )
    [entry] = [p for p in (cache_home / "accel-gateway" / "tvm").iterdir() if p.is_dir()]
    manifest = Manifest.read(entry)
    assert manifest is not None and manifest.buckets == [1, 8, 64]
    assert manifest.key() == entry.name


def test_cache_key_changes_with_what_the_libraries_depend_on(example_repository):
    artifact = example_repository / "digits_tvm" / "1" / "model.onnx"
    target = tvm_compile.build_target("llvm")
    base = tvm_compile.wanted_manifest(artifact, target, (1, 8, 64), 0)
    assert base.key() == tvm_compile.wanted_manifest(artifact, target, (1, 8, 64), 0).key()
    other_model = example_repository / "mlp_tvm" / "1" / "model.onnx"
    variants = [
        tvm_compile.wanted_manifest(other_model, target, (1, 8, 64), 0),
        tvm_compile.wanted_manifest(artifact, target, (1, 64), 0),
        tvm_compile.wanted_manifest(artifact, target, (1, 8, 64), 16),
        Manifest(**{**base.__dict__, "tvm_version": "0.0.1"}),
        Manifest(**{**base.__dict__, "target": '{"kind":"llvm","mcpu":"other"}'}),
    ]
    assert len({base.key(), *(v.key() for v in variants)}) == 1 + len(variants)


def test_batch_sizes_between_buckets_are_padded(example_repository, cache_home):
    backend = load_backend(example_repository / "digits_tvm")
    try:
        assert backend.allowed_batch_sizes() == (1, 8, 64)
        images = held_out()[0][:64]
        batched = run_digits(backend, 64)
        for rows in (1, 5, 9, 63):
            np.testing.assert_allclose(run_digits(backend, rows), batched[:rows], rtol=1e-5)
        assert images.shape[0] == 64
    finally:
        backend.unload()


def compile_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "compile", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def digits_tvm_compiled(example_repository, tmp_path_factory):
    """digits_tvm with its libraries compiled ahead of time for llvm, once for the module
    (each `accel-gateway compile` takes ~12 s here, most of it importing TVM), and that
    compile's outcome. Not to be changed: tests take copies (aot_digits_tvm)."""
    repository = tmp_path_factory.mktemp("aot") / "repository"
    shutil.copytree(example_repository / "digits_tvm", repository / "digits_tvm")
    compiled = compile_cli(str(repository / "digits_tvm"), "--target", "llvm")
    assert compiled.returncode == 0, compiled.stderr
    return repository / "digits_tvm", compiled


@pytest.fixture
def aot_digits_tvm(digits_tvm_compiled, tmp_path) -> Path:
    """A repository of this test's own holding a copy of the compiled digits_tvm."""
    repository = tmp_path / "repository"
    shutil.copytree(digits_tvm_compiled[0], repository / "digits_tvm")
    return repository


def test_ahead_of_time_libraries_are_served_without_compiling(
    digits_tvm_compiled, aot_digits_tvm, server_factory, tmp_path
):
    repository = aot_digits_tvm
    compiled = digits_tvm_compiled[1]
    aot = repository / "digits_tvm" / "1" / "tvm-llvm"
    manifest = json.loads((aot / MANIFEST).read_text())
    assert sorted(manifest["libraries"]) == ["1", "64", "8"]
    assert "compiled digits_tvm version 1" in compiled.stdout

    empty_cache = tmp_path / "serve-cache"
    server = server_factory(repository, env={"XDG_CACHE_HOME": str(empty_cache)})
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_model_ready("digits_tvm")
        images = held_out()[0][:5]
        tensor = httpclient.InferInput("pixels", list(images.shape), "FP32")
        tensor.set_data_from_numpy(images)
        served = client.infer("digits_tvm", [tensor]).as_numpy("probabilities")
    finally:
        client.close()
    assert "ahead-of-time libraries" in server.log()
    assert not (empty_cache / "accel-gateway" / "tvm").exists(), "serve compiled anyway"
    reference = load_backend(repository / "digits_tvm")  # also from the AOT libraries
    try:
        np.testing.assert_allclose(served, run_digits(reference, 5), rtol=1e-6)
    finally:
        reference.unload()


def test_ahead_of_time_libraries_for_another_target_are_not_used(
    aot_digits_tvm, cache_home, compile_calls
):
    repository = aot_digits_tvm
    aot = repository / "digits_tvm" / "1" / "tvm-llvm"
    manifest = json.loads((aot / MANIFEST).read_text())
    manifest["target"] = '{"kind":"llvm","mcpu":"some-other-cpu"}'
    (aot / MANIFEST).write_text(json.dumps(manifest))
    backend = load_backend(repository / "digits_tvm")
    try:
        assert backend.source == "compiled" and len(compile_calls) == 3
    finally:
        backend.unload()


def test_compile_refuses_a_model_of_another_backend(example_repository):
    result = compile_cli(str(example_repository / "digits"), "--target", "llvm")
    assert result.returncode == 1
    assert "backend 'onnxruntime_onnx'" in result.stderr and "tvm" in result.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="CUDA code generation needs nvcc")
def test_compile_for_cuda_without_a_gpu(repository_copy):
    """The CUDA path compiles here (nvcc, no GPU needed); running it needs a GPU."""
    repository = repository_copy("mlp_tvm")
    result = compile_cli(str(repository / "mlp_tvm"), "--target", "cuda", "--cuda-arch", "sm_80")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((repository / "mlp_tvm" / "1" / "tvm-cuda" / MANIFEST).read_text())
    assert '"cuda"' in manifest["target"] and "sm_80" in manifest["target"]


def write_det_model(repository: Path, backend: str) -> str:
    """A model using Det, an ONNX operator ONNX Runtime runs but TVM cannot import."""
    name = f"determinant_{backend}"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], name, [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (repository / name / "1").mkdir(parents=True)
    onnx.save(model, repository / name / "1" / "model.onnx")
    (repository / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 4\n'
    )
    return name


def test_unsupported_operator_is_named_and_the_server_stays_up(
    repository_copy, server_factory, tmp_path
):
    repository = repository_copy("digits")
    name = write_det_model(repository, "tvm")
    server = server_factory(repository, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert index[name]["state"] == "UNAVAILABLE"
        assert "Det" in index[name]["reason"] and "TVM" in index[name]["reason"]
        assert client.is_model_ready("digits")
        assert client.is_server_live()
    finally:
        client.close()


def test_unsupported_operator_in_process(tmp_path, cache_home):
    name = write_det_model(tmp_path, "tvm")
    with pytest.raises(BackendUnavailable, match="operators are not supported.*Det"):
        load_backend(tmp_path / name)


def test_compile_with_a_small_tuning_budget(repository_copy, cache_home):
    """MetaSchedule with one trial on one bucket (about 30 s here: each round of
    candidates starts builder and runner processes that import TVM; a second trial was a
    second round, up to 20 s more for nothing more asserted), a progress bar, and a
    library the backend then serves."""
    repository = repository_copy("mixed_tvm")
    config = repository / "mixed_tvm" / "config.pbtxt"
    config.write_text(config.read_text().replace('"1,8"', '"8"'))
    result = compile_cli(str(repository / "mixed_tvm"), "--target", "llvm", "--tune-trials", "1")
    assert result.returncode == 0, result.stderr
    assert "1/1" in result.stderr and "tuning" in result.stderr  # tqdm's bar
    manifest = json.loads((repository / "mixed_tvm" / "1" / "tvm-llvm" / MANIFEST).read_text())
    assert manifest["tune_trials"] == 1 and manifest["buckets"] == [8]
    backend = load_backend(repository / "mixed_tvm")
    try:
        assert backend.source == "ahead-of-time"
        x16 = np.arange(12, dtype=np.float16).reshape(3, 4)
        x32 = np.ones((3, 4), np.float32)
        out = backend.run({"x16": x16, "x32": x32}, ["y16", "y32"])
        np.testing.assert_array_equal(out["y16"], x16 * np.float16(2))
        np.testing.assert_array_equal(out["y32"], x32 * 2 + x16.astype(np.float32))
    finally:
        backend.unload()


def test_a_damaged_cached_library_is_compiled_again(example_repository, cache_home, compile_calls):
    """A truncated library would crash the process if loaded (SIGBUS): its hash is checked
    first, and the entry is compiled again."""
    load_backend(example_repository / "digits_tvm").unload()
    [entry] = [p for p in (cache_home / "accel-gateway" / "tvm").iterdir() if p.is_dir()]
    library = next(entry.glob("batch8-*.so"))
    # A new file in its place: truncating the mapped one in place would crash this very
    # process, which loaded it a moment ago.
    damaged = library.with_suffix(".tmp")
    damaged.write_bytes(library.read_bytes()[:1000])
    damaged.replace(library)
    backend = load_backend(example_repository / "digits_tvm")
    try:
        assert backend.source == "compiled" and len(compile_calls) == 6
        assert run_digits(backend, 8).shape == (8, 10)
    finally:
        backend.unload()


def test_recompiled_libraries_get_new_file_names(aot_digits_tvm):
    """glibc returns an already-loaded library for a path it has seen: a recompiled model
    must not reuse a path, or a reload would serve the old code."""
    repository = aot_digits_tvm  # compiled once already
    aot = repository / "digits_tvm" / "1" / "tvm-llvm"
    before = set(json.loads((aot / MANIFEST).read_text())["libraries"].values())
    model = onnx.load(repository / "digits_tvm" / "1" / "model.onnx")
    weights = model.graph.initializer[0]
    weights.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights) + 1, weights.name))
    onnx.save(model, repository / "digits_tvm" / "1" / "model.onnx")
    assert compile_cli(str(repository / "digits_tvm"), "--target", "llvm").returncode == 0
    after = set(json.loads((aot / MANIFEST).read_text())["libraries"].values())
    assert before.isdisjoint(after)
