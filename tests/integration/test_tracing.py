"""Tracing end to end: a real gateway on 127.0.0.1 serving tritonclient over HTTP and gRPC.

The spans are read from OpenTelemetry's in-memory exporter, so these gateways run in this
process (on a thread of their own, with their own event loop); the OTLP test runs a
gateway process that exports to a collector in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tritonclient.utils import InferenceServerException

from gateway.launch import free_ports, start_gateway
from gateway.operation.tracing.settings import TraceSettings
from gateway.operation.tracing.tracer import Tracing
from gateway.server import Gateway, ServerOptions
from models import simple
from models.config_text import DynamicBatching

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


class Served:
    def __init__(self, http_port: int, grpc_port: int, exporter: InMemorySpanExporter) -> None:
        self.http_url = f"127.0.0.1:{http_port}"
        self.http = httpclient.InferenceServerClient(self.http_url)
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        self.exporter = exporter

    def spans(self, name: str | None = None) -> list:
        found = self.exporter.get_finished_spans()
        return [s for s in found if name is None or s.name == name]


@contextlib.contextmanager
def in_process_gateway(repository: Path, settings: TraceSettings) -> Iterator[Served]:
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    http_port, grpc_port, metrics_port = free_ports(3)
    options = ServerOptions(
        model_repository=repository, http_port=http_port, grpc_port=grpc_port,
        metrics_port=metrics_port, tracing=Tracing(settings, processor=processor),
    )  # fmt: skip
    gateway = Gateway(options)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(120)
        yield Served(http_port, grpc_port, exporter)
    finally:
        asyncio.run_coroutine_threadsafe(gateway.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        processor.shutdown()


def simple_inputs(module) -> list:
    inputs = [
        module.InferInput("INPUT0", [1, 16], "INT32"),
        module.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    return inputs


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tracing")
    simple.build(root)
    # A batch of 8 leaves when the 8th request arrives (8 is max_batch_size and preferred),
    # never on a timer: the 30 s window only has to outlast the sends (tritonclient sleeps
    # 10 ms after each, and this server shares the test's process), however slow the machine.
    simple.build(
        root,
        "simple_batched",
        DynamicBatching(max_queue_delay_us=30_000_000, preferred_batch_sizes=(8,), adaptive=False),
    )
    return root


@pytest.fixture(scope="module")
def served(repository) -> Iterator[Served]:
    with in_process_gateway(repository, TraceSettings(("TIMESTAMPS",), rate=1)) as served:
        yield served


@pytest.fixture(autouse=True)
def fresh_spans(request) -> None:
    if "served" in request.fixturenames:
        request.getfixturevalue("served").exporter.clear()


def spans_of(served: Served, root) -> dict[str, list]:
    """The spans under `root` (its trace), by name."""
    found: dict[str, list] = {}
    for span in served.spans():
        if span.context.trace_id == root.context.trace_id and span is not root:
            found.setdefault(span.name, []).append(span)
    return found


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_is_one_trace_from_front_to_response(served: Served, protocol: str) -> None:
    client, module = (served.http, httpclient) if protocol == "http" else (served.grpc, grpcclient)
    client.infer("simple", simple_inputs(module), request_id="req-7")
    (root,) = served.spans("infer simple")
    assert root.attributes["model.name"] == "simple"
    assert root.attributes["model.version"] == "1"  # asked for "" (the latest): served by 1
    assert root.attributes["request.id"] == "req-7"
    assert root.attributes["rpc.system"] == protocol
    assert root.parent is None  # no traceparent: a trace of its own
    children = spans_of(served, root)
    assert sorted(children) == ["batch", "instance run", "queue", "response"]
    batch = children["batch"][0]
    assert batch.parent.span_id == root.context.span_id
    assert batch.attributes["batch.size"] == 1 and batch.attributes["model.version"] == "1"
    run = children["instance run"][0]
    assert run.parent.span_id == batch.context.span_id
    assert dict(run.attributes) == {"model.name": "simple", "batch.size": 1}
    assert batch.start_time <= run.start_time <= run.end_time <= batch.end_time
    queue = children["queue"][0]
    assert dict(queue.attributes) == {"model.name": "simple", "model.version": "1"}
    assert root.start_time <= queue.start_time <= queue.end_time <= batch.start_time
    response = children["response"][0]
    assert batch.end_time <= response.start_time <= response.end_time <= root.end_time


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_traceparent_continues_the_callers_trace(served: Served, protocol: str) -> None:
    client, module = (served.http, httpclient) if protocol == "http" else (served.grpc, grpcclient)
    client.infer("simple", simple_inputs(module), headers={"traceparent": TRACEPARENT})
    (root,) = served.spans("infer simple")
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert format(root.parent.span_id, "016x") == PARENT_ID
    assert root.parent.is_remote
    assert all(format(s.context.trace_id, "032x") == TRACE_ID for s in served.spans())


def test_a_batch_span_links_every_request_it_served(served: Served) -> None:
    client = httpclient.InferenceServerClient(served.http_url, concurrency=8)
    pending = [client.async_infer("simple_batched", simple_inputs(httpclient)) for _ in range(8)]
    for call in pending:
        call.get_result()
    client.close()
    requests = served.spans("infer simple_batched")
    (batch,) = served.spans("batch")
    assert len(requests) == 8
    assert batch.attributes["batch.size"] == 8 and batch.attributes["batch.requests"] == 8
    linked = {link.context.span_id for link in batch.links}
    assert linked == {r.context.span_id for r in requests}
    # Its parent is one of them; each request has its own queue and response spans.
    assert batch.parent.span_id in linked
    assert len(served.spans("queue")) == len(served.spans("response")) == 8


def test_a_failed_request_ends_its_span_with_the_error(served: Served) -> None:
    bad = httpclient.InferInput("INPUT0", [1, 3], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.int32))
    with pytest.raises(InferenceServerException):
        served.http.infer("simple", [bad, simple_inputs(httpclient)[1]])
    (root,) = served.spans("infer simple")
    assert root.status.status_code.name == "ERROR"
    assert root.attributes["error.type"] == "InvalidArgument"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_trace_settings_through_tritonclient(served: Served, protocol: str) -> None:
    client, module = (served.http, httpclient) if protocol == "http" else (served.grpc, grpcclient)

    def settings(model: str = "") -> dict:
        if protocol == "http":
            return client.get_trace_settings(model_name=model or None)
        answer = client.get_trace_settings(model_name=model or None, as_json=True)["settings"]
        return {k: v["value"] if k == "trace_level" else v["value"][0] for k, v in answer.items()}

    assert (
        "trace"
        in client.get_server_metadata(**({} if protocol == "http" else {"as_json": True}))[
            "extensions"
        ]
    )
    assert settings()["trace_level"] == ["TIMESTAMPS"]
    try:
        client.update_trace_settings(model_name="simple", settings={"trace_rate": "2"})
        assert settings("simple")["trace_rate"] == "2"
        assert settings()["trace_rate"] == "1"
        for _ in range(6):
            client.infer("simple", simple_inputs(module))
        assert len(served.spans("infer simple")) == 3  # 1 of 2
        client.update_trace_settings(model_name="simple", settings={"trace_level": ["OFF"]})
        served.exporter.clear()
        client.infer("simple", simple_inputs(module))
        assert served.spans() == []
        assert settings("simple")["trace_level"] == ["OFF"]
        # A count: that many more traces, then none, and the setting reads what is left.
        client.update_trace_settings(
            model_name="simple",
            settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "2"},
        )
        for _ in range(4):
            client.infer("simple", simple_inputs(module))
        assert len(served.spans("infer simple")) == 2
        assert settings("simple")["trace_count"] == "0"
    finally:
        client.update_trace_settings(
            model_name="simple",
            settings={"trace_rate": None, "trace_level": None, "trace_count": None},
        )
    assert settings("simple") == settings()
    with pytest.raises(InferenceServerException, match="trace_rate must be at least 1"):
        client.update_trace_settings(settings={"trace_rate": "0"})
    with pytest.raises(InferenceServerException, match="no model 'nope'"):
        client.update_trace_settings(model_name="nope", settings={"trace_rate": "5"})


def test_off_by_default_makes_no_spans(repository: Path) -> None:
    with in_process_gateway(repository, TraceSettings()) as served:
        served.http.infer("simple", simple_inputs(httpclient))
        served.grpc.infer("simple", simple_inputs(grpcclient))
        assert served.spans() == []
        assert served.http.get_trace_settings()["trace_level"] == ["OFF"]


class _Collector(BaseHTTPRequestHandler):
    received: list[ExportTraceServiceRequest] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(ExportTraceServiceRequest.FromString(body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("workers", ["1", "2"])
def test_spans_leave_over_otlp_from_a_gateway_process(
    repository: Path, tmp_path: Path, workers: str
) -> None:
    """With front processes, the model host traces each request from where it takes it."""
    _Collector.received = []
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    url = f"127.0.0.1:{collector.server_address[1]}/v1/traces"
    server = start_gateway(
        repository, "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
        "--trace-config", f"opentelemetry,url={url}",
        "--trace-config", "opentelemetry,bsp_schedule_delay=50", "--workers", workers,
        log_path=tmp_path / "gateway.log",
    )  # fmt: skip
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        client.infer("simple", simple_inputs(grpcclient), headers={"traceparent": TRACEPARENT})
        deadline = time.monotonic() + 10
        names: set[str] = set()
        while time.monotonic() < deadline and "infer simple" not in names:
            time.sleep(0.1)
            spans = [
                span
                for export in _Collector.received
                for resource in export.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            ]
            names = {span.name for span in spans}
        assert {"infer simple", "queue", "batch", "instance run", "response"} <= names
        root = next(span for span in spans if span.name == "infer simple")
        assert root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == PARENT_ID
        protocol = next(a.value.string_value for a in root.attributes if a.key == "rpc.system")
        assert protocol == ("grpc" if workers == "1" else "front")
        service = {
            a.key: a.value.string_value
            for a in _Collector.received[0].resource_spans[0].resource.attributes
        }
        assert service["service.name"] == "accel-gateway"
    finally:
        server.stop()
        collector.shutdown()


def test_each_request_of_a_grpc_stream_is_traced(served: Served) -> None:
    answers: list = []
    done = threading.Event()

    def callback(result, error) -> None:
        answers.append(error or result)
        if len(answers) == 3:
            done.set()

    served.grpc.start_stream(callback, headers={"traceparent": TRACEPARENT})
    try:
        for index in range(3):
            served.grpc.async_stream_infer(
                "simple", simple_inputs(grpcclient), request_id=str(index)
            )
        assert done.wait(10)
    finally:
        served.grpc.stop_stream()
    roots = served.spans("infer simple")
    assert sorted(r.attributes["request.id"] for r in roots) == ["0", "1", "2"]
    assert all(format(r.parent.span_id, "016x") == PARENT_ID for r in roots)
    assert len(served.spans("batch")) == len(served.spans("response")) == 3
