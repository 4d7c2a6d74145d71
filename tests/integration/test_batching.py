"""Dynamic batching seen from outside: tritonclient against a real gateway."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models.mlp import reference_outputs
from tests.conftest import PERF_ANALYZER, installed_tool, wait_until


def pending(server, model: str = "mlp") -> int:
    """Requests the model has accepted and not yet answered."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    prefix = f'nv_inference_pending_request_count{{model="{model}",version="1"}} '
    return int(float(next(x for x in text.splitlines() if x.startswith(prefix))[len(prefix) :]))


def client_for(server, protocol: str):
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url, concurrency=4)
    return grpcclient.InferenceServerClient(server.grpc_url)


def infer_mlp(server, protocol: str, data: np.ndarray, model: str = "mlp", **kwargs):
    mod = httpclient if protocol == "http" else grpcclient
    client = client_for(server, protocol)
    tensor = mod.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    try:
        return client.infer(model, [tensor], **kwargs).as_numpy("OUTPUT0")
    finally:
        client.close()


def counts(server) -> tuple[int, int]:
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("mlp")["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_batch_and_stay_row_exact(gateway, example_repository, protocol):
    rng = np.random.default_rng(7)
    inputs = [rng.random((1 + i % 4, 784), dtype=np.float32) for i in range(48)]
    before = counts(gateway)
    with ThreadPoolExecutor(max_workers=16) as pool:
        outputs = list(pool.map(lambda data: infer_mlp(gateway, protocol, data), inputs))
    after = counts(gateway)
    model = example_repository / "mlp" / "1" / "model.onnx"
    for data, output in zip(inputs, outputs, strict=True):
        np.testing.assert_allclose(output, reference_outputs(model, data), rtol=1e-5, atol=1e-6)
    inferences, executions = after[0] - before[0], after[1] - before[1]
    assert inferences == sum(len(data) for data in inputs)
    assert executions < len(inputs)  # requests shared batches


@pytest.fixture
def slow_window_repository(repository_copy):
    """mlp whose batch window is long, always waited out (Triton's rule, not the adaptive
    window), and whose queue holds two requests at most. The window is 10 s: what must
    happen inside it (six fresh clients on threads arriving, a client's disconnect seen)
    is never a race with a slow machine; each request that waits it out costs its length."""
    repository = repository_copy("mlp")
    config = repository / "mlp" / "config.pbtxt"
    text = config.read_text()
    head, _, _ = text.partition("dynamic_batching")
    config.write_text(
        head + "dynamic_batching { max_queue_delay_microseconds: 10000000 "
        "default_queue_policy { max_queue_size: 2 } }\n"
        'parameters { key: "adaptive_batch_window" value: { string_value: "false" } }\n'
    )
    return repository


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_full_queue_answers_unavailable_at_once(slow_window_repository, server_factory, protocol):
    server = server_factory(slow_window_repository)
    data = np.zeros((1, 784), dtype=np.float32)
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(infer_mlp, server, protocol, data) for _ in range(6)]
        results = []
        for future in futures:
            try:
                results.append(future.result(timeout=30))
            except InferenceServerException as exc:
                results.append(exc)
    errors = [r for r in results if isinstance(r, InferenceServerException)]
    assert len(errors) == 4, results
    expected_status = "503" if protocol == "http" else "StatusCode.UNAVAILABLE"
    for error in errors:
        assert str(error.status()) == expected_status
        assert "max_queue_size 2" in error.message()


def test_queue_timeout_and_priority_parameters(repository_copy, server_factory):
    repository = repository_copy("mlp")
    config = repository / "mlp" / "config.pbtxt"
    head, _, _ = config.read_text().partition("dynamic_batching")
    config.write_text(
        head + "dynamic_batching { max_queue_delay_microseconds: 300000 priority_levels: 2 "
        "default_priority_level: 2 default_queue_policy { allow_timeout_override: true } }\n"
        'parameters { key: "adaptive_batch_window" value: { string_value: "false" } }\n'
    )
    server = server_factory(repository)
    data = np.zeros((1, 784), dtype=np.float32)
    for protocol in ("http", "grpc"):
        with pytest.raises(InferenceServerException) as info:
            infer_mlp(server, protocol, data, timeout=1000)  # 1 ms, inside a 300 ms window
        assert "timed out in the queue" in info.value.message()
        assert infer_mlp(server, protocol, data, priority=1).shape == (1, 10)
        with pytest.raises(InferenceServerException) as info:
            infer_mlp(server, protocol, data, priority=3)
        assert "priority 3 is outside 1..2" in info.value.message()


