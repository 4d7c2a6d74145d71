"""Both gRPC servers (`--grpc-server gateway`, the default, and `grpcio`) behind a real
gateway, judged by the unmodified tritonclient: unary and streamed inference, tensors
past every HTTP/2 window, deadlines, and a message past the size limit."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from models.mlp import write_mlp


@pytest.fixture(scope="module", params=["gateway", "grpcio"])
def server(request, example_repository, tmp_path_factory):
    import shutil

    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp(f"grpc-{request.param}") / "repository"
    repo.mkdir()
    for name in ("simple", "identity_fp32"):
        shutil.copytree(example_repository / name, repo / name)
    # Each request waits out a 300 ms batch window: a call with a shorter deadline ends first.
    write_mlp(
        repo, "slow", 32, dynamic_batching=True, max_queue_delay_us=300_000, seed=1,
        adaptive_window=False,
    )  # fmt: skip
    process = start_server(
        repo, "--grpc-server", request.param, "--max-request-bytes", str(16 << 20),
        log_dir=tmp_path_factory.mktemp(f"grpc-{request.param}-logs"),
    )  # fmt: skip
    yield process
    process.stop()


def _simple_inputs(k: int) -> list[grpcclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.full((1, 16), k, dtype=np.int32))
        inputs.append(tensor)
    return inputs


def test_unary_and_streamed_inference(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_ready() and client.is_model_ready("simple")
    result = client.infer("simple", _simple_inputs(3))
    assert result.as_numpy("OUTPUT0").tolist() == [[6] * 16]
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for k in range(20):
            client.async_stream_infer("simple", _simple_inputs(k), request_id=str(k))
        got = [answers.get(timeout=10) for _ in range(20)]
    finally:
        client.stop_stream()
    sums = {r.get_response().id: r.as_numpy("OUTPUT0")[0, 0] for r, error in got if not error}
    assert sums == {str(k): 2 * k for k in range(20)}


def test_tensors_past_every_window_come_back_whole(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    # 3.2 MB each way: past every 64 KiB window, under grpc's 4 MiB limit on answers.
    data = np.random.default_rng(0).standard_normal((2, 400_000), dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    results = [client.infer("identity_fp32", [tensor]) for _ in range(3)]
    assert all(np.array_equal(r.as_numpy("OUTPUT0"), data) for r in results)


def test_a_call_past_its_deadline_is_deadline_exceeded(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [1, 784], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 784), dtype=np.float32))
    with pytest.raises(InferenceServerException) as late:
        client.infer("slow", [tensor], client_timeout=0.05)
    assert "DEADLINE_EXCEEDED" in str(late.value.status())
    assert client.infer("simple", _simple_inputs(1)).as_numpy("OUTPUT0")[0, 0] == 2


def test_a_message_past_the_limit_is_refused_and_the_server_goes_on(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    data = np.zeros((1, 5_000_000), dtype=np.float32)  # 20 MB, past the 16 MiB limit
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("identity_fp32", [tensor])
    assert "RESOURCE_EXHAUSTED" in str(refused.value.status())
    assert client.infer("simple", _simple_inputs(2)).as_numpy("OUTPUT0")[0, 0] == 4
