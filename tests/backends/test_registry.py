"""The backend registry (backends/registry.py): every name a config may give a backend
gets that backend's whole description, and a backend shipped as a package of its own,
declared by an entry point, serves a model through a real gateway."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from backends import BackendUnavailable, Device, platform_info, platforms
from backends.platforms import BUILT_IN
from gateway.core.model_config import infer_platform
from gateway.core.placement import footprint
from gateway.core.scheduling.execution import process_only, thread_by_default

ALIASES = [(alias, p.name) for p in BUILT_IN for alias in p.aliases]


def test_the_aliases_are_those_triton_accepts():
    assert dict(ALIASES) == {
        "onnxruntime": "onnxruntime_onnx", "pytorch": "pytorch_libtorch",
        "tensorflow": "tensorflow_savedmodel",
    }  # fmt: skip


@pytest.mark.parametrize(("alias", "canonical"), ALIASES)
def test_an_alias_is_placed_and_run_as_its_canonical_name(alias, canonical, tmp_path):
    from accel_base.proto import model_config_pb2 as mc

    version = tmp_path / "1"
    version.mkdir()
    (version / "weights.bin").write_bytes(b"\0" * 10_000_000)
    config = mc.ModelConfig(name="m")
    for device in (Device("cpu"), Device("gpu", 0)):
        for in_worker in (False, True):
            assert footprint.predict(config, alias, version, device, in_worker) == (
                footprint.predict(config, canonical, version, device, in_worker)
            )
    assert platform_info(alias) is platform_info(canonical)
    assert thread_by_default(alias) == thread_by_default(canonical)
    assert process_only(alias) == process_only(canonical)


def test_an_artifact_alone_names_its_platform(tmp_path):
    for artifact, platform in [
        ("model.onnx", "onnxruntime_onnx"), ("model.pt2", "pytorch_export"),
        ("model.pt", "pytorch_libtorch"), ("model.savedmodel", "tensorflow_savedmodel"),
        ("model.jax", "jax_export"), ("model.py", "python"),
    ]:  # fmt: skip
        model = tmp_path / platform
        (model / "1").mkdir(parents=True)
        (model / "1" / artifact).write_bytes(b"")
        assert infer_platform(model) == platform


def test_an_unknown_platform_names_the_known_ones():
    with pytest.raises(BackendUnavailable) as failed:
        platform_info("caffe")
    assert "unknown platform/backend 'caffe'" in str(failed.value)
    assert "onnxruntime_onnx" in str(failed.value) and "python" in str(failed.value)
    assert set(platforms()) >= {"onnxruntime_onnx", "onnxruntime", "tvm", "remote"}


PLUGIN = '''
from backends.base import Backend, TensorSpec
from backends.platforms import Platform

PLATFORM = Platform(
    "doubler", "accel_doubler.platform", "Doubler", "", "weights.txt",
    execution="thread", expansion=1.0,
)


class Doubler(Backend):
    """y = factor * x, the factor read from the version's weights.txt."""

    def __init__(self, artifact, config, device):
        self.factor = float(open(artifact).read())

    def inputs(self):
        return [TensorSpec("x", "FP32", (-1, 4))]

    def outputs(self):
        return [TensorSpec("y", "FP32", (-1, 4))]

    def run(self, inputs, output_names):
        return {"y": inputs["x"] * self.factor}

    def unload(self):
        pass
'''


def install_plugin(site: Path, name: str = "doubler") -> None:
    """A backend package as pip would leave it: its module and its dist-info with the
    entry point (no pip run, nothing fetched)."""
    package = site / "accel_doubler"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "platform.py").write_text(PLUGIN.replace('"doubler"', f'"{name}"'))
    info = site / "accel_doubler-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accel-doubler\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[accel_gateway.backends]\ndoubler = accel_doubler.platform:PLATFORM\n"
    )


def with_site(site: Path) -> dict[str, str]:
    paths = [str(site), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_a_name_two_backends_claim_stays_with_the_built_in_one(tmp_path):
    install_plugin(tmp_path / "site", name="onnxruntime")
    code = "from backends import platform_info; print(platform_info('onnxruntime').module)"
    run = subprocess.run(
        [sys.executable, "-c", code], env=with_site(tmp_path / "site"), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "backends.onnx_runtime"
    assert "platform name 'onnxruntime' is claimed by two backends" in run.stderr
    assert "backends.onnx_runtime and accel_doubler.platform" in run.stderr


def test_a_backend_package_serves_through_a_real_gateway(tmp_path, server_factory):
    site = tmp_path / "site"
    install_plugin(site)
    model = tmp_path / "repository" / "twice"
    (model / "1").mkdir(parents=True)
    (model / "1" / "weights.txt").write_text("2.0")
    (model / "config.pbtxt").write_text(
        textwrap.dedent("""
        name: "twice"
        backend: "doubler"
        max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """)
    )
    server = server_factory(tmp_path / "repository", env=with_site(site))
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("x", [1, 4], "FP32")
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    tensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("twice", [tensor]).as_numpy("y"), 2 * x)
