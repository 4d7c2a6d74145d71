"""Request cancellation end to end, through the unmodified tritonclient: a Python model
sees is_cancelled() for a running request whose gRPC call was cancelled or whose HTTP
client disconnected."""

from __future__ import annotations

import json
import queue
import shutil
import socket
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from test_batching import pending

from tests.conftest import wait_until

PY_CANCEL = Path(__file__).parent / "python_models" / "py_cancel"


@pytest.fixture
def server(tmp_path, server_factory):
    repository = tmp_path / "repository"
    shutil.copytree(PY_CANCEL, repository / "py_cancel")
    return server_factory(repository)


def seen(server) -> list[int]:
    """[requests the model saw cancelled, its quick runs (this one's included)]."""
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[0]], dtype=np.int32))
    return client.infer("py_cancel", [tensor]).as_numpy("SEEN")[0].tolist()


def test_a_cancelled_grpc_call_is_seen_by_the_running_model(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    answers = []
    call = client.async_infer("py_cancel", [tensor], lambda result, error: answers.append(error))
    wait_until(lambda: pending(server, "py_cancel") == 1, 30, "the call running")
    began = time.monotonic()
    call.cancel()
    wait_until(lambda: pending(server, "py_cancel") == 0, 30, "the run to end")
    assert time.monotonic() - began < 5  # it stopped, not ran out its 10 s
    assert seen(server) == [1, 1]


def test_a_disconnected_http_client_is_seen_by_the_running_model(server):
    body = json.dumps(
        {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}]}
    ).encode()
    head = (
        f"POST /v2/models/py_cancel/infer HTTP/1.1\r\nHost: x\r\nContent-Type: "
        f"application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
        sock.sendall(head + body)
        wait_until(lambda: pending(server, "py_cancel") == 1, 30, "the request running")
    began = time.monotonic()
    wait_until(lambda: pending(server, "py_cancel") == 0, 30, "the run to end")
    assert time.monotonic() - began < 5
    assert seen(server) == [1, 1]


def test_a_cancelled_queued_grpc_call_never_runs(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def send(value: int):
        tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        return client.async_infer("py_cancel", [tensor], lambda result, error: None)

    running = send(1)  # holds the one instance
    wait_until(lambda: pending(server, "py_cancel") == 1, 30, "the first running")
    queued = send(0)
    wait_until(lambda: pending(server, "py_cancel") == 2, 30, "the second queued")
    queued.cancel()
    wait_until(lambda: pending(server, "py_cancel") == 1, 30, "the queued one gone")
    running.cancel()
    wait_until(lambda: pending(server, "py_cancel") == 0, 30, "the run to end")
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("py_cancel")["model_stats"][0]
    # Neither answered: both counted failed, as Triton's CANCELED (in the metrics' reasons)
    assert stats["inference_stats"]["fail"]["count"] == 2
    assert stats["inference_stats"]["success"]["count"] == 0
    assert seen(server) == [1, 1]  # the running one saw it; the queued one never ran
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    reason = 'nv_inference_request_failure{model="py_cancel",version="1",reason="CANCELED"} 2'
    assert reason in text


def test_a_decoupled_stream_closed_by_its_client_is_seen_by_the_sender(tmp_path, server_factory):
    repository = tmp_path / "repository"
    shutil.copytree(Path(__file__).parent / "python_models" / "py_cancel_stream",
                    repository / "py_cancel_stream")  # fmt: skip
    server = server_factory(repository)

    def request(value: int) -> grpcclient.InferInput:
        tensor = grpcclient.InferInput("INPUT", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        return tensor

    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    client.async_stream_infer("py_cancel_stream", [request(1)])
    result, error = answers.get(timeout=30)  # it streams
    assert error is None, error
    client.stop_stream(cancel_requests=True)  # the client closes the stream mid-way

    def seen() -> int:
        asked: queue.Queue = queue.Queue()
        other = grpcclient.InferenceServerClient(server.grpc_url)
        other.start_stream(callback=lambda result, error: asked.put((result, error)))
        try:
            other.async_stream_infer("py_cancel_stream", [request(0)])
            result, error = asked.get(timeout=30)
            assert error is None, error
            return int(result.as_numpy("SEEN")[0])
        finally:
            other.stop_stream()

    wait_until(lambda: seen() == 1, 8, "the sender to see its stream cancelled")
