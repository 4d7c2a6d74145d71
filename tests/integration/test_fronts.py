"""Several front processes (`--workers 2 --front-copies off`): both serve the same ports,
hand their requests to one batcher, report one set of statistics, restart without
touching the models, and drain on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from models import simple
from models.config_text import DynamicBatching
from models.mlp import reference_outputs, write_mlp
from tests.conftest import infer_concurrently, wait_until

BATCH = 16  # requests that fill the window's one batch


def front_requests(server, metric: str = "accel_gateway_front_requests") -> dict[str, int]:
    """A front metric (requests, unless told) by front, from the host's metrics."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    counts = {}
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels.split('"')[1]] = int(value)
    return counts


def front_pids(server) -> list[int]:
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    pids = []
    for child in map(int, children):
        command = Path(f"/proc/{child}/cmdline").read_bytes()
        if b"gateway.front_processes.main" in command:
            pids.append(child)
    return pids


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds a TCP socket listening on `port`."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # local address, state (0A: LISTEN), inode
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                listening.add(f"socket:[{fields[9]}]")
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # it has ended
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in listening:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def infer_http(url: str, data: np.ndarray, model: str = "mlp") -> np.ndarray:
    client = httpclient.InferenceServerClient(url, network_timeout=30.0)
    try:
        tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        return client.infer(model, [tensor]).as_numpy("OUTPUT0")
    finally:
        client.close()


def hold_in_window(server) -> tuple[list[threading.Thread], list]:
    """15 one-row requests, each on its own connection, waiting in mlp's batch window (a
    row short of a batch) once this returns, with every front listening; their outputs or
    errors go to the list."""
    wait_until_every_front_serves(server)
    before = sum(front_requests(server).values())
    results: list = []

    def one(i: int) -> None:
        try:
            results.append(infer_http(server.http_url, np.full((1, 784), i, np.float32)))
        except Exception as exc:  # counted by the caller; none expected
            results.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(BATCH - 1)]
    for thread in threads:
        thread.start()
    wait_until(lambda: sum(front_requests(server).values()) >= before + BATCH - 1, 30,
               lambda: f"handed on: {front_requests(server)}, {before} before")  # fmt: skip
    return threads, results


@pytest.fixture
def two_fronts(tmp_path, server_factory):
    repository = tmp_path / "repository"
    # One batch of 16 waits up to 10 s for its rows: only a full batch leaves early.
    write_mlp(repository, "mlp", 64, dynamic_batching=True, max_batch_size=BATCH,
              max_queue_delay_us=10_000_000, preferred_batch_sizes=(BATCH,),
              adaptive_window=False)  # fmt: skip
    simple.build(repository)
    simple.build(repository, "simple_batched", DynamicBatching())
    # The host's one batcher behind both fronts (their own copies: test_front_copies.py).
    return server_factory(repository, "--workers", "2", "--front-copies", "off"), repository


def wait_until_every_front_serves(server, fronts: int = 2, timeout_s: float = 30.0) -> None:
    """`simple` requests, each on a new connection, until every front has handed one on:
    the server is ready once one front listens, and the others may still be binding."""
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}
                       for n in ("INPUT0", "INPUT1")]}  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while len([c for c in front_requests(server).values() if c]) < fronts:
        assert time.monotonic() < deadline, f"not every front serves: {front_requests(server)}"
        httpx.post(f"http://{server.http_url}/v2/models/simple/infer", json=body).raise_for_status()


def test_two_fronts_feed_one_batcher_and_report_one_set_of_statistics(two_fronts):
    server, repository = two_fronts
    assert len(front_pids(server)) == 2
    wait_until_every_front_serves(server)
    before = front_requests(server)
    rng = np.random.default_rng(3)
    inputs = [rng.random((1, 784), dtype=np.float32) for _ in range(BATCH)]
    # Each request on its own connection: the kernel spreads them over both fronts.
    with ThreadPoolExecutor(max_workers=BATCH) as pool:
        outputs = list(pool.map(lambda data: infer_http(server.http_url, data), inputs))
    model = repository / "mlp" / "1" / "model.onnx"
    for data, output in zip(inputs, outputs, strict=True):
        np.testing.assert_allclose(output, reference_outputs(model, data), rtol=1e-5, atol=1e-6)
    by_front = {f: n - before.get(f, 0) for f, n in front_requests(server).items()}
    assert sorted(by_front) == ["0", "1"] and all(by_front.values()), by_front
    assert sum(by_front.values()) == BATCH
    # One batch held the requests of both fronts; every front reports that same batch.
    for _ in range(8):  # new connections, so both fronts answer some of these
        client = httpclient.InferenceServerClient(server.http_url)
        stats = client.get_inference_statistics("mlp")["model_stats"][0]
        client.close()
        assert (stats["inference_count"], stats["execution_count"]) == (BATCH, 1), stats
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    stats = grpc.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    assert (int(stats["inference_count"]), int(stats["execution_count"])) == (BATCH, 1)
    assert grpc.is_model_ready("simple") and grpc.is_server_ready()
    assert grpc.get_model_config("mlp").config.max_batch_size == BATCH
    grpc.close()


