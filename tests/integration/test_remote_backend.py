"""The remote backend against other gateway processes on loopback, through the
unmodified tritonclient: every datatype over gRPC, HTTP binary and HTTP JSON; a remote
killed and restarted under load; an unreachable remote; batching in front."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from test_tritonclient import IDENTITY_DATA
from tritonclient.utils import InferenceServerException

from gateway.launch import GatewayProcess
from models import simple
from models.config_text import DynamicBatching
from models.remote import write_remote
from tests.conftest import both_clients, wait_until

# How the front reaches the remote identity models: (name suffix, protocol, parameters).
WIRES = (
    ("grpc", "grpc", {}),
    ("http", "http", {}),
    ("json", "http", {"binary_data": "false"}),
)


def simple_inputs(module, batch: int = 1):
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    tensors = [module.InferInput(n, [batch, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(a)
    return tensors, a


@pytest.fixture(scope="module")
def front(gateway, tmp_path_factory) -> GatewayProcess:
    """A gateway whose identity models run on the session's gateway, three ways."""
    from tests.conftest import start_server

    repository = tmp_path_factory.mktemp("remote-front") / "repository"
    for datatype in IDENTITY_DATA:
        for suffix, protocol, parameters in WIRES:
            if suffix == "json" and datatype == "BF16":
                continue  # JSON cannot carry BF16
            url = gateway.grpc_url if protocol == "grpc" else gateway.http_url
            name = f"identity_{datatype.lower()}"
            write_remote(
                repository, f"{name}_{suffix}", [url], name, protocol, max_batch_size=8,
                parameters=parameters,
            )  # fmt: skip
    # No batch dimension of its own: a batch of 9 passes here and the remote refuses it.
    write_remote(repository, "fp32_unbatched", [gateway.grpc_url], "identity_fp32")
    server = start_server(repository, log_dir=tmp_path_factory.mktemp("remote-front-logs"))
    yield server
    assert server.stop() == 0, server.log()


CASES = [
    (datatype, suffix, client)
    for datatype in IDENTITY_DATA
    for suffix, _, _ in WIRES
    for client in ("http", "grpc")
    if not (suffix == "json" and datatype == "BF16")
]


@pytest.mark.parametrize(("datatype", "wire", "protocol"), CASES)
def test_every_datatype_round_trips_through_the_remote(front, datatype, wire, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = front.http_url if protocol == "http" else front.grpc_url
    client = module.InferenceServerClient(url)
    data = np.repeat(IDENTITY_DATA[datatype], 2, axis=0)
    tensor = module.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    result = client.infer(f"identity_{datatype.lower()}_{wire}", [tensor])
    out = result.as_numpy("OUTPUT0")
    assert out.shape == data.shape
    if datatype == "BF16":
        np.testing.assert_array_equal(out.view(np.uint16), data.view(np.uint16))
    elif datatype == "BYTES":
        assert out.tolist() == data.tolist()
    else:
        np.testing.assert_array_equal(out, data)
    client.close()


def test_metadata_and_config_come_from_the_remote(front):
    client = httpclient.InferenceServerClient(front.http_url)
    metadata = client.get_model_metadata("identity_fp32_grpc")
    assert metadata["platform"] == "remote"
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]
    config = client.get_model_config("identity_fp32_http")
    assert config["backend"] == "remote" and config["max_batch_size"] == 8
    assert [t["name"] for t in config["output"]] == ["OUTPUT0"]


def test_a_remote_error_is_the_requests_own(front, gateway):
    """The remote's 400 reaches the client as a 400, naming the remote and what was
    wrong; the endpoint stays in, and the next request is served."""
    client = httpclient.InferenceServerClient(front.http_url)
    data = np.zeros((9, 2), dtype=np.float32)  # over the remote's max_batch_size of 8
    tensor = httpclient.InferInput("INPUT0", [9, 2], "FP32")
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("fp32_unbatched", [tensor])
    assert raised.value.status() == "400"
    assert f"remote grpc://{gateway.grpc_url}" in raised.value.message()
    assert "batch" in raised.value.message()
    tensor = httpclient.InferInput("INPUT0", [2, 2], "FP32")
    tensor.set_data_from_numpy(data[:2])
    assert client.infer("fp32_unbatched", [tensor]).as_numpy("OUTPUT0").shape == (2, 2)


