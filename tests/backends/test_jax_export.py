"""What is particular to the jax_export backend: names from pytrees, platforms, batch dims."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

jax = pytest.importorskip("jax")

from jax import export as jax_export  # noqa: E402

from accel_base.proto import model_config_pb2 as mc  # noqa: E402
from backends import BackendUnavailable, Device  # noqa: E402
from backends.jax_export import JaxExportBackend  # noqa: E402


def config(text: str = "") -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" platform: "jax_export" {text}', mc.ModelConfig())


def write(tmp_path: Path, fn, *args) -> Path:
    path = tmp_path / "model.jax"
    path.write_bytes(jax_export.export(jax.jit(fn))(*args).serialize())
    return path


def spec(*shape):
    return jax.ShapeDtypeStruct(shape, np.float32)


def test_nested_dict_keys_are_joined_into_names(tmp_path: Path):
    (batch,) = jax_export.symbolic_shape("b")
    path = write(
        tmp_path,
        lambda d: {"out": {"y": d["a"]["x"] + d["b"]["x"]}},
        {"a": {"x": spec(batch, 2)}, "b": {"x": spec(batch, 2)}},
    )
    backend = JaxExportBackend(path, config("max_batch_size: 4"), Device())
    assert [s.name for s in backend.inputs()] == ["a.x", "b.x"]
    assert [s.name for s in backend.outputs()] == ["out.y"]
    ones = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(backend.run({"a.x": ones, "b.x": ones}, ["out.y"])["out.y"], 2)
    backend.unload()


def test_positional_arrays_are_numbered(tmp_path: Path):
    path = write(tmp_path, lambda x, y: (x * y, x + y), spec(2), spec(2))
    backend = JaxExportBackend(path, config(), Device())
    assert [s.name for s in backend.inputs()] == ["INPUT__0", "INPUT__1"]
    assert [s.name for s in backend.outputs()] == ["OUTPUT__0", "OUTPUT__1"]
    backend.unload()


def test_duplicate_names_are_refused(tmp_path: Path):
    path = write(tmp_path, lambda x: (x, {"OUTPUT__0": x}), spec(2))
    with pytest.raises(BackendUnavailable, match="do not have distinct names"):
        JaxExportBackend(path, config(), Device())


def test_fixed_batch_dimension_is_refused_for_a_batched_config(tmp_path: Path):
    path = write(tmp_path, lambda d: {"y": d["x"]}, {"x": spec(2, 3)})
    with pytest.raises(BackendUnavailable, match="without the symbolic first dimension"):
        JaxExportBackend(path, config("max_batch_size: 4"), Device())


def test_gpu_for_a_cpu_only_export_is_a_clear_error(tmp_path: Path):
    path = write(tmp_path, lambda d: {"y": d["x"]}, {"x": spec(2)})
    with pytest.raises(BackendUnavailable, match="exported for cpu, not cuda"):
        JaxExportBackend(path, config(), Device("gpu", 0))
