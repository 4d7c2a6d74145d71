"""Graceful drain: SIGTERM while HTTP, gRPC unary and gRPC stream requests are in flight.
Every one of them is answered, new ones are refused with 503, and the process exits."""

from __future__ import annotations

import queue
import signal
import threading
import time

import httpx
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from models.mlp import write_mlp
from tests.conftest import wait_until

# The batch window the requests wait in while the server is told to stop: long enough
# for all 16 to arrive, the SIGTERM, the readiness check and the late request before it
# ends, however slow this machine.
WINDOW_S = 10.0
# The drain's limit, well past the window: the process must exit once everything in
# flight is answered, long before it.
DRAIN_S = 30


def pending(server) -> int:
    """Requests the model has accepted and not yet answered."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    prefix = 'nv_inference_pending_request_count{model="slow",version="1"} '
    return int(float(next(x for x in text.splitlines() if x.startswith(prefix))[len(prefix) :]))


def infer(module, client, value: float):
    tensor = module.InferInput("INPUT0", [1, 784], "FP32")
    tensor.set_data_from_numpy(np.full((1, 784), value, dtype=np.float32))
    return client.infer("slow", [tensor]).as_numpy("OUTPUT0")


def test_sigterm_answers_everything_in_flight(tmp_path, server_factory):
    write_mlp(tmp_path / "repository", "slow", 64, dynamic_batching=True,
              max_queue_delay_us=int(WINDOW_S * 1e6), adaptive_window=False)  # fmt: skip
    server = server_factory(tmp_path / "repository", "--drain-seconds", str(DRAIN_S))
    results: queue.Queue = queue.Queue()

    def unary(protocol: str, value: float) -> None:
        module = httpclient if protocol == "http" else grpcclient
        url = server.http_url if protocol == "http" else server.grpc_url
        client = module.InferenceServerClient(url, network_timeout=60.0) if protocol == "http" \
            else module.InferenceServerClient(url)  # fmt: skip
        try:
            results.put((protocol, infer(module, client, value)))
        except Exception as exc:  # every failure is counted, none expected
            results.put((protocol, exc))

    threads = [
        threading.Thread(target=unary, args=(protocol, float(i)))
        for i in range(6)
        for protocol in ("http", "grpc")
    ]
    stream = grpcclient.InferenceServerClient(server.grpc_url)
    streamed: queue.Queue = queue.Queue()
    stream.start_stream(callback=lambda result, error: streamed.put((result, error)))
    for thread in threads:
        thread.start()
    for i in range(4):
        tensor = grpcclient.InferInput("INPUT0", [1, 784], "FP32")
        tensor.set_data_from_numpy(np.full((1, 784), i, dtype=np.float32))
        stream.async_stream_infer("slow", [tensor], request_id=str(i))
    # Everything is queued in the batch window now.
    wait_until(lambda: pending(server) == 16, 30, lambda: f"{pending(server)} pending")
    stopped_at = time.monotonic()
    server.process.send_signal(signal.SIGTERM)

    with httpx.Client(base_url=f"http://{server.http_url}") as probe:
        # Unready once the signal is handled, long before the requests in flight are done.
        wait_until(lambda: probe.get("/v2/health/ready").status_code == 503, 30)
        late = probe.post("/v2/models/slow/infer", json={"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 784], "data": [0.0] * 784}
        ]})  # fmt: skip
        assert late.status_code == 503 and "shutting down" in late.json()["error"]

    for thread in threads:
        thread.join(60)
    answers = [results.get_nowait() for _ in threads]
    failures = [answer for _, answer in answers if isinstance(answer, Exception)]
    assert failures == [], failures
    stream_answers = [streamed.get(timeout=60) for _ in range(4)]
    stream.stop_stream()
    assert [error for _, error in stream_answers if error is not None] == []
    assert server.process.wait(60) == 0
    # Gone when the last answer went (the window's end), not when the drain ran out.
    assert time.monotonic() - stopped_at < DRAIN_S
    assert "stopping: draining" in server.log()