def test_a_remote_answering_503_stays_in(server_factory, tmp_path):
    """A remote's own 503 (its model unloaded) fails the request with a 503, and takes
    nothing out: once the model is back there, the next request is served at once."""
    back = tmp_path / "back"
    simple.build(back)
    remote = server_factory(back, "--model-control-mode", "explicit", "--load-model", "simple")
    repository = tmp_path / "front"
    write_remote(
        repository, "simple", [remote.grpc_url], parameters={"health_interval_ms": "600000"}
    )
    front = server_factory(repository)
    client = grpcclient.InferenceServerClient(front.grpc_url)
    inputs, _ = simple_inputs(grpcclient)
    client.infer("simple", inputs)
    httpclient.InferenceServerClient(remote.http_url).unload_model("simple")
    with pytest.raises(InferenceServerException) as raised:
        client.infer("simple", inputs)
    assert raised.value.status() == "StatusCode.UNAVAILABLE"
    assert f"remote grpc://{remote.grpc_url}" in raised.value.message()
    httpclient.InferenceServerClient(remote.http_url).load_model("simple")
    client.infer("simple", inputs)  # no health check in between: it was never out


# ---- remotes that go away ----------------------------------------------------------


def _restart(server: GatewayProcess, repository: Path, log_dir: Path) -> GatewayProcess:
    from tests.conftest import start_server

    ports = (server.http_port, server.grpc_port, server.metrics_port)
    return start_server(repository, log_dir=log_dir, ports=ports)


def _load(url: str, model: str, requests: int, threads: int) -> tuple[list[float], list[str]]:
    """`requests` requests from each of `threads` clients: the answer times, the failures."""
    answered: list[float] = []
    failures: list[str] = []

    def client_loop() -> None:
        client = grpcclient.InferenceServerClient(url)
        inputs, _ = simple_inputs(grpcclient)
        for _ in range(requests):
            try:
                client.infer(model, inputs, client_timeout=10)
                answered.append(time.monotonic())
            except InferenceServerException as exc:
                failures.append(f"{time.monotonic()}: {exc.status()} {exc.message()}")
        client.close()

    workers = [threading.Thread(target=client_loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return answered, failures


class _Phases:
    """Requests from `threads` clients until stop(). The test names its phase as it goes;
    each answer is counted under the phase its request was sent in, and each failure kept
    with the phases it was sent and failed in."""

    def __init__(self, url: str, model: str, threads: int) -> None:
        self.phase = "before"
        self.answered: dict[str, int] = {}
        self.failures: list[tuple[str, str, str]] = []  # (sent, failed, status and message)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client_loop, args=(url, model)) for _ in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def _client_loop(self, url: str, model: str) -> None:
        client = grpcclient.InferenceServerClient(url)
        inputs, _ = simple_inputs(grpcclient)
        while not self._stop.is_set():
            sent = self.phase
            try:
                client.infer(model, inputs, client_timeout=10)
                with self._lock:
                    self.answered[sent] = self.answered.get(sent, 0) + 1
            except InferenceServerException as exc:
                with self._lock:
                    self.failures.append((sent, self.phase, f"{exc.status()} {exc.message()}"))
        client.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def _executions(server: GatewayProcess, model: str) -> int:
    """Requests the model has answered on `server`."""
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics(model)["model_stats"][0]
    client.close()
    return stats["inference_count"]


def test_a_remote_killed_mid_load_fails_only_its_calls_then_comes_back(server_factory, tmp_path):
    back = tmp_path / "back"
    simple.build(back)
    remotes = [server_factory(back), server_factory(back)]
    front_repo = tmp_path / "front"
    write_remote(
        front_repo, "simple", [r.grpc_url for r in remotes], instances=4,
        parameters={"health_interval_ms": "200"},
    )  # fmt: skip
    front = server_factory(front_repo)
    load = _Phases(front.grpc_url, "simple", threads=4)
    restarted = None
    try:
        # Both remotes take calls.
        wait_until(lambda: all(_executions(r, "simple") > 0 for r in remotes), 30)
        load.phase = "killed"
        os.kill(remotes[1].process.pid, signal.SIGKILL)
        remotes[1].process.wait()
        # The front takes it out (on a call lost there, or its health check)...
        out = f"remote grpc://{remotes[1].grpc_url} is out"
        wait_until(lambda: out in front.log(), 30, front.log)
        # ... and the load goes on, on the other.
        load.phase = "out"
        wait_until(lambda: load.answered.get("out", 0) >= 20, 30, lambda: str(load.answered))
        load.phase = "restarting"
        restarted = _restart(remotes[1], back, tmp_path)
        # The restarted remote takes calls again once its health check passes.
        wait_until(lambda: _executions(restarted, "simple") > 0, 60, lambda: str(load.answered))
        load.phase = "back"
        wait_until(lambda: load.answered.get("back", 0) >= 20, 30, lambda: str(load.answered))
    finally:
        load.stop()
        if restarted is not None:
            restarted.stop()
    # Only calls out on the killed remote may fail: at most one per instance of the
    # front, each sent before the front took it out, failing after the kill, and naming
    # it. Nothing sent later fails: not while it is out, nor while it comes back.
    failures = load.failures
    assert len(failures) <= 4, failures
    assert all(sent in ("before", "killed") for sent, _, _ in failures), failures
    assert all(failed != "before" for _, failed, _ in failures), failures
    assert all(f"remote grpc://{remotes[1].grpc_url}" in f for _, _, f in failures), failures


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port nothing listens on, held bound (not listening) for the test: connections to
    it are refused, and no gateway started meanwhile can be given it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_an_unreachable_remote_answers_503_at_once_naming_it(server_factory, tmp_path, dead_port):
    port = dead_port
    repository = tmp_path / "front"
    write_remote(
        repository, "nowhere", [f"127.0.0.1:{port}"], "simple",
        parameters={"timeout_ms": "10000"},
    )  # fmt: skip
    # The config declares the signature, so the model loads with its remote down.
    text = (repository / "nowhere" / "config.pbtxt").read_text()
    text += (
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1, 16 ] },'
        ' { name: "INPUT1" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]\n'
    )
    (repository / "nowhere" / "config.pbtxt").write_text(text)
    front = server_factory(repository)
    for client in both_clients(front):
        module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
        inputs, _ = simple_inputs(module)
        for _ in range(3):
            with pytest.raises(InferenceServerException) as raised:
                client.infer("nowhere", inputs)
            assert raised.value.status() in ("503", "StatusCode.UNAVAILABLE")
            # At once: refused with the endpoint out (since the load found it down),
            # without a call that waits for a connection or the call's deadline.
            assert "no remote endpoint can take the call" in raised.value.message()
            assert f"127.0.0.1:{port}" in raised.value.message()