def test_a_front_that_dies_is_restarted_without_touching_the_models(two_fronts):
    server, _ = two_fronts
    data = np.zeros((BATCH, 784), dtype=np.float32)  # a full batch: no window to wait
    infer_http(server.http_url, data)
    # Both listening first: the server is ready once one front listens, and were the victim
    # the only one yet, nothing would listen until a front came up (a refused connect).
    wait_until_every_front_serves(server)
    victim = front_pids(server)[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pids = front_pids(server)
        if len(pids) == 2 and victim not in pids:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"no new front after killing {victim}:\n{server.log()}")
    # Every new connection is answered again, by either front; the model stayed loaded.
    for _ in range(10):
        output = infer_http(server.http_url, data)
        assert output.shape == (BATCH, 10)
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("mlp")["model_stats"][0]
    client.close()
    assert stats["execution_count"] == 11  # counted from before the restart
    assert "loaded model 'mlp'" in server.log() and server.log().count("loaded model 'mlp'") == 1


def test_sigterm_drains_every_front(two_fronts):
    server, _ = two_fronts
    threads, results = hold_in_window(server)
    fronts = front_pids(server)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(30)
    assert server.process.wait(30) == 0, server.log()
    assert len(results) == BATCH - 1
    assert all(isinstance(r, np.ndarray) for r in results), results
    assert not [pid for pid in fronts if Path(f"/proc/{pid}").exists()]


def test_workers_refuse_port_zero(tmp_path):
    simple.build(tmp_path / "repository")
    base = [sys.executable, "-m", "gateway", "serve", "--model-repository",
            str(tmp_path / "repository"), "--workers", "2"]  # fmt: skip
    run = subprocess.run([*base, "--http-port", "0"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "fixed HTTP and gRPC ports" in run.stderr


def test_a_front_stopped_alone_drains_while_the_other_takes_new_connections(two_fronts):
    server, _ = two_fronts
    threads, results = hold_in_window(server)
    victim = front_pids(server)[0]
    assert listens_on(victim, server.http_port)
    os.kill(victim, signal.SIGTERM)
    # It closes its listeners; its share of the 15 rows still waits.
    wait_until(lambda: not listens_on(victim, server.http_port))
    simple_input = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(20):  # every new connection reaches the other front
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(simple_input)
        assert client.infer("simple", inputs).as_numpy("OUTPUT0").shape == (1, 16)
        client.close()
    infer_http(server.http_url, np.zeros((1, 784), np.float32))  # the 16th row: the batch runs
    for thread in threads:
        thread.join(30)
    assert all(isinstance(r, np.ndarray) for r in results), results
    assert len(results) == BATCH - 1


def simple_inputs(data: np.ndarray, client=httpclient) -> list:
    tensors = []
    for name, values in (("INPUT0", data), ("INPUT1", data + 1)):
        tensor = client.InferInput(name, list(values.shape), "INT32")
        tensor.set_data_from_numpy(values)
        tensors.append(tensor)
    return tensors


def test_fronts_bundle_requests_for_a_batching_model_and_answer_each_its_own(two_fronts):
    server, _ = two_fronts
    wait_until_every_front_serves(server)
    rng = np.random.default_rng(5)
    data = [rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(1200)]
    results = infer_concurrently(
        server.http_url, "simple_batched", [simple_inputs(d) for d in data], workers=32
    )
    for values, result in zip(data, results, strict=True):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * values + 1)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.full((1, 16), -1))
    # Requests that met in one turn of a front went to the host as one.
    assert sum(front_requests(server, "accel_gateway_front_bundles").values()) > 0
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("simple_batched")["model_stats"][0]
    client.close()
    # ... and each is counted as the request it is.
    assert stats["inference_stats"]["success"]["count"] == len(data)
    assert stats["inference_count"] == len(data)

    # Malformed requests alike fail alike, each with its own shape named, not its bundle's.
    wrong = [simple_inputs(np.zeros((1, 15), np.int32)) for _ in range(200)]
    errors = infer_concurrently(server.http_url, "simple_batched", wrong, workers=32, errors=True)
    for error in errors:
        assert "got [1,15]" in str(error) and error.status() == "400", error
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("simple_batched")["model_stats"][0]
    client.close()
    assert stats["inference_stats"]["fail"]["count"] == len(wrong)  # each counted once
    bundled = sum(front_requests(server, "accel_gateway_front_bundles").values())

    # gRPC's calls are bundled too (tritonclient's gRPC client, one per thread).
    def over_grpc(values: np.ndarray) -> np.ndarray:
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            inputs = simple_inputs(values, grpcclient)
            return grpc.infer("simple_batched", inputs).as_numpy("OUTPUT0")
        finally:
            grpc.close()

    with ThreadPoolExecutor(max_workers=32) as pool:
        outputs = list(pool.map(over_grpc, data[:600]))
    for values, output in zip(data, outputs, strict=False):
        np.testing.assert_array_equal(output, 2 * values + 1)
    assert sum(front_requests(server, "accel_gateway_front_bundles").values()) > bundled
