"""What is particular to the PyTorch backends: file safety, tensor mapping, batch limits."""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

torch = pytest.importorskip("torch")

from accel_base.errors import Internal  # noqa: E402
from accel_base.proto import model_config_pb2 as mc  # noqa: E402
from backends import BackendUnavailable, Device  # noqa: E402
from backends.torch_common import positions  # noqa: E402
from backends.torch_export import TorchExportBackend  # noqa: E402
from backends.torchscript import TorchScriptBackend  # noqa: E402


class Doubler(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": x * 2}


def config(platform: str, text: str = "") -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" platform: "{platform}" {text}', mc.ModelConfig())


TENSORS = (
    'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ] '
    'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]'
)


def test_positions_follow_forward_names_then_index_suffixes_then_config():
    assert positions(["b", "a"], ["a", "b"]) == {"a": 0, "b": 1}
    assert positions(["OUTPUT__1", "OUTPUT__0"]) == {"OUTPUT__0": 0, "OUTPUT__1": 1}
    assert positions(["OUTPUT__2"]) == {"OUTPUT__2": 2}  # only the third result declared
    assert positions(["y", "z"]) == {"y": 0, "z": 1}


class Halver(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": (x / 2).half()}


def test_torchscript_output_datatype_must_match_the_config(tmp_path: Path):
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(Halver()), path)
    backend = TorchScriptBackend(path, config("pytorch_libtorch", TENSORS), Device())
    with pytest.raises(Internal, match="output 'y' is torch.float16 but the config declares"):
        backend.run({"x": np.ones((1, 4), np.float32)}, ["y"])
    backend.unload()


def test_pickled_module_is_refused_as_torchscript(tmp_path: Path):
    path = tmp_path / "model.pt"
    torch.save(Doubler(), path)  # a full pickle: loading it could run any code
    with pytest.raises(BackendUnavailable, match="not a TorchScript archive"):
        TorchScriptBackend(path, config("pytorch_libtorch", TENSORS), Device())


def test_torchscript_needs_declared_tensors(tmp_path: Path):
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(Doubler()), path)
    with pytest.raises(BackendUnavailable, match="declare every input and output"):
        TorchScriptBackend(path, config("pytorch_libtorch"), Device())


def test_torchscript_dict_result_is_read_by_name(tmp_path: Path):
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(Doubler()), path)
    backend = TorchScriptBackend(path, config("pytorch_libtorch", TENSORS), Device())
    x = np.arange(4, dtype=np.float32)[None]
    x.flags.writeable = False  # as request buffers arrive
    np.testing.assert_array_equal(backend.run({"x": x}, ["y"])["y"], x * 2)
    backend.unload()


DISABLE = "DISABLE_OPTIMIZED_EXECUTION"


@pytest.mark.parametrize(("value", "optimized"), [(None, True), ("true", False), ("no", True)])
def test_torchscript_disable_optimized_execution(tmp_path: Path, monkeypatch, value, optimized):
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(Doubler()), path)
    text = TENSORS
    if value is not None:
        text += f' parameters {{ key: "{DISABLE}" value {{ string_value: "{value}" }} }}'
    backend = TorchScriptBackend(path, config("pytorch_libtorch", text), Device())
    seen = []
    real = torch.jit.optimized_execution

    def spy(should_optimize: bool):
        seen.append(should_optimize)
        return real(should_optimize)

    monkeypatch.setattr(torch.jit, "optimized_execution", spy)
    backend.run({"x": np.ones((1, 4), np.float32)}, ["y"])
    assert seen == [optimized]
    assert torch._C._get_graph_executor_optimize()  # the process's setting is left as it was
    backend.unload()


def test_torchscript_disable_optimized_execution_must_be_a_boolean(tmp_path: Path):
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(Doubler()), path)
    text = (
        TENSORS
        + ' parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "maybe" } }'
    )
    with pytest.raises(
        BackendUnavailable, match="DISABLE_OPTIMIZED_EXECUTION must be true or false"
    ):
        TorchScriptBackend(path, config("pytorch_libtorch", text), Device())


