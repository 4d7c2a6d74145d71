"""The unmodified tritonclient (HTTP and gRPC) against a real gateway process."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models.digits import held_out

PROTOCOLS = ("http", "grpc")


@pytest.fixture(params=PROTOCOLS)
def protocol(request) -> str:
    return request.param


@pytest.fixture
def client(gateway, protocol):
    if protocol == "http":
        client = httpclient.InferenceServerClient(gateway.http_url)
    else:
        client = grpcclient.InferenceServerClient(gateway.grpc_url)
    yield client
    client.close()


def module(protocol: str):
    return httpclient if protocol == "http" else grpcclient


def simple_inputs(protocol: str, batch: int = 1, binary: bool = True):
    mod = module(protocol)
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 3, dtype=np.int32)
    inputs = [
        mod.InferInput("INPUT0", [batch, 16], "INT32"),
        mod.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    for tensor, data in zip(inputs, (a, b), strict=True):
        if protocol == "http":
            tensor.set_data_from_numpy(data, binary_data=binary)
        else:
            tensor.set_data_from_numpy(data)
    return inputs, a, b


def test_health_and_server_metadata(client, protocol):
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    if protocol == "grpc":
        name, extensions = metadata.name, list(metadata.extensions)
    else:
        name, extensions = metadata["name"], metadata["extensions"]
    assert name == "accel-gateway"
    assert {"binary_tensor_data", "statistics", "model_configuration", "model_repository"} <= set(
        extensions
    )


def test_model_metadata_and_config(client, protocol):
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "7")
    metadata = client.get_model_metadata("simple")
    config = client.get_model_config("simple")
    if protocol == "grpc":
        inputs = [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs]
        max_batch_size = config.config.max_batch_size
        platform = config.config.platform
    else:
        inputs = [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]]
        max_batch_size = config["max_batch_size"]
        platform = config["platform"]
        assert config["input"][0]["dims"] == [16]  # numbers, as Triton writes them
    assert inputs == [("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])]
    assert max_batch_size == 8
    assert platform == "onnxruntime_onnx"


def test_config_completed_from_onnx(client, protocol):
    # digits/config.pbtxt has no input/output sections; the server fills them in.
    config = client.get_model_config("digits")
    if protocol == "grpc":
        inputs = [(t.name, list(t.dims)) for t in config.config.input]
    else:
        inputs = [(t["name"], t["dims"]) for t in config["input"]]
    assert inputs == [("pixels", [64])]


@pytest.mark.parametrize(("protocol", "binary"), [("http", True), ("http", False), ("grpc", True)])
@pytest.mark.parametrize("batch", [1, 5])
def test_infer_simple(client, protocol, binary, batch):
    inputs, a, b = simple_inputs(protocol, batch, binary)
    result = client.infer("simple", inputs, request_id="req-42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (response.id if protocol == "grpc" else response["id"]) == "req-42"


@pytest.mark.parametrize("binary_output", [True, False])
def test_requested_outputs(client, protocol, binary_output):
    mod = module(protocol)
    inputs, a, b = simple_inputs(protocol)
    if protocol == "http":
        outputs = [mod.InferRequestedOutput("OUTPUT1", binary_data=binary_output)]
    else:
        outputs = [mod.InferRequestedOutput("OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None


IDENTITY_DATA = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 7, 255]], dtype=np.uint8),
    "UINT16": np.array([[0, 7, 65535]], dtype=np.uint16),
    "UINT32": np.array([[0, 7, 2**32 - 1]], dtype=np.uint32),
    "UINT64": np.array([[0, 7, 2**64 - 1]], dtype=np.uint64),
    "INT8": np.array([[-128, 0, 127]], dtype=np.int8),
    "INT16": np.array([[-32768, 0, 32767]], dtype=np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1]], dtype=np.int32),
    "INT64": np.array([[-(2**63), 0, 2**63 - 1]], dtype=np.int64),
    "FP16": np.array([[-1.5, 0.0, 65504.0]], dtype=np.float16),
    "FP32": np.array([[-1.5, np.nan, np.inf]], dtype=np.float32),
    "FP64": np.array([[-1.5, 1e-300, 1e300]], dtype=np.float64),
    "BF16": np.array([[-1.5, 0.0, 3.0]], dtype=ml_dtypes.bfloat16),
    "BYTES": np.array([[b"hello", b"", "grüße".encode()]], dtype=np.object_),
}


# JSON tensors exist only over HTTP, and BF16 travels only in binary form.
IDENTITY_CASES = [
    (protocol, datatype, binary)
    for protocol in PROTOCOLS
    for datatype in IDENTITY_DATA
    for binary in (True, False)
    if binary or (protocol == "http" and datatype != "BF16")
]


@pytest.mark.parametrize(("protocol", "datatype", "binary"), IDENTITY_CASES)
def test_identity_every_datatype(client, protocol, datatype, binary):
    mod = module(protocol)
    data = np.repeat(IDENTITY_DATA[datatype], 2, axis=0)  # batch of 2
    tensor = mod.InferInput("INPUT0", list(data.shape), datatype)
    if protocol == "http":
        tensor.set_data_from_numpy(data, binary_data=binary)
        outputs = [mod.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    else:
        tensor.set_data_from_numpy(data)
        outputs = None
    result = client.infer(f"identity_{datatype.lower()}", [tensor], outputs=outputs)
    out = result.as_numpy("OUTPUT0")
    assert out.shape == data.shape
    if datatype == "BF16":
        np.testing.assert_array_equal(out.view(np.uint16), data.view(np.uint16))
    elif datatype == "BYTES":
        # tritonclient hands JSON BYTES back as str, binary ones as bytes.
        expected = data if binary else np.vectorize(bytes.decode, otypes=[object])(data)
        assert out.tolist() == expected.tolist()
    else:
        np.testing.assert_array_equal(out, data)


def test_digits_accuracy_through_gateway(client, protocol):
    mod = module(protocol)
    images, labels = held_out()
    correct = 0
    for start in range(0, len(images), 64):
        batch = images[start : start + 64]
        tensor = mod.InferInput("pixels", list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch)
        probabilities = client.infer("digits", [tensor]).as_numpy("probabilities")
        correct += int((probabilities.argmax(axis=1) == labels[start : start + 64]).sum())
    assert correct / len(images) >= 0.95


def expect_error(call, status_http: str, status_grpc: str, *fragments: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    error = info.value
    assert str(error.status()) in (status_http, status_grpc), error
    for fragment in fragments:
        assert fragment in error.message(), error.message()
    return error.message()


def test_unknown_model(client, protocol):
    inputs, _, _ = simple_inputs(protocol)
    expect_error(
        lambda: client.infer("no_such_model", inputs),
        "404",
        "StatusCode.NOT_FOUND",
        "no_such_model",
    )
    expect_error(
        lambda: client.get_model_metadata("no_such_model"),
        "404",
        "StatusCode.NOT_FOUND",
        "no_such_model",
    )


def test_bad_shape(client, protocol):
    mod = module(protocol)
    data = np.zeros((1, 15), dtype=np.int32)
    inputs = [
        mod.InferInput("INPUT0", [1, 15], "INT32"),
        mod.InferInput("INPUT1", [1, 15], "INT32"),
    ]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    expect_error(
        lambda: client.infer("simple", inputs),
        "400",
        "StatusCode.INVALID_ARGUMENT",
        "INPUT0",
        "simple",
        "[-1,16]",
        "[1,15]",
    )


def test_batch_over_max_batch_size(client, protocol):
    inputs, _, _ = simple_inputs(protocol, batch=9)
    expect_error(
        lambda: client.infer("simple", inputs),
        "400",
        "StatusCode.INVALID_ARGUMENT",
        "batch size 9",
        "max_batch_size",
    )


def test_bad_datatype(client, protocol):
    mod = module(protocol)
    data = np.zeros((1, 16), dtype=np.float32)
    inputs = [mod.InferInput("INPUT0", [1, 16], "FP32"), mod.InferInput("INPUT1", [1, 16], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    expect_error(
        lambda: client.infer("simple", inputs),
        "400",
        "StatusCode.INVALID_ARGUMENT",
        "INPUT0",
        "expected datatype INT32, got FP32",
    )


def test_statistics_count_requests(client, protocol):
    def counts():
        stats = client.get_inference_statistics("identity_int8")
        if protocol == "grpc":
            entry = stats.model_stats[0]
            return entry.inference_stats.success.count, entry.execution_count
        entry = stats["model_stats"][0]
        return entry["inference_stats"]["success"]["count"], entry["execution_count"]

    mod = module(protocol)
    before = counts()
    for _ in range(3):
        tensor = mod.InferInput("INPUT0", [1, 4], "INT8")
        tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.int8))
        client.infer("identity_int8", [tensor])
    after = counts()
    assert after[0] - before[0] == 3
    assert after[1] - before[1] == 3


def test_repository_index(client, protocol):
    index = client.get_model_repository_index()
    if protocol == "grpc":
        rows = {(m.name, m.version, m.state) for m in index.models}
    else:
        rows = {(m["name"], m["version"], m["state"]) for m in index}
    assert ("simple", "1", "READY") in rows
    assert ("digits", "1", "READY") in rows


def test_load_refused_outside_explicit_mode(client, protocol):
    expect_error(
        lambda: client.load_model("simple"), "403", "StatusCode.PERMISSION_DENIED", "explicit"
    )


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_and_responses(client, protocol, algorithm):
    inputs, a, b = simple_inputs(protocol)
    if protocol == "http":
        options = {
            "request_compression_algorithm": algorithm,
            "response_compression_algorithm": algorithm,
        }
    else:
        options = {"compression_algorithm": algorithm}
    result = client.infer("simple", inputs, **options)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
