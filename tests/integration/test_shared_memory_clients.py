"""System shared memory with the unmodified tritonclient (HTTP and gRPC) and its
tritonclient.utils.shared_memory helpers, against real gateway processes."""

from __future__ import annotations

import os
import queue
import uuid

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import (
    InferenceServerException,
    serialize_byte_tensor,
    serialized_byte_size,
)

CODES = {  # our error class -> (HTTP status, gRPC status) as tritonclient reports them
    "invalid": ("400", "StatusCode.INVALID_ARGUMENT"),
    "denied": ("403", "StatusCode.PERMISSION_DENIED"),
    "unimplemented": ("501", "StatusCode.UNIMPLEMENTED"),
}


@pytest.fixture(params=["http", "grpc"])
def protocol(request) -> str:
    return request.param


def module(protocol: str):
    return httpclient if protocol == "http" else grpcclient


def connect(server, protocol: str):
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


@pytest.fixture
def client(shm_gateway, protocol):
    client = connect(shm_gateway, protocol)
    yield client
    client.unregister_system_shared_memory()  # whatever a test left registered
    client.close()


@pytest.fixture
def regions():
    """Create shm regions as a client does: make(name, size) -> (handle, key); all
    destroyed (unlinked from /dev/shm) when the test ends."""
    handles = []

    def make(name: str, size: int):
        key = f"/gw-{name}-{uuid.uuid4().hex[:8]}"
        handles.append(shm.create_shared_memory_region(name, key, size))
        return handles[-1], key

    yield make
    for handle in handles:
        shm.destroy_shared_memory_region(handle)


def status(client, protocol: str) -> dict[str, tuple[str, int, int]]:
    reply = client.get_system_shared_memory_status()
    if protocol == "http":
        return {r["name"]: (r["key"], r["offset"], r["byte_size"]) for r in reply}
    return {name: (r.key, r.offset, r.byte_size) for name, r in reply.regions.items()}


def extensions(client, protocol: str) -> list[str]:
    metadata = client.get_server_metadata()
    return list(metadata.extensions) if protocol == "grpc" else metadata["extensions"]