class _Touch:
    """A pickle that creates a file when unpickled: what an exploit would do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def _rewrite_archive(source: Path, target: Path, edit) -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            new.writestr(item, edit(item.filename, data))
        return


def test_export_archive_with_a_pickled_object_is_refused_before_loading(tmp_path: Path):
    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(Doubler(), (torch.zeros(2, 4),)), clean)
    marker = tmp_path / "PWNED"
    crafted = tmp_path / "model.pt2"
    prefix = zipfile.ZipFile(clean).namelist()[0].split("/")[0]

    def edit(name: str, data: bytes) -> bytes:
        if name.endswith("data/constants/model_constants_config.json"):
            return json.dumps({"config": {"obj": {"path_name": "opaque_obj_0"}}}).encode()
        return data

    _rewrite_archive(clean, crafted, edit)
    with zipfile.ZipFile(crafted, "a") as archive:
        archive.writestr(f"{prefix}/data/constants/opaque_obj_0", pickle.dumps(_Touch(marker)))
    with pytest.raises(BackendUnavailable, match="refused because it holds a pickled object"):
        TorchExportBackend(crafted, config("pytorch_export"), Device())
    assert not marker.exists()


def test_export_archive_with_native_code_is_refused(tmp_path: Path):
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(Doubler(), (torch.zeros(2, 4),)), path)
    prefix = zipfile.ZipFile(path).namelist()[0].split("/")[0]
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(f"{prefix}/data/aotinductor/model/model.so", b"\x7fELF")
    with pytest.raises(BackendUnavailable, match="AOTInductor package"):
        TorchExportBackend(path, config("pytorch_export"), Device())


def test_export_with_fixed_batch_is_refused_for_a_batched_config(tmp_path: Path):
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(Doubler(), (torch.zeros(2, 4),)), path)
    with pytest.raises(BackendUnavailable, match="takes batches of at most 2 but max_batch"):
        TorchExportBackend(path, config("pytorch_export", "max_batch_size: 8"), Device())


def test_export_batch_limit_below_max_batch_size_is_refused(tmp_path: Path):
    path = tmp_path / "model.pt2"
    batch = torch.export.Dim("batch", min=1, max=4)
    program = torch.export.export(Doubler(), (torch.zeros(2, 4),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, path)
    with pytest.raises(BackendUnavailable, match="at most 4 but max_batch_size is 8"):
        TorchExportBackend(path, config("pytorch_export", "max_batch_size: 8"), Device())
    backend = TorchExportBackend(path, config("pytorch_export", "max_batch_size: 4"), Device())
    assert [(s.name, s.shape) for s in backend.inputs()] == [("x", (-1, 4))]
    assert [(s.name, s.shape) for s in backend.outputs()] == [("y", (-1, 4))]
    backend.unload()


def test_unknown_compile_mode_lists_the_choices(tmp_path: Path):
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(Doubler(), (torch.zeros(2, 4),)), path)
    cfg = config(
        "pytorch_export", 'parameters { key: "compile_mode" value: { string_value: "fast" } }'
    )
    with pytest.raises(BackendUnavailable, match="eager, default, reduce-overhead, max-autotune"):
        TorchExportBackend(path, cfg, Device())


def test_not_an_export_archive_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "model.pt2"
    path.write_bytes(b"not a zip")
    with pytest.raises(BackendUnavailable, match="cannot load model.pt2 as a torch.export"):
        TorchExportBackend(path, config("pytorch_export"), Device())


class SumAndDifference(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


def test_export_takes_tritons_index_names_by_position(tmp_path: Path):
    """A config written for Triton's PyTorch backend (INPUT__0, OUTPUT__1) fits a .pt2
    whose forward calls its arguments something else."""
    path = tmp_path / "model.pt2"
    example = (torch.zeros(1, 4), torch.zeros(1, 4))
    torch.export.save(torch.export.export(SumAndDifference(), example), path)
    text = (
        'input [ { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1, 4 ] },'
        ' { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]'
        ' output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]'
    )
    backend = TorchExportBackend(path, config("pytorch_export", text), Device())
    assert [s.name for s in backend.inputs()] == ["INPUT__0", "INPUT__1"]
    assert [s.name for s in backend.outputs()] == ["OUTPUT__0", "OUTPUT__1"]
    a, b = np.full((1, 4), 5, np.float32), np.ones((1, 4), np.float32)
    result = backend.run({"INPUT__0": a, "INPUT__1": b}, ["OUTPUT__1"])
    np.testing.assert_array_equal(result["OUTPUT__1"], a - b)
    backend.unload()
