"""Triton Python-backend models (`model.py`, `triton_python_backend_utils`) through a real
gateway and the unmodified tritonclient: batched execute, BYTES both ways, a config the
model completes itself, calls to other models, and a model that raises, exits or
segfaults failing only its own requests."""

from __future__ import annotations

import json
import queue
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import python_models, simple
from tests.conftest import both_clients, infer_concurrently, wait_until

FAULTS = Path(__file__).parent / "python_models" / "py_faults"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp("python-models") / "repository"
    simple.build(repo)
    python_models.build(repo)
    shutil.copytree(FAULTS, repo / "py_faults")
    process = start_server(
        repo, "--log-format", "json", log_dir=tmp_path_factory.mktemp("python-logs")
    )
    yield process
    assert process.stop() == 0, process.log()


def module_of(client):
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def identity_input(client, values: np.ndarray):
    tensor = module_of(client).InferInput("INPUT0", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    return tensor


def test_identity_batches_requests_and_answers_each(server):
    http = httpclient.InferenceServerClient(server.http_url)
    before = http.get_inference_statistics("py_identity")["model_stats"][0]

    # Shapes differ: batched by shape.
    sent = [np.full((1, 3 + i % 3), i, np.float32) for i in range(192)]
    results = infer_concurrently(
        server.http_url, "py_identity", [[identity_input(http, values)] for values in sent]
    )
    for values, result in zip(sent, results, strict=True):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
    after = http.get_inference_statistics("py_identity")["model_stats"][0]
    requests = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert requests == 192
    assert executions < requests, "execute() should have been given batches of requests"


def test_identity_over_grpc_and_its_stream(server):
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    values = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = grpc.infer("py_identity", [identity_input(grpc, values)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(5):
            rows = np.full((1, 2), i, np.float32)
            grpc.async_stream_infer("py_identity", [identity_input(grpc, rows)], request_id=str(i))
        got = {}
        for _ in range(5):
            result, error = answers.get(timeout=30)
            assert error is None, error
            got[result.get_response().id] = result.as_numpy("OUTPUT0")
    finally:
        grpc.stop_stream()
    for i in range(5):
        np.testing.assert_array_equal(got[str(i)], np.full((1, 2), i, np.float32))


def test_bytes_in_and_out_with_a_config_the_model_completed(server):
    http = httpclient.InferenceServerClient(server.http_url)
    config = http.get_model_config("py_strings")
    assert config["max_batch_size"] == 8
    assert [t["name"] for t in config["input"]] == ["TEXT"]
    assert {t["name"]: t["data_type"] for t in config["output"]} == {
        "UPPER": "TYPE_STRING",
        "LENGTH": "TYPE_INT32",
    }
    text = np.array([["héllo".encode(), b"a\x00b"]], dtype=object)
    for client in both_clients(server):
        tensor = module_of(client).InferInput("TEXT", [1, 2], "BYTES")
        tensor.set_data_from_numpy(text)
        result = client.infer("py_strings", [tensor])
        assert result.as_numpy("UPPER").tolist() == [["HéLLO".encode(), b"A\x00B"]]
        assert result.as_numpy("LENGTH").tolist() == [[6, 3]]


def test_an_error_response_fails_its_request_alone(tmp_path, server_factory):
    # py_strings batching as the model sets it (8 rows), but whose window waits for a full
    # batch (a full batch leaves at once): the 8 requests below are one batch.
    python_models.build(tmp_path / "repository", ("py_strings",))
    with open(tmp_path / "repository" / "py_strings" / "config.pbtxt", "a") as config:
        config.write(
            "dynamic_batching { max_queue_delay_microseconds: 60000000 }\n"
            'parameters { key: "adaptive_batch_window" value { string_value: "false" } }\n'
        )
    server = server_factory(tmp_path / "repository")
    sent = []
    for i in range(8):
        tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[b"" if i % 2 else b"x"]], dtype=object))
        sent.append([tensor])
    results = infer_concurrently(server.http_url, "py_strings", sent, workers=8, errors=True)
    for i, result in enumerate(results):
        if i % 2:
            assert isinstance(result, InferenceServerException)
            assert "TEXT has an empty string" in result.message()
            assert result.status() == "400"
        else:
            assert result.as_numpy("UPPER").tolist() == [[b"X"]]
    # ... and they did share one batch with the requests that failed.
    http = httpclient.InferenceServerClient(server.http_url)
    stats = http.get_inference_statistics("py_strings")["model_stats"][0]
    assert (stats["execution_count"], stats["inference_count"]) == (1, 8), stats
    counts = stats["inference_stats"]
    assert (counts["success"]["count"], counts["fail"]["count"]) == (4, 4), stats