def test_disconnected_http_client_leaves_the_queue(slow_window_repository, server_factory):
    import json
    import socket

    server = server_factory(slow_window_repository)
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 784], "datatype": "FP32", "data": [0.0] * 784}]}
    ).encode()
    head = (
        f"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    client = httpclient.InferenceServerClient(server.http_url)

    def stats() -> dict:
        return client.get_inference_statistics("mlp")["model_stats"][0]

    with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
        sock.sendall(head + body)
        # Queued: the batch window is ten seconds long.
        wait_until(lambda: pending(server) == 1, 30, lambda: str(stats()))
    # The request leaves the queue as a failure...
    wait_until(lambda: stats()["inference_stats"]["fail"]["count"] == 1, 30, lambda: str(stats()))
    assert stats()["execution_count"] == 0
    # ... and never runs: the next request's batch holds that request alone.
    assert infer_mlp(server, "http", np.zeros((1, 784), dtype=np.float32)).shape == (1, 10)
    entry = stats()
    assert (entry["execution_count"], entry["inference_count"]) == (1, 1), entry
    assert entry["inference_stats"]["fail"]["count"] == 1
    assert pending(server) == 0


def _rewrite_window(repository, text: str) -> None:
    config = repository / "mlp" / "config.pbtxt"
    head, _, _ = config.read_text().partition("dynamic_batching")
    config.write_text(head + text + "\n")


def test_a_lone_client_does_not_wait_the_batch_window(repository_copy, server_factory):
    # A 20 ms window that Triton's rule would make every lone request wait out.
    repository = repository_copy("mlp")
    _rewrite_window(repository, "dynamic_batching { max_queue_delay_microseconds: 20000 }")
    server = server_factory(repository)
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [1, 784], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 784), dtype=np.float32))

    def queue_ns() -> int:
        stats = client.get_inference_statistics("mlp")["model_stats"][0]
        return int(stats["inference_stats"]["queue"]["ns"])

    for _ in range(10):  # the first runs pay for ONNX Runtime's first use of a shape
        client.infer("mlp", [tensor])

    def round_of_waits(count: int) -> np.ndarray:
        waits = []
        before = queue_ns()
        for _ in range(count):
            client.infer("mlp", [tensor])
            after = queue_ns()
            waits.append(after - before)
            before = after
        return np.array(waits)

    # Waiting the 20 ms window out shows as 20,000 us or more in every request's queue
    # time; not waiting it shows as tens of microseconds (p50 23-32 us on a quiet 2-core
    # VM). What the code decides is which of the two happens, so the test counts the
    # requests that waited a window's worth: a stall of the machine (CI's shared cores
    # gave 0.2-0.8 ms at p99) can make a few wait that long, waiting the window makes all.
    try:
        waits = round_of_waits(400)
    finally:
        client.close()
    waited_the_window = int(np.count_nonzero(waits >= 20_000_000))
    assert waited_the_window <= len(waits) // 20, sorted(waits)[-5:]
    assert np.median(waits) < 5_000_000, np.median(waits)


def test_under_load_batches_still_fill_to_the_preferred_size(repository_copy, server_factory):
    # 64 closed-loop clients from perf_analyzer. Python threads as clients share one GIL
    # and send in bursts that now and then read as all of them waiting: that failed one
    # run in three on a slow machine.
    perf_analyzer = installed_tool(PERF_ANALYZER, "install-perf-analyzer")
    repository = repository_copy("mlp")
    # A window far longer than the clients take to queue 16 more (the adaptive window
    # stays on): a partial batch then leaves early only because the adaptive rule judged
    # no company was coming, never because a slow machine let a short window run out.
    _rewrite_window(
        repository,
        "dynamic_batching { max_queue_delay_microseconds: 1000000 preferred_batch_size: [ 16 ] }",
    )
    # Default settings: 64 closed-loop clients are queued, never refused (perf_analyzer
    # stops at the first refusal).
    server = server_factory(repository)
    result = subprocess.run(
        [
            str(perf_analyzer), "-m", "mlp", "-u", server.grpc_url, "-i", "grpc",
            "--concurrency-range", "64", "--measurement-interval", "1000",
            "--stability-percentage", "100", "--max-trials", "3",
        ],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    # Its own verdict is not this test's: a cold first window (ONNX Runtime's first run
    # of a batch size) can fail its stability check, and the load was served all the same.
    ran = result.stdout[-2000:] + result.stderr[-2000:]
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("mlp")
    batches = {
        int(row["batch_size"]): int(row["compute_infer"]["count"])
        for row in stats["model_stats"][0]["batch_stats"]
    }
    rows = sum(size * count for size, count in batches.items())
    assert rows >= 640, ran
    # Most rows ran in batches of the preferred size, the commonest size by far. With the
    # long window, what else goes is the batcher's choice, not the clock's: a partial batch
    # only where the adaptive rule expects no company (a rule that misread 64 busy clients
    # as all waiting fails this), a full 64 where every client's request landed at once.
    filled = batches.get(16, 0) * 16
    assert filled >= 0.6 * rows, batches
    assert max(batches, key=batches.get) == 16, batches
