"""One suite every backend must pass, in-process and through a real gateway.

Parametrized over CASES: the digits classifier served by each
backend installed here (and on a GPU, when the machine has one), with tritonclient
as the judge of what clients see.
"""

from __future__ import annotations

import gc
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from backends import Backend, BackendUnavailable, Device, backend_class, platform_info
from gateway.core.model import artifact_path, gpu_count
from gateway.core.model_config import platform_of, read_config
from models.digits import held_out

CPU = Device("cpu")


@dataclass(frozen=True)
class Case:
    digits: str  # the digits variant in the example repository
    platform: str
    framework: str  # the import that must be present
    mixed: str  # the FP16/FP32 model of the same backend

    @property
    def id(self) -> str:
        return self.digits.removeprefix("digits_")


CASES = [
    Case("digits_torch_onnx", "onnxruntime_onnx", "onnxruntime", "mixed_onnx"),
    Case("digits_torchscript", "pytorch_libtorch", "torch", "mixed_torchscript"),
    Case("digits_torch_export", "pytorch_export", "torch", "mixed_torch_export"),
    Case("digits_torch_compile", "pytorch_export", "torch", "mixed_torch_compile"),
    Case("digits_savedmodel", "tensorflow_savedmodel", "tensorflow", "mixed_savedmodel"),
    Case("digits_jax", "jax_export", "jax", "mixed_jax"),
    Case("digits_tvm", "tvm", "tvm", "mixed_tvm"),
    Case("digits_opencl", "opencl", "tinygrad", "mixed_opencl"),
]


def case_params() -> list:
    """pytest params, each marked skip when its framework is missing."""
    params = []
    for case in CASES:
        missing = importlib.util.find_spec(case.framework) is None
        marks = pytest.mark.skip(reason=f"{case.framework} is not installed") if missing else ()
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


def load_backend(model_dir: Path, device: Device = CPU) -> Backend:
    """Version 1 of the model, loaded the way the gateway loads it (config included)."""
    config = read_config(model_dir)
    platform = platform_of(config)
    artifact = artifact_path(model_dir, 1, config, platform_info(platform).artifact)
    return backend_class(platform)(artifact, config, device)


DEVICES = [Device("cpu")] + ([Device("gpu", 0)] if gpu_count() else [])
MAX_BATCH = 64


@pytest.fixture(scope="module", params=case_params())
def case(request) -> Case:
    return request.param


@pytest.fixture(scope="module", params=DEVICES, ids=str)
def device(request) -> Device:
    return request.param


@pytest.fixture(scope="module")
def digits_backend(case, device, example_repository):
    backend = load_backend(example_repository / case.digits, device)
    yield backend
    backend.unload()


@pytest.fixture(scope="module")
def reference_top1(example_repository) -> np.ndarray:
    """Top-1 of the PyTorch reference (the TorchScript export) on the held-out set."""
    torch = pytest.importorskip("torch")
    module = torch.jit.load(str(example_repository / "digits_torchscript" / "1" / "model.pt"))
    with torch.inference_mode():
        probabilities = module(torch.from_numpy(held_out()[0])).numpy()
    return probabilities.argmax(axis=1)


