"""The `opencl` backend (tinygrad on OpenCL; PoCL on this machine's CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper

pytest.importorskip("tinygrad")

from backends import BackendUnavailable, Device  # noqa: E402
from models.digits import held_out  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_conformance import load_backend  # noqa: E402
from test_tvm import write_det_model  # noqa: E402


def test_digits_through_the_gateway_with_tritonclient(gateway, example_repository):
    """digits_opencl, served by the session's gateway, answers like ONNX Runtime does on
    the same ONNX file."""
    import onnxruntime as ort

    images = held_out()[0][:20]
    client = httpclient.InferenceServerClient(gateway.http_url)
    try:
        assert client.get_model_metadata("digits_opencl")["platform"] == "opencl"
        tensor = httpclient.InferInput("pixels", list(images.shape), "FP32")
        tensor.set_data_from_numpy(images, binary_data=True)
        served = client.infer("digits_opencl", [tensor]).as_numpy("probabilities")
    finally:
        client.close()
    session = ort.InferenceSession(str(example_repository / "digits_opencl/1/model.onnx"))
    expected = session.run(["probabilities"], {"pixels": images})[0]
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)


def test_unsupported_operator_is_named(tmp_path):
    name = write_det_model(tmp_path, "opencl")
    with pytest.raises(BackendUnavailable, match="tinygrad cannot run ONNX operator.*Det"):
        load_backend(tmp_path / name)


def test_device_index_beyond_the_platform_is_a_clear_error(example_repository, tmp_path):
    import shutil

    shutil.copytree(example_repository / "digits_opencl", tmp_path / "digits_opencl")
    config = tmp_path / "digits_opencl" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "opencl_device" value: { string_value: "7" } }\n'
    )
    with pytest.raises(BackendUnavailable, match=r"opencl_device is 7.*has \d+ device"):
        load_backend(tmp_path / "digits_opencl")


def test_a_gpu_instance_is_refused_with_the_way_to_choose_a_device(example_repository):
    with pytest.raises(BackendUnavailable, match="opencl_device"):
        load_backend(example_repository / "digits_opencl", Device("gpu", 0))


def test_no_opencl_platform_is_a_clear_error(example_repository):
    """With no OpenCL driver registered (an empty vendors directory for the ICD loader),
    loading fails with a message that says what to install. In a subprocess: tinygrad
    looks for platforms once per process."""
    model_dir = example_repository / "digits_opencl"
    code = (
        "import sys, pathlib; sys.path.insert(0, 'tests/backends')\n"
        "from test_conformance import load_backend\n"
        "from backends import BackendUnavailable\n"
        "try:\n"
        f"    load_backend(pathlib.Path({str(model_dir)!r}))\n"
        "except BackendUnavailable as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "OCL_ICD_VENDORS": "/nonexistent-opencl-vendors"},
    )
    assert "no OpenCL platform is installed" in result.stdout, result.stdout + result.stderr
    assert "pocl-opencl-icd" in result.stdout


def test_outputs_that_no_kernel_computes_follow_each_request(tmp_path):
    """An output that is an input passed through (Identity) or only reshaped must carry
    each request's values, not the warm-up batch's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 4])
        for name in ("same", "relu")
    ]
    nodes = [
        helper.make_node("Identity", ["x"], ["same"]),
        helper.make_node("Relu", ["x"], ["relu"]),
    ]
    graph = helper.make_graph(nodes, "passthrough", [x], outputs)
    model_dir = tmp_path / "passthrough"
    (model_dir / "1").mkdir(parents=True)
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        model_dir / "1" / "model.onnx",
    )
    (model_dir / "config.pbtxt").write_text(
        'name: "passthrough"\nbackend: "opencl"\nmax_batch_size: 2\n'
    )
    backend = load_backend(model_dir)
    try:
        for value in (1.5, -2.5, 3.5):
            feed = np.full((2, 4), value, np.float32)
            out = backend.run({"x": feed}, ["same", "relu"])
            np.testing.assert_array_equal(out["same"], feed)
            np.testing.assert_array_equal(out["relu"], np.maximum(feed, 0))
    finally:
        backend.unload()
