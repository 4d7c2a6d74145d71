"""The gateway's OTLP encoder against OpenTelemetry's own: the same spans must make the
same ExportTraceServiceRequest, field for field."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from gateway.operation.tracing import otlp

RESOURCE = Resource({"service.name": "accel-gateway", "service.version": "1.0"})
SCOPE = InstrumentationScope("accel_gateway", "1.0")


def context(span_id: int, remote: bool = False, state: TraceState | None = None) -> SpanContext:
    trace_id = 0x4BF92F3577B34DA6A3CE929D0E0E4736
    return SpanContext(trace_id, span_id, remote, TraceFlags(TraceFlags.SAMPLED), state)


def make(name: str = "infer simple", **kwargs) -> ReadableSpan:
    values = {
        "context": context(0x1111), "resource": RESOURCE, "instrumentation_scope": SCOPE,
        "kind": SpanKind.INTERNAL, "start_time": 1_700_000_000_000_000_000,
        "end_time": 1_700_000_000_000_123_456, "status": Status(StatusCode.UNSET),
    }  # fmt: skip
    values.update(kwargs)
    return ReadableSpan(name, **values)


SPANS = {
    "plain": [make()],
    "a remote parent and a trace state": [
        make(
            parent=context(0x2222, remote=True),
            context=context(0x3333, state=TraceState([("vendor", "x1"), ("other", "y")])),
            kind=SpanKind.SERVER,
        )
    ],
    "every attribute type": [
        make(
            attributes={
                "text": "simple",
                "empty": "",
                "yes": True,
                "no": False,
                "one": 1,
                "minus": -7,
                "large": 2**62,
                "ratio": 0.25,
                "raw": b"\x00\x01",
                "names": ("a", "b"),
                "numbers": [1, 2, 3],
                "flags": [True, False],
                "unicode": "modèle",
            }
        )
    ],  # fmt: skip
    "links, events and an error": [
        make(
            links=[Link(context(0x4444), {"batch.index": 0}), Link(context(0x5555, True))],
            events=[Event("retry", {"attempt": 2}, timestamp=1_700_000_000_000_000_500)],
            status=Status(StatusCode.ERROR, "InvalidArgument: bad input"),
        )
    ],
    "two scopes and two resources": [
        make(),
        make(instrumentation_scope=InstrumentationScope("other", "2", "https://schema")),
        make(resource=Resource({"service.name": "other"}, "https://resource-schema")),
    ],
    "a long name": [make("x" * 300, parent=context(0x6666))],
}


@pytest.mark.parametrize("case", list(SPANS))
def test_the_same_request_as_opentelemetrys_encoder(case: str) -> None:
    spans = SPANS[case]
    encoded = [(s.resource, s.instrumentation_scope, otlp.span(s)) for s in spans]
    ours = ExportTraceServiceRequest.FromString(otlp.export_request(encoded))
    assert ours == encode_spans(spans)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**35, 2**63 - 1, -1, -(2**63)])
def test_varints_decode_to_their_value(value: int) -> None:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    decoded = AnyValue.FromString(b"\x18" + otlp.varint(value))
    assert decoded.int_value == value


def test_a_cached_attribute_keeps_its_type() -> None:
    """True, 1 and 1.0 are equal keys to a dict: the cache must not mix them up."""
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    values = [KeyValue.FromString(otlp.key_value("k", v)).value for v in (1, True, 1.0)]
    assert [v.WhichOneof("value") for v in values] == ["int_value", "bool_value", "double_value"]
    ints, bools = (
        KeyValue.FromString(otlp.key_value("t", v)).value for v in [(1, 0), (True, False)]
    )
    assert [v.WhichOneof("value") for v in bools.array_value.values] == ["bool_value"] * 2
    assert [v.WhichOneof("value") for v in ints.array_value.values] == ["int_value"] * 2
    zero = KeyValue.FromString(otlp.key_value("z", 0.0)).value.double_value
    assert str(KeyValue.FromString(otlp.key_value("z", -0.0)).value.double_value) == "-0.0"
    assert str(zero) == "0.0"


@pytest.mark.parametrize("value", [2**64 + 5, -(2**63) - 1])
def test_an_integer_past_64_bits_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match="does not fit 64 bits"):
        otlp.varint(value)
