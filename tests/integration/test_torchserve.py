"""TorchServe archives made by the real torch-model-archiver, served by a real gateway over
TorchServe's inference API (--torchserve-port) and over V2."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

pytest.importorskip("ts")

from test_workers import workers_of  # noqa: E402

from backends.torchserve.store import Defaults, add_archive  # noqa: E402
from gateway.launch import GatewayProcess, free_ports, start_gateway  # noqa: E402
from models.digits import held_out  # noqa: E402
from models.torchserve.archives import build_archive  # noqa: E402


class Served:
    def __init__(self, server: GatewayProcess, port: int) -> None:
        self.server = server
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    store = tmp_path_factory.mktemp("model-store")
    archives = [
        (build_archive("digits", store, model_config={"batchSize": 4, "maxBatchDelay": 300}),
         None),
        # A 10 s window: batches form however slowly this machine sends (full ones leave
        # at once), so the batching test asserts what the batcher decides.
        (build_archive("digits", store, name="digits_batched",
                       model_config={"batchSize": 4, "maxBatchDelay": 10_000}), None),
        (build_archive("digits", store, name="digits_tgz", archive_format="tgz"), None),
        (build_archive("function", store, archive_format="no-archive"), None),
        (build_archive("failing", store), None),
        (build_archive("streaming", store), None),
    ]  # fmt: skip
    repository = tmp_path_factory.mktemp("repository")
    for archive, name in archives:
        add_archive(archive, repository, Defaults(), name)
    *ports, torchserve_port = free_ports(4)
    server = start_gateway(
        repository, "--torchserve-port", str(torchserve_port),
        log_path=tmp_path_factory.mktemp("logs") / "gateway.log", ports=tuple(ports),
        timeout_s=180,
    )  # fmt: skip
    yield Served(server, torchserve_port)
    assert server.stop() == 0, server.log()
    # ts's per-batch INFO lines stay out of the gateway's log.
    assert "Backend received inference" not in server.log()
    assert "[METRICS]" not in server.log()


@functools.cache
def trained_net():
    from models import digits_torch

    return digits_torch.train()


def reference_digits(images: np.ndarray) -> np.ndarray:
    import torch

    net = trained_net()
    with torch.no_grad():
        return net(torch.from_numpy(images)).numpy()


def test_ping_is_healthy(served):
    reply = served.client.get("/ping")
    assert reply.status_code == 200 and reply.json() == {"status": "Healthy"}


@pytest.mark.parametrize("model", ["digits", "digits_tgz"])
def test_a_base_handler_subclass_answers_as_the_trained_net(served, model):
    images, _ = held_out()
    expected = reference_digits(images[:5])
    for image, probabilities in zip(images[:5], expected, strict=True):
        reply = served.client.post(f"/predictions/{model}", json={"pixels": image.tolist()})
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["digit"] == int(probabilities.argmax())
        np.testing.assert_allclose(answer["probabilities"], probabilities, rtol=1e-5, atol=1e-6)


def test_concurrent_requests_meet_in_one_batch_up_to_batch_size(served):
    images, _ = held_out()
    # batchSize 4 with a 10 s window: eight requests at once ride in batches of up to 4.
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(
            lambda image: served.client.post("/predictions/digits_batched", json=image.tolist()),
            images[:8],
        ))  # fmt: skip
    batches = [reply.json()["batch"] for reply in replies]
    assert all(reply.status_code == 200 for reply in replies)
    assert max(batches) > 1 and max(batches) <= 4


def test_the_same_archive_serves_over_v2(served):
    images, _ = held_out()
    client = httpclient.InferenceServerClient(served.server.http_url)
    body = httpclient.InferInput("body", [1, 1], "BYTES")
    body.set_data_from_numpy(np.array([[json.dumps(images[0].tolist()).encode()]], dtype=object))
    result = client.infer("digits", [body], outputs=[httpclient.InferRequestedOutput("response")])
    answer = json.loads(result.as_numpy("response")[0, 0])
    assert answer["digit"] == int(reference_digits(images[:1])[0].argmax())


def test_a_function_handler_sees_headers_and_form_fields_and_sets_its_answer(served):
    # A form's fields arrive by name, as TorchServe's frontend hands them on (checked
    # against TorchServe 0.12 itself: 201 Created, "HELLO|hi|1").
    reply = served.client.post(
        "/predictions/function/1.0", data={"body": "hello", "shout": "1"},
        headers={"x-echo": "hi"},
    )  # fmt: skip
    assert reply.status_code == 201
    assert reply.text == "HELLO|hi|1"
    assert reply.headers["content-type"] == "text/plain"
    assert reply.headers["x-model"] == "function"
    assert reply.headers["cache-control"].startswith("no-cache") and reply.headers["x-request-id"]
    plain = served.client.put("/predictions/function", content=b"quiet")
    assert (plain.status_code, plain.text) == (200, "quiet||1")
    upload = served.client.post("/predictions/function", files={"body": ("f.txt", b"file")})
    assert (upload.status_code, upload.text) == (200, "file||1")
    empty = served.client.get("/predictions/function")  # TorchServe takes GET too
    assert (empty.status_code, empty.text) == (200, "||1")


def test_v2_headers_that_are_not_pairs_are_a_400_naming_them(served):
    client = httpclient.InferenceServerClient(served.server.http_url)
    body = httpclient.InferInput("body", [1, 1], "BYTES")
    body.set_data_from_numpy(np.array([[b"x"]], dtype=object))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("function", [body], parameters={"request_headers": '{"not": "pairs"}'})
    assert raised.value.status() == "400"
    assert 'parameter "request_headers"' in raised.value.message()


def test_a_form_field_name_that_is_no_utf8_fails_that_request_alone(served):
    # (TorchServe's frontend cannot write it either; the batch's other requests go on.)
    reply = served.client.post(
        "/predictions/function", content=b"a%FF=1",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    assert reply.status_code == 400
    assert "cannot be handed to the handler" in reply.json()["message"]
    assert served.client.put("/predictions/function", content=b"quiet").status_code == 200


def test_an_unknown_version_or_model_is_torchserves_404(served):
    # As TorchServe 0.12 answers both.
    reply = served.client.post("/predictions/function/9.9", content=b"x")
    assert reply.status_code == 404
    assert reply.json() == {
        "code": 404, "type": "ModelVersionNotFoundException",
        "message": "Model version: 9.9 does not exist for model: function",
    }  # fmt: skip
    unknown = served.client.post("/predictions/nothing", content=b"x")
    assert unknown.status_code == 404
    assert unknown.json() == {
        "code": 404,
        "type": "ModelNotFoundException",
        "message": "Model not found: nothing",
    }


def test_a_prediction_exception_answers_with_its_own_code_and_message(served):
    reply = served.client.post("/predictions/failing", content=b"refuse")
    assert reply.status_code == 513
    assert reply.json() == {
        "code": 513, "type": "InternalServerException", "message": "the input was refused",
    }  # fmt: skip


def test_a_handler_that_breaks_fails_only_its_batch(served):
    broken = served.client.post("/predictions/failing", content=b"crash")
    assert broken.status_code == 503
    assert broken.json()["message"] == "Prediction failed"
    fine = served.client.post("/predictions/failing", content=b"fine")
    assert (fine.status_code, fine.text) == (200, "ok")


def test_headers_over_8_kib_are_refused_with_a_400_naming_them(served):
    reply = served.client.post("/predictions/function", content=b"x",
                               headers={"x-big": "a" * 9000})  # fmt: skip
    assert reply.status_code == 400 and "headers come to" in reply.json()["message"]


def test_intermediate_responses_stream_as_chunks_of_one_answer(served):
    """As TorchServe's HTTP API: a handler's intermediate responses are the chunks of one
    chunked answer, its last answer the last chunk; a handler that sends none is one
    ordinary answer."""
    with served.client.stream("POST", "/predictions/streaming", content=b"one two three") as r:
        assert r.status_code == 200
        assert r.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.headers
        assert b"".join(r.iter_bytes()) == b"one two three"
    single = served.client.post("/predictions/streaming", content=b"alone")
    assert single.text == "alone" and single.headers["content-length"] == "5"
    assert "ended early" not in served.server.log()  # the stream ended as it should


def test_intermediate_responses_over_v2_need_a_stream(served):
    """Over V2's gRPC stream each comes as a response of its own; a plain V2 call cannot
    take them, and says where to send the request."""
    import queue

    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        body = grpcclient.InferInput("body", [1, 1], "BYTES")
        body.set_data_from_numpy(np.array([[b"one two three"]], dtype=object))
        client.async_stream_infer("streaming", [body], request_id="words")
        words = []
        for _ in range(3):
            result, error = answers.get(timeout=60)
            assert error is None, error
            words.append(result.as_numpy("response").reshape(-1)[0])
        assert words == [b"one ", b"two ", b"three"]
        # A handler that sends nothing early, asked for no output by name: its answer.
        client.async_stream_infer("function", [body], request_id="plain")
        result, error = answers.get(timeout=60)
        assert error is None, error
        assert result.as_numpy("response").reshape(-1)[0] == b"one two three||1"
    finally:
        client.stop_stream()
    v2 = httpclient.InferenceServerClient(served.server.http_url)
    body = httpclient.InferInput("body", [1, 1], "BYTES")
    body.set_data_from_numpy(np.array([[b"one two"]], dtype=object))
    with pytest.raises(InferenceServerException) as refused:
        v2.infer("streaming", [body])
    assert "need a stream" in str(refused.value)


def test_a_delete_on_predictions_is_refused_by_name(served):
    reply = served.client.delete("/predictions/digits")
    assert reply.status_code == 405 and reply.json()["type"] == "MethodNotAllowedException"


def test_a_worker_killed_under_load_fails_only_what_it_held_and_comes_back(tmp_path):
    store, repository = tmp_path / "store", tmp_path / "repository"
    repository.mkdir()
    add_archive(build_archive("function", store), repository, Defaults())
    *ports, torchserve_port = free_ports(4)
    server = start_gateway(
        repository, "--torchserve-port", str(torchserve_port), log_path=tmp_path / "log",
        ports=tuple(ports), timeout_s=180,
    )  # fmt: skip
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{torchserve_port}", timeout=60)
        worker = next(pid for name, pid in workers_of(server).items() if "function" in name)

        def call(index: int) -> int:
            if index == 20:
                os.kill(worker, signal.SIGKILL)
            return client.post("/predictions/function", content=b"x").status_code

        with ThreadPoolExecutor(4) as pool:  # every call answered: none waits out 60 s
            statuses = list(pool.map(call, range(60)))
        assert set(statuses) <= {200, 500, 503}, statuses
        # The calls before the kill at least, but for the three other threads' calls that
        # may still be in flight when it comes (they may fail with the worker they ran on).
        assert statuses.count(200) >= 20 - 3
        # The worker restarts and the model answers again.
        deadline = time.monotonic() + 120
        while client.post("/predictions/function", content=b"y").status_code != 200:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.5)
        assert workers_of(server) and worker not in workers_of(server).values()
    finally:
        assert server.stop() == 0, server.log()
