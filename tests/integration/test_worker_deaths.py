"""A worker process killed under load, through a real gateway and real clients of both
protocols: the batch it ran fails with a 500 naming the model and how its worker ended;
requests that arrive while it restarts wait at most `worker_restart_wait_s` (5 s) or get a
503 with Retry-After, and none waits for its client's timeout, though the restart
takes longer than that; then the model serves again."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from test_workers import wait_for, workers_of
from tritonclient.utils import InferenceServerException

from tests.conftest import wait_until

MODEL = "py_slow_restart"  # its restarts take 12 s (python_models/py_slow_restart)
MODEL_DIR = Path(__file__).parent / "python_models" / MODEL
CLIENT_TIMEOUT_S = 10.0
GRPC_STATUSES = {"StatusCode.INTERNAL": 500, "StatusCode.UNAVAILABLE": 503}
TIMED_OUT = -1


@dataclass(frozen=True, slots=True)
class Answer:
    front: str
    sent: float  # clock seconds
    took: float
    status: int  # HTTP's, gRPC's mapped to it; TIMED_OUT when the client gave up
    message: str
    retry_after: str | None = None


def http_answer(connection: http.client.HTTPConnection) -> tuple[int, str, str | None]:
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    )
    try:
        connection.request("POST", f"/v2/models/{MODEL}/infer", body)
        reply = connection.getresponse()
        text = reply.read().decode()
    except TimeoutError:
        connection.close()  # reconnects on the next request
        return TIMED_OUT, "no answer within the client's timeout", None
    return reply.status, text, reply.getheader("retry-after")


def http_load(port: int, stop: threading.Event, answers: list[Answer]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
    while not stop.is_set():
        sent = time.monotonic()
        status, text, retry_after = http_answer(connection)
        answers.append(Answer("http", sent, time.monotonic() - sent, status, text, retry_after))
        if status != 200:
            time.sleep(0.05)  # no spin on refusals
    connection.close()


def grpc_load(url: str, stop: threading.Event, answers: list[Answer]) -> None:
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
    while not stop.is_set():
        sent = time.monotonic()
        try:
            client.infer(MODEL, [tensor], client_timeout=CLIENT_TIMEOUT_S)
            status, text = 200, ""
        except InferenceServerException as exc:
            code = str(exc.status())
            status = TIMED_OUT if "DEADLINE_EXCEEDED" in code else GRPC_STATUSES.get(code, 0)
            text = f"{code}: {exc.message()}"
        answers.append(Answer("grpc", sent, time.monotonic() - sent, status, text))
        if status != 200:
            time.sleep(0.05)
    client.close()


def test_a_killed_worker_never_leaves_a_request_to_its_client_timeout(tmp_path, server_factory):
    repository = tmp_path / "repository"
    shutil.copytree(MODEL_DIR, repository / MODEL)
    server = server_factory(repository)
    answers: list[Answer] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=http_load, args=(server.http_port, stop, answers)) for _ in range(6)
    ]
    threads += [
        threading.Thread(target=grpc_load, args=(server.grpc_url, stop, answers)) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    # Served before the kill: waited for, not guessed from a second of load (a slow
    # machine may answer fewer in it); a model that never served still fails here.
    try:
        wait_until(
            lambda: sum(a.status == 200 for a in list(answers)) > 10, 120, "11 answers served"
        )
    except BaseException:
        stop.set()  # the load threads end with the test
        raise
    killed = time.monotonic()
    os.kill(workers_of(server)[f"{MODEL}-1-0"], signal.SIGKILL)
    time.sleep(9.0)  # well into the restart, past the bound on waiting for it
    stop.set()
    for thread in threads:
        thread.join(timeout=2 * CLIENT_TIMEOUT_S)

    timed_out = [a for a in answers if a.status == TIMED_OUT]
    assert not timed_out, f"{len(timed_out)} requests saw their client's timeout: {timed_out[:3]}"
    assert sum(a.status == 200 for a in answers if a.sent < killed) > 10
    assert {a.status for a in answers} <= {200, 500, 503}, {a.status for a in answers}
    for answer in answers:
        if answer.status == 500:  # the batch in flight: the model, and how its worker ended
            assert f"model '{MODEL}'" in answer.message, answer
            assert "killed by signal SIGKILL" in answer.message, answer
        elif answer.status == 503:  # while it restarts: the model, the bound, when to retry
            assert f"model '{MODEL}'" in answer.message, answer
            assert "worker_restart_wait_s" in answer.message, answer
            if answer.front == "http":
                assert answer.retry_after is not None and int(answer.retry_after) >= 1, answer
    # The restart takes 12 s: after the bound, each front is answered 503, not left waiting.
    late = [a for a in answers if a.sent > killed + 7.0]
    for front in ("http", "grpc"):
        statuses = {a.status for a in late if a.front == front}
        assert statuses == {503}, (front, statuses)

    client = httpclient.InferenceServerClient(server.http_url)
    wait_for(lambda: client.is_model_ready(MODEL), timeout_s=90, what=f"{MODEL} READY again")
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
    out = client.infer(MODEL, [tensor]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32).reshape(1, 4))
    assert "was killed by signal SIGKILL" in server.log()