def expect_error(call, protocol: str, code: str, *fragments: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        call()
    http, grpc = CODES[code]
    assert str(info.value.status()) == (http if protocol == "http" else grpc), info.value
    for fragment in fragments:
        assert fragment in info.value.message(), info.value.message()


def shm_input(protocol, name, shape, datatype, region, size, offset=0):
    tensor = module(protocol).InferInput(name, shape, datatype)
    tensor.set_shared_memory(region, size, offset)
    return tensor


def shm_output(protocol, name, region, size, offset=0):
    output = module(protocol).InferRequestedOutput(name)
    output.set_shared_memory(region, size, offset)
    return output


def test_advertised_registered_and_unregistered(client, protocol, regions):
    assert "system_shared_memory" in extensions(client, protocol)
    assert "cuda_shared_memory" not in extensions(client, protocol)
    _, key = regions("status_a", 4096)
    client.register_system_shared_memory("status_a", key, 1024, offset=2048)
    client.register_system_shared_memory("status_b", key, 512)
    assert status(client, protocol) == {"status_a": (key, 2048, 1024), "status_b": (key, 0, 512)}
    reply = client.get_system_shared_memory_status("status_a")
    assert len(reply if protocol == "http" else reply.regions) == 1
    client.unregister_system_shared_memory("status_a")
    assert list(status(client, protocol)) == ["status_b"]
    client.unregister_system_shared_memory()
    assert status(client, protocol) == {}


def test_simple_inputs_and_outputs_in_shared_memory(client, protocol, regions):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs, input_key = regions("simple_in", 128)
    outputs, output_key = regions("simple_out", 256)
    shm.set_shared_memory_region(inputs, [a, b])  # INPUT1 at byte 64
    client.register_system_shared_memory("simple_in", input_key, 128)
    client.register_system_shared_memory("simple_out", output_key, 256)
    result = client.infer(
        "simple",
        [
            shm_input(protocol, "INPUT0", [1, 16], "INT32", "simple_in", 64),
            shm_input(protocol, "INPUT1", [1, 16], "INT32", "simple_in", 64, offset=64),
        ],
        outputs=[
            shm_output(protocol, "OUTPUT0", "simple_out", 64),
            shm_output(protocol, "OUTPUT1", "simple_out", 128, offset=128),
        ],
    )
    sums = shm.get_contents_as_numpy(outputs, np.int32, [1, 16])
    differences = shm.get_contents_as_numpy(outputs, np.int32, [1, 16], offset=128)
    np.testing.assert_array_equal(sums, a + b)
    np.testing.assert_array_equal(differences, a - b)
    # The response describes the outputs but carries no data, as Triton's does.
    output = result.get_output("OUTPUT0")
    if protocol == "http":
        assert output == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    else:
        assert (output.datatype, list(output.shape)) == ("INT32", [1, 16])
        assert result.get_response().raw_output_contents == [b"", b""]


def test_a_client_that_truncates_its_regions_gets_400s_and_the_server_goes_on(
    client, protocol, regions
):
    """The server maps regions: a mapping touched past the end of its shrunk object
    raises SIGBUS, which would kill the server. Inputs and outputs alike are refused
    instead, and the same regions serve again once the objects are whole."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs, input_key = regions("cut_in", 128)
    outputs, output_key = regions("cut_out", 128)
    shm.set_shared_memory_region(inputs, [a, a])
    client.register_system_shared_memory("cut_in", input_key, 128)
    client.register_system_shared_memory("cut_out", output_key, 128)

    def infer():
        return client.infer(
            "simple",
            [shm_input(protocol, "INPUT0", [1, 16], "INT32", "cut_in", 64),
             shm_input(protocol, "INPUT1", [1, 16], "INT32", "cut_in", 64, offset=64)],
            outputs=[shm_output(protocol, "OUTPUT0", "cut_out", 64),
                     shm_output(protocol, "OUTPUT1", "cut_out", 64, offset=64)],
        )  # fmt: skip

    os.truncate("/dev/shm" + input_key, 0)
    expect_error(infer, protocol, "invalid", "cut_in", "was it truncated?")
    os.truncate("/dev/shm" + input_key, 128)  # whole again, its bytes now zeros
    os.truncate("/dev/shm" + output_key, 0)
    expect_error(infer, protocol, "invalid", "cut_out", "was it truncated?")
    os.truncate("/dev/shm" + output_key, 128)
    shm.set_shared_memory_region(inputs, [a, a])
    assert client.is_server_live()
    infer()
    np.testing.assert_array_equal(shm.get_contents_as_numpy(outputs, np.int32, [1, 16]), a + a)


def test_shared_memory_beside_ordinary_tensors(client, protocol, regions):
    """One input and one output in shm, the others on the wire (gRPC raw contents then
    hold only the inputs that are not in shared memory)."""
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    handle, key = regions("mixed", 256)
    shm.set_shared_memory_region(handle, [a])
    client.register_system_shared_memory("mixed", key, 256)
    wire = module(protocol).InferInput("INPUT1", [2, 16], "INT32")
    wire.set_data_from_numpy(b)
    result = client.infer(
        "simple",
        [shm_input(protocol, "INPUT0", [2, 16], "INT32", "mixed", 128), wire],
        outputs=[
            shm_output(protocol, "OUTPUT0", "mixed", 128, offset=128),
            module(protocol).InferRequestedOutput("OUTPUT1"),
        ],
    )
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [2, 16], 128), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_bytes_both_ways(client, protocol, regions):
    # UTF-8 text: the ONNX identity model behind it holds strings.
    data = np.array([[b"shared", b"", "\u00e9t\u00e9".encode(), b"a\tb"]], dtype=np.object_)
    serialized = serialize_byte_tensor(data)
    size = serialized_byte_size(serialized)
    inputs, input_key = regions("bytes_in", size)
    outputs, output_key = regions("bytes_out", 1024)
    shm.set_shared_memory_region(inputs, [serialized])
    client.register_system_shared_memory("bytes_in", input_key, size)
    client.register_system_shared_memory("bytes_out", output_key, 1024)
    result = client.infer(
        "identity_bytes",
        [shm_input(protocol, "INPUT0", [1, 4], "BYTES", "bytes_in", size)],
        outputs=[shm_output(protocol, "OUTPUT0", "bytes_out", 1024)],
    )
    output = result.get_output("OUTPUT0")
    shape = output["shape"] if protocol == "http" else list(output.shape)
    assert shape == [1, 4]
    back = shm.get_contents_as_numpy(outputs, np.object_, shape)
    assert back.tolist() == data.tolist()


def test_stream_infer_with_shared_memory(shm_gateway, regions):
    client = grpcclient.InferenceServerClient(shm_gateway.grpc_url)
    data = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    handle, key = regions("stream", 1024)
    shm.set_shared_memory_region(handle, [data])
    client.register_system_shared_memory("stream", key, 1024)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(3):  # the input is bytes 0..255; answer i goes to 256 * (i + 1)
            client.async_stream_infer(
                "identity_fp32",
                [shm_input("grpc", "INPUT0", [1, 64], "FP32", "stream", 256)],
                outputs=[shm_output("grpc", "OUTPUT0", "stream", 256, offset=256 * (i + 1))],
                request_id=str(i),
            )
        answers = [results.get(timeout=10) for _ in range(3)]
    finally:
        client.stop_stream()
        client.unregister_system_shared_memory()
        client.close()
    assert [error for _, error in answers] == [None] * 3
    assert sorted(result.get_response().id for result, _ in answers) == ["0", "1", "2"]
    for i in range(3):
        got = shm.get_contents_as_numpy(handle, np.float32, [1, 64], offset=256 * (i + 1))
        np.testing.assert_array_equal(got, data)


def test_bad_region_requests(client, protocol, regions):
    handle, key = regions("bad", 256)
    shm.set_shared_memory_region(handle, [np.zeros((1, 16), dtype=np.int32)])
    client.register_system_shared_memory("bad", key, 256)
    expect_error(
        lambda: client.register_system_shared_memory("bad", key, 256),
        protocol, "invalid", "'bad' is already registered",
    )  # fmt: skip
    expect_error(
        lambda: client.register_system_shared_memory("other", key, 300),
        protocol, "invalid", "beyond the 256 bytes",
    )  # fmt: skip
    expect_error(
        lambda: client.register_system_shared_memory("other", "/gw-no-such-key", 8),
        protocol, "invalid", "cannot open shared-memory key '/gw-no-such-key'",
    )  # fmt: skip
    expect_error(
        lambda: client.register_system_shared_memory("other", "/../etc/passwd", 8),
        protocol, "invalid", "not a POSIX shm name",
    )  # fmt: skip
    expect_error(
        lambda: client.get_system_shared_memory_status("other"),
        protocol, "invalid", "no system shared memory region 'other'",
    )  # fmt: skip

    def infer(inputs, outputs=None):
        return lambda: client.infer("simple", inputs, outputs=outputs)

    wire = module(protocol).InferInput("INPUT1", [1, 16], "INT32")
    wire.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    expect_error(
        infer([shm_input(protocol, "INPUT0", [1, 16], "INT32", "nowhere", 64), wire]),
        protocol, "invalid", "input 'INPUT0'", "no system shared memory region 'nowhere'",
    )  # fmt: skip
    expect_error(
        infer([shm_input(protocol, "INPUT0", [1, 16], "INT32", "bad", 60), wire]),
        protocol, "invalid", "shared_memory_byte_size is 60 but INT32 shape [1, 16] needs 64",
    )  # fmt: skip
    expect_error(
        infer([shm_input(protocol, "INPUT0", [1, 16], "INT32", "bad", 64, offset=224), wire]),
        protocol, "invalid", "shared_memory_offset 224 + shared_memory_byte_size 64 is beyond",
    )  # fmt: skip
    good = shm_input(protocol, "INPUT0", [1, 16], "INT32", "bad", 64)
    expect_error(
        infer([good, wire], [shm_output(protocol, "OUTPUT0", "bad", 32, offset=64)]),
        protocol, "invalid", "output 'OUTPUT0' needs 64 bytes", "region 'bad' has 32",
    )  # fmt: skip
    expect_error(
        infer([good, wire], [shm_output(protocol, "OUTPUT0", "nowhere", 64)]),
        protocol, "invalid", "output 'OUTPUT0'", "no system shared memory region 'nowhere'",
    )  # fmt: skip
    expect_error(
        lambda: client.register_cuda_shared_memory("cuda", b"\0" * 64, 0, 64),
        protocol, "unimplemented", "CUDA shared memory is not supported",
    )  # fmt: skip
    # The server is still well and the region still usable.
    result = client.infer("simple", [good, wire])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.zeros((1, 16), np.int32))


def test_refused_and_not_advertised_without_the_flag(gateway, protocol, regions):
    client = connect(gateway, protocol)
    try:
        assert "system_shared_memory" not in extensions(client, protocol)
        _, key = regions("off", 64)
        expect_error(
            lambda: client.register_system_shared_memory("off", key, 64),
            protocol, "denied", "start the server with --allow-shared-memory",
        )  # fmt: skip
        assert status(client, protocol) == {}
        wire = module(protocol).InferInput("INPUT1", [1, 16], "INT32")
        wire.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
        expect_error(
            lambda: client.infer(
                "simple", [shm_input(protocol, "INPUT0", [1, 16], "INT32", "off", 64), wire]
            ),
            protocol, "invalid", "--allow-shared-memory",
        )  # fmt: skip
    finally:
        client.close()


def test_admin_token_guards_registration(server_factory, repository_copy, protocol, regions):
    server = server_factory(
        repository_copy("simple"), "--allow-shared-memory", "--admin-token", "s3cret"
    )
    client = connect(server, protocol)
    try:
        _, key = regions("guarded", 64)
        expect_error(
            lambda: client.register_system_shared_memory("guarded", key, 64),
            protocol, "denied", "admin token",
        )  # fmt: skip
        expect_error(lambda: client.unregister_system_shared_memory(), protocol, "denied")
        headers = {"authorization": "Bearer s3cret"}
        client.register_system_shared_memory("guarded", key, 64, headers=headers)
        assert list(status(client, protocol)) == ["guarded"]  # status needs no token
        client.unregister_system_shared_memory(headers=headers)
    finally:
        client.close()


def test_raw_http_register_errors(shm_gateway):
    base = f"http://{shm_gateway.http_url}/v2/systemsharedmemory"
    register = f"{base}/region/raw/register"
    cases = [
        (httpx.post(register), 400, "'key' must be a string, got null"),
        (httpx.post(register, content=b"{nope"), 400, "not valid"),
        (httpx.post(register, json=[1]), 400, "must be a JSON object"),
        (httpx.post(register, json={"key": "/k"}), 400, "'byte_size' must be a non-negative"),
        (httpx.post(register, json={"key": "/k", "offset": "0", "byte_size": 8}), 400, "offset"),
        (httpx.post(register, content=b" " * 70_000), 413, "limit"),
        (httpx.get(register), 405, "GET is not allowed"),
        (httpx.post(f"{base}/status"), 405, "POST is not allowed"),
        (httpx.get(f"{base}/region/raw/status"), 400, "no system shared memory region 'raw'"),
        (httpx.get(f"{base.replace('system', 'cuda')}/status"), 200, "[]"),
        (httpx.post(f"{base.replace('system', 'cuda')}/unregister"), 200, ""),
    ]
    for response, status_code, fragment in cases:
        assert response.status_code == status_code, (response.request.url, response.text)
        assert fragment in response.text, response.text