def test_a_remote_that_cannot_be_reached_at_load_and_declares_nothing_fails_to_load(
    server_factory, tmp_path, dead_port
):
    port = dead_port
    repository = tmp_path / "front"
    write_remote(repository, "unknown_signature", [f"127.0.0.1:{port}"], "simple")
    front = server_factory(repository)
    client = httpclient.InferenceServerClient(front.http_url)
    assert not client.is_model_ready("unknown_signature")
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert f"127.0.0.1:{port}" in index["unknown_signature"]["reason"]


def test_a_down_endpoint_is_skipped_and_the_call_tried_on_the_next(
    server_factory, tmp_path, dead_port
):
    back = tmp_path / "back"
    simple.build(back)
    remote = server_factory(back)
    repository = tmp_path / "front"
    endpoints = [f"127.0.0.1:{dead_port}", remote.grpc_url]
    write_remote(repository, "simple", endpoints, parameters={"health_interval_ms": "60000"})
    front = server_factory(repository)
    answered, failures = _load(front.grpc_url, "simple", 20, 2)
    assert failures == [] and len(answered) == 40


def test_the_front_batches_in_front_of_the_remote(server_factory, tmp_path):
    back = tmp_path / "back"
    simple.build(back)
    remote = server_factory(back)
    repository = tmp_path / "front"
    # A batch leaves when the 8th request arrives (8 clients, each waiting for its answer:
    # every round fills it), not when a short window runs out on a slow machine; the 5 s
    # window stays under the clients' 10 s timeout. Were the front not batching, each
    # request would run alone and the count below would fail.
    write_remote(
        repository, "simple", [remote.http_url], protocol="http", max_batch_size=8,
        dynamic_batching=DynamicBatching(
            max_queue_delay_us=5_000_000, preferred_batch_sizes=(8,), adaptive=False
        ),
        instances=1,
    )  # fmt: skip
    front = server_factory(repository)
    answered, failures = _load(front.grpc_url, "simple", 25, 8)
    assert failures == []
    stats = httpclient.InferenceServerClient(front.http_url).get_inference_statistics("simple")
    counts = stats["model_stats"][0]
    assert counts["execution_count"] < counts["inference_count"] / 2


def test_a_front_batch_larger_than_the_remote_takes_is_refused_at_load(server_factory, tmp_path):
    back = tmp_path / "back"
    simple.build(back)  # max_batch_size 8
    remote = server_factory(back)
    repository = tmp_path / "front"
    write_remote(repository, "simple", [remote.grpc_url], max_batch_size=16)
    front = server_factory(repository)
    index = httpclient.InferenceServerClient(front.http_url).get_model_repository_index()
    reason = {m["name"]: m for m in index}["simple"]["reason"]
    assert "batches at most 8" in reason and "max_batch_size" in reason