def test_a_model_calls_another_model_of_the_gateway(server):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    for client in both_clients(server):
        tensors = [module_of(client).InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        tensors[0].set_data_from_numpy(a)
        tensors[1].set_data_from_numpy(b)
        result = client.infer("py_bls", tensors)
        np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
        np.testing.assert_array_equal(result.as_numpy("DIFFERENCE"), a - b)
    stats = both_clients(server)[0].get_inference_statistics("simple")["model_stats"][0]
    assert stats["inference_count"] >= 2  # the calls went through simple's scheduler


def fault(
    client: httpclient.InferenceServerClient, word: str, request_id: str = "", version: str = ""
):
    tensor = httpclient.InferInput("COMMAND", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([word.encode()], dtype=object))
    return client.infer("py_faults", [tensor], request_id=request_id, model_version=version)


def test_a_backend_failure_is_logged_with_its_request_id(server):
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException):
        fault(http, "raise", request_id="fault-7", version="1")
    # The same model and version spelled another way, within 10 s: held back, counted.
    with pytest.raises(InferenceServerException):
        fault(http, "raise", request_id="fault-8", version="01")

    def log_lines() -> list[dict]:
        return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]

    # The line is written when the failure is handled: waited for, generously.
    wait_until(lambda: any(line.get("request_id") == "fault-7" for line in log_lines()), 60)
    lines = log_lines()
    named = [line for line in lines if line.get("request_id") == "fault-7"]
    assert [line["level"] for line in named] == ["ERROR"], named
    assert "the model was asked to raise" in named[0]["message"]
    assert not [line for line in lines if line.get("request_id") == "fault-8"]
    # A line logged outside any request names none.
    assert any("request_id" not in line for line in lines)


@pytest.mark.parametrize("word", ["raise", "exit", "segfault"])
def test_a_failing_model_fails_only_its_own_requests(server, word):
    http = httpclient.InferenceServerClient(server.http_url)
    assert fault(http, "ok").as_numpy("ECHO").tolist() == [b"ok"]
    with pytest.raises(InferenceServerException) as failed:
        fault(http, word)
    assert failed.value.status() == "500"
    message = failed.value.message()
    expected = {
        "raise": "the model was asked to raise",
        "exit": "exited with status 3",
        "segfault": "SIGSEGV",
    }[word]
    assert expected in message, message
    # Other models never noticed; this one answers again once its worker is back.
    values = np.ones((1, 2), np.float32)
    np.testing.assert_array_equal(
        http.infer("py_identity", [identity_input(http, values)]).as_numpy("OUTPUT0"), values
    )

    def answers_again() -> bool:
        try:
            answer = fault(http, "ok")
        except InferenceServerException as exc:
            assert exc.status() == "503", exc.message()  # restarting
            return False
        assert answer.as_numpy("ECHO").tolist() == [b"ok"]
        return True

    # A restart (a new interpreter and the model's import) takes what the machine gives
    # it: waited for with a generous deadline; a worker that never comes back still fails.
    wait_until(answers_again, 120, "the Python model's worker back", interval_s=0.1)