@pytest.fixture(scope="module")
def http(gateway):
    client = httpclient.InferenceServerClient(gateway.http_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(gateway):
    client = grpcclient.InferenceServerClient(gateway.grpc_url)
    yield client
    client.close()


def classify_through_gateway(client, model: str, images: np.ndarray) -> np.ndarray:
    """Probabilities for every image, sent in requests of at most max_batch_size rows."""
    rows = []
    for start in range(0, len(images), MAX_BATCH):
        chunk = images[start : start + MAX_BATCH]
        tensor = grpcclient.InferInput("pixels", list(chunk.shape), "FP32")
        tensor.set_data_from_numpy(chunk)
        rows.append(client.infer(model, [tensor]).as_numpy("probabilities"))
    return np.concatenate(rows)


# --- in-process -------------------------------------------------------------------


def test_metadata_matches_the_artifact(digits_backend):
    assert [(s.name, s.datatype, s.shape) for s in digits_backend.inputs()] == [
        ("pixels", "FP32", (-1, 64))
    ]
    assert [(s.name, s.datatype, s.shape) for s in digits_backend.outputs()] == [
        ("probabilities", "FP32", (-1, 10))
    ]


def test_batch_of_one_and_batch_of_n_give_the_same_rows(digits_backend):
    images = held_out()[0][:13]  # 13: not a bucket size, so compiled backends pad it
    batched = digits_backend.run({"pixels": images}, ["probabilities"])["probabilities"]
    assert batched.shape == (13, 10) and batched.dtype == np.float32
    for i, image in enumerate(images):
        single = digits_backend.run({"pixels": image[None]}, ["probabilities"])["probabilities"]
        np.testing.assert_allclose(single[0], batched[i], rtol=1e-5, atol=1e-6)


def test_fp16_and_fp32_tensors(case, device, example_repository):
    backend = load_backend(example_repository / case.mixed, device)
    try:
        rng = np.random.default_rng(0)
        x16 = rng.standard_normal((3, 4)).astype(np.float16)
        x32 = rng.standard_normal((3, 4)).astype(np.float32)
        out = backend.run({"x16": x16, "x32": x32}, ["y16", "y32"])
    finally:
        backend.unload()
    assert out["y16"].dtype == np.float16 and out["y32"].dtype == np.float32
    np.testing.assert_array_equal(out["y16"], x16 * np.float16(2))
    np.testing.assert_allclose(out["y32"], x32 * 2 + x16.astype(np.float32), rtol=1e-6)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_unload_frees_the_model(case, device, example_repository):
    """Loading and unloading again and again must not grow the process (measured RSS)."""
    images = held_out()[0][:8]

    def cycle() -> int:
        backend = load_backend(example_repository / case.digits, device)
        backend.run({"pixels": images}, ["probabilities"])
        held = backend.memory_bytes()
        backend.unload()
        del backend
        gc.collect()
        return held

    assert cycle() > 0  # the first cycle also warms the framework's own caches
    before = _rss_bytes()
    for _ in range(4):
        cycle()
    growth = _rss_bytes() - before
    assert growth < 8 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB over 4 load/unload cycles"


def test_gpu_asked_for_without_one_is_a_clear_error(case, example_repository):
    if gpu_count():
        pytest.skip("this machine has a GPU")
    with pytest.raises(BackendUnavailable, match="GPU|gpu|cuda|CUDA"):
        load_backend(example_repository / case.digits, Device("gpu", 0))


# --- through the gateway ------------------------------------------------------------


def test_gateway_metadata_matches_the_artifact(case, http):
    metadata = http.get_model_metadata(case.digits)
    assert metadata["platform"] == case.platform
    assert metadata["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}]
    assert metadata["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}]


@pytest.mark.parametrize(
    ("shape", "datatype", "expected"),
    [
        ([1, 63], "FP32", "unexpected shape for input 'pixels'"),
        ([1, 64], "FP64", "pixels.*FP32"),
    ],
    ids=["wrong-shape", "wrong-datatype"],
)
def test_wrong_input_gets_the_v2_error(case, http, shape, datatype, expected):
    tensor = httpclient.InferInput("pixels", shape, datatype)
    tensor.set_data_from_numpy(
        np.zeros(shape, dtype=np.float32 if datatype == "FP32" else np.float64)
    )
    with pytest.raises(InferenceServerException, match=expected) as caught:
        http.infer(case.digits, [tensor])
    assert caught.value.status() == "400"


def test_accuracy_through_the_gateway_matches_the_builder(case, grpc, example_repository):
    from models.accuracy import builder_accuracy

    images, labels = held_out()
    predictions = classify_through_gateway(grpc, case.digits, images).argmax(axis=1)
    served = float(np.mean(predictions == labels))
    built = builder_accuracy(example_repository / case.digits)
    assert abs(served - built) <= 1 / len(labels), (served, built)


def test_agrees_with_the_pytorch_reference(case, grpc, reference_top1):
    predictions = classify_through_gateway(grpc, case.digits, held_out()[0]).argmax(axis=1)
    agreement = float(np.mean(predictions == reference_top1))
    assert agreement >= 0.99, f"{case.digits} agrees with PyTorch on {agreement:.2%} only"


# --- compiled backends against ONNX Runtime on the same file --------------------------

ONNX_BACKENDS = [case for case in case_params() if case.values[0].platform in ("tvm", "opencl")]


@pytest.mark.parametrize("case", ONNX_BACKENDS)
@pytest.mark.parametrize(("family", "input_name", "output_name"), [
    ("digits", "pixels", "probabilities"),
    ("mlp", "INPUT0", "OUTPUT0"),
], ids=["digits", "mlp"])  # fmt: skip
def test_same_outputs_as_onnx_runtime(case, device, family, input_name, output_name,
                                      example_repository):  # fmt: skip
    """Batch 1 and batch N (a bucket, and a size padded up to one) within float tolerance of
    ONNX Runtime running the very same model.onnx."""
    import onnxruntime as ort

    model_dir = example_repository / f"{family}_{case.platform}"
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"))
    features = session.get_inputs()[0].shape[1]
    images = np.random.default_rng(7).random((64, features), dtype=np.float32)
    backend = load_backend(model_dir, device)
    try:
        for rows in (1, 13, 64):
            got = backend.run({input_name: images[:rows]}, [output_name])[output_name]
            expected = session.run([output_name], {input_name: images[:rows]})[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=f"{rows} rows")
    finally:
        backend.unload()
