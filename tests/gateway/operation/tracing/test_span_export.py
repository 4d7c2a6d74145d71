"""The loop's span export against a real OTLP/HTTP collector on 127.0.0.1 (a small
http.server that records what it is sent, and can be told to refuse)."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags

from gateway.operation.tracing.export import Batching, SpanExport
from gateway.operation.tracing.otlp_http import Destination

RESOURCE = Resource({"service.name": "accel-gateway"})
SCOPE = InstrumentationScope("accel_gateway", "1")


class Collector(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps the connection, as collectors do
    refusals: list[int] = []  # statuses to answer before accepting
    received: list[tuple[dict[str, str], ExportTraceServiceRequest]] = []
    framing = "chunked"  # how an accepting answer ends: chunked, length or 204
    drop_connections = False  # close each connection after answering, unannounced

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if Collector.refusals:
            status = Collector.refusals.pop(0)
            self.send_response(status)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"busy")
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        headers = {name.lower(): value for name, value in self.headers.items()}
        headers["x-connection"] = str(self.client_address[1])  # which connection it came on
        Collector.received.append((headers, ExportTraceServiceRequest.FromString(body)))
        if Collector.framing == "204":
            self.send_response(204)
            self.end_headers()
        elif Collector.framing == "length":
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"\x0a\x00")
        else:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"2\r\n\x0a\x00\r\n0\r\n\r\n")
        self.close_connection = Collector.drop_connections

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    Collector.refusals, Collector.received = [], []
    Collector.framing, Collector.drop_connections = "chunked", False
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()
    server.server_close()


def spans(count: int, start: int = 1) -> list[ReadableSpan]:
    return [
        ReadableSpan(
            f"span {i}",
            SpanContext(i, i, False, TraceFlags(TraceFlags.SAMPLED)),
            resource=RESOURCE,
            instrumentation_scope=SCOPE,
            start_time=i,
            end_time=i + 1,
        )  # fmt: skip
        for i in range(start, start + count)
    ]


def names() -> list[str]:
    return [
        span.name
        for _, request in Collector.received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


async def received(count: int, timeout_s: float = 10.0) -> None:
    """Until the collector holds `count` spans; at most `timeout_s` (then the caller's
    assertion tells what came)."""
    deadline = time.monotonic() + timeout_s
    while len(names()) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def export(url: str, **batching) -> SpanExport:
    return SpanExport(Destination(url), Batching(**batching))


def test_a_full_batch_leaves_at_once_and_close_sends_the_rest(collector: str) -> None:
    async def run() -> None:
        processor = export(collector, max_export_batch_size=4, schedule_delay_millis=60_000)
        for span in spans(6):
            processor.on_end(span)
        await received(4)  # the first four go without waiting the schedule's minute
        assert names() == [f"span {i}" for i in range(1, 5)]
        await processor.close()
        assert names() == [f"span {i}" for i in range(1, 7)]
        assert (processor.exported, processor.dropped, processor.failed) == (6, 0, 0)

    asyncio.run(run())


def test_the_schedule_sends_what_waits(collector: str) -> None:
    async def run() -> None:
        processor = export(collector, schedule_delay_millis=20)
        for span in spans(3):
            processor.on_end(span)
        await received(3)  # a batch short of full: the schedule sends it
        assert len(names()) == 3
        headers = Collector.received[0][0]
        assert headers["content-type"] == "application/x-protobuf"
        assert headers["user-agent"].startswith("accel-gateway/")
        await processor.close()

    asyncio.run(run())


def test_a_full_queue_drops_spans_and_counts_them(collector: str) -> None:
    async def run() -> None:
        processor = export(collector, max_queue_size=5, max_export_batch_size=5)
        for span in spans(8):  # no await between: the export cannot take any yet
            processor.on_end(span)
        assert processor.dropped == 3
        await processor.close()
        assert len(names()) == 5
        processor.on_end(spans(1)[0])  # after close, a span is dropped, not queued forever
        assert processor.dropped == 4

    asyncio.run(run())


def test_a_busy_collector_is_tried_again(collector: str) -> None:
    Collector.refusals = [503, 429]

    async def run() -> None:
        processor = export(collector)
        for span in spans(2):
            processor.on_end(span)
        await processor.close()
        assert names() == ["span 1", "span 2"] and processor.failed == 0

    asyncio.run(run())


def test_a_refusal_or_no_collector_loses_the_batch_not_the_server(
    collector: str, caplog: pytest.LogCaptureFixture
) -> None:
    Collector.refusals = [400]

    async def run() -> None:
        refused = export(collector)
        refused.on_end(spans(1)[0])
        await refused.close()
        assert refused.failed == 1 and names() == []
        unreachable = export("http://127.0.0.1:9/v1/traces")  # the discard port: closed
        unreachable.on_end(spans(1)[0])
        await unreachable.close()
        assert unreachable.failed == 1

    asyncio.run(run())
    assert "answered 400: busy" in caplog.text


def test_gzip_and_headers_from_the_environment(
    collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ml%20serving,Authorization=Bearer t")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    destination = Destination.from_environment()

    async def run() -> None:
        processor = SpanExport(destination, Batching())
        for span in spans(2):
            processor.on_end(span)
        await processor.close()

    asyncio.run(run())
    headers = Collector.received[0][0]
    assert headers["content-encoding"] == "gzip"
    assert headers["x-team"] == "ml serving" and headers["authorization"] == "Bearer t"
    assert len(names()) == 2


def test_a_url_of_our_own_is_ours_whatever_protocol_other_sdks_are_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert Destination.from_environment("http://given:1/x").url == "http://given:1/x"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "HTTP/protobuf")
    assert Destination.from_environment().url.endswith("/v1/traces")  # the traces' own wins


def test_the_endpoint_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert Destination.from_environment().url == "http://collector:4318/v1/traces"
    assert Destination.from_environment("http://given:1/x").url == "http://given:1/x"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    assert Destination.from_environment().url == "http://localhost:4318/v1/traces"


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli", "use gzip, deflate or none"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "is not seconds"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc", "TRACES_PROTOCOL is 'grpc'"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "over HTTP/protobuf only"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318", "is not an http"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", "No such file"),
    ],
)
def test_a_bad_destination_says_what_is_wrong(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, words: str
) -> None:
    monkeypatch.setenv(variable, value)
    if variable == "OTEL_EXPORTER_OTLP_CERTIFICATE":
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector:4318/v1")
    with pytest.raises((ValueError, OSError), match=words):
        Destination.from_environment()


def test_batching_takes_the_command_line_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4096")
    batching = Batching.resolve({"max_queue_size": 100})
    assert batching.schedule_delay_millis == 250
    assert batching.max_queue_size == 100 and batching.max_export_batch_size == 100
    assert Batching.resolve({}).max_export_batch_size == 512
    with pytest.raises(ValueError, match="larger than max_queue_size 10"):
        Batching.resolve({"max_queue_size": 10, "max_export_batch_size": 20})
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "later")
    with pytest.raises(ValueError, match="OTEL_BSP_EXPORT_TIMEOUT='later' is not an integer"):
        Batching.resolve({})


def test_a_span_that_cannot_be_encoded_is_dropped_alone(collector: str) -> None:
    async def run() -> None:
        processor = export(collector)
        broken = spans(1)[0]
        broken._name = None  # no name to write: encoding fails
        processor.on_end(broken)
        processor.on_end(spans(1, start=2)[0])
        await processor.close()
        assert processor.dropped == 1 and names() == ["span 2"]

    asyncio.run(run())


def test_close_during_an_export_still_sends_what_is_behind_it(collector: str) -> None:
    async def run() -> None:
        processor = export(collector, max_export_batch_size=4, schedule_delay_millis=60_000)
        for span in spans(6):
            processor.on_end(span)
        for _ in range(1000):  # until the export task has taken the full batch
            if len(processor._queue) == 2:
                break
            await asyncio.sleep(0)
        await processor.close()
        assert sorted(names()) == sorted(f"span {i}" for i in range(1, 7))
        assert processor.exported == 6

    asyncio.run(run())


async def one_batch_each(collector: str) -> SpanExport:
    """Three spans, each its own batch, sent a moment apart on one connection."""
    processor = export(collector, max_export_batch_size=1)
    for span in spans(3):
        processor.on_end(span)
        await asyncio.sleep(0.05)
    await processor.close()
    return processor


@pytest.mark.parametrize("framing", ["chunked", "length", "204"])
def test_every_answer_framing_keeps_the_connection(collector: str, framing: str) -> None:
    Collector.framing = framing

    started = time.monotonic()
    processor = asyncio.run(one_batch_each(collector))
    assert processor.exported == 3 and processor.failed == 0
    assert time.monotonic() - started < 5  # no answer waited out to its timeout
    assert len({headers["x-connection"] for headers, _ in Collector.received}) == 1


def test_a_connection_the_collector_dropped_is_opened_again(collector: str) -> None:
    Collector.drop_connections = True

    processor = asyncio.run(one_batch_each(collector))
    assert processor.exported == 3 and processor.failed == 0
    assert names() == ["span 1", "span 2", "span 3"]


def test_a_loop_gone_without_close_leaves_the_next_one_exporting(collector: str) -> None:
    processor = export(collector, max_export_batch_size=2)

    async def first() -> None:
        processor.on_end(spans(1)[0])
        await asyncio.sleep(0)

    async def second() -> None:
        for span in spans(3, start=2):
            processor.on_end(span)
        await processor.close()

    asyncio.run(first())  # the loop ends; the export task with it
    asyncio.run(second())
    assert sorted(names()) == ["span 1", "span 2", "span 3", "span 4"]


@pytest.mark.parametrize(
    ("url", "headers", "words"),
    [
        ("http://user:secret@collector:4318/v1/traces", {}, "carries a user and password"),
        ("http://collector:4318/v1/traces", {"x-a": "1\r\nx-b: 2"}, "line break or NUL"),
    ],
)
def test_a_destination_that_would_misbehave_is_refused(url: str, headers: dict, words: str):
    with pytest.raises(ValueError, match=words):
        Destination(url, headers).check()
