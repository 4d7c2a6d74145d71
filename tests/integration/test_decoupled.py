"""A decoupled Python model through a real gateway and the unmodified tritonclient: several
responses per request over the gRPC stream, sent after execute() returned, requests of
one stream interleaved; errors as stream errors; unary calls refused with the reason."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import python_models

MODEL = "py_repeat"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp("decoupled") / "repository"
    python_models.build(repo, (MODEL,))
    process = start_server(repo, log_dir=tmp_path_factory.mktemp("decoupled-logs"))
    yield process
    assert process.stop() == 0, process.log()


def inputs(module, text: bytes, count: int):
    tensors = [module.InferInput("TEXT", [1], "BYTES"), module.InferInput("COUNT", [1], "INT32")]
    tensors[0].set_data_from_numpy(np.array([text], dtype=object))
    tensors[1].set_data_from_numpy(np.array([count], dtype=np.int32))
    return tensors


def test_several_responses_per_request_over_the_stream(server):
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        counts = {"a": 3, "b": 5, "c": 0}
        for request_id, count in counts.items():
            grpc.async_stream_infer(
                MODEL, inputs(grpcclient, request_id.encode(), count), request_id=request_id
            )
        got: dict[str, list] = {k: [] for k in counts}
        for _ in range(sum(counts.values())):
            result, error = answers.get(timeout=30)
            assert error is None, str(error)
            response = result.get_response()
            got[response.id].append((int(result.as_numpy("INDEX")[0]), result.as_numpy("PART")[0]))
        with pytest.raises(queue.Empty):  # a final flag alone sends nothing
            answers.get(timeout=0.3)
    finally:
        grpc.stop_stream()
    for request_id, count in counts.items():
        assert got[request_id] == [(i, f"{request_id} {i}".encode()) for i in range(count)]


def test_the_empty_final_response_when_asked_for(server):
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        grpc.async_stream_infer(
            MODEL, inputs(grpcclient, b"x", 2), request_id="r", enable_empty_final_response=True
        )
        finals = []
        for _ in range(3):
            result, error = answers.get(timeout=30)
            assert error is None, str(error)
            finals.append(result.get_response().parameters["triton_final_response"].bool_param)
    finally:
        grpc.stop_stream()
    assert finals == [False, False, True]


def test_an_error_response_reaches_the_stream_and_the_stream_goes_on(server):
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        grpc.async_stream_infer(MODEL, inputs(grpcclient, b"x", -1), request_id="bad")
        result, error = answers.get(timeout=30)
        assert result is None and "COUNT must be >= 0" in str(error)
        grpc.async_stream_infer(MODEL, inputs(grpcclient, b"y", 1), request_id="good")
        result, error = answers.get(timeout=30)
        assert error is None and result.as_numpy("PART")[0] == b"y 0"
    finally:
        grpc.stop_stream()


def test_unary_calls_are_refused_with_the_reason(server):
    for client, module in (
        (httpclient.InferenceServerClient(server.http_url), httpclient),
        (grpcclient.InferenceServerClient(server.grpc_url), grpcclient),
    ):
        with pytest.raises(InferenceServerException) as failed:
            client.infer(MODEL, inputs(module, b"x", 1))
        assert "decoupled" in failed.value.message() and "ModelStreamInfer" in (
            failed.value.message()
        )
