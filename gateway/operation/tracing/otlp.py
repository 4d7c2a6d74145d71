"""Finished spans as an OTLP ExportTraceServiceRequest, in protobuf's wire format.

Written out byte by byte rather than through the generated messages: the SDK's encoder
builds a protobuf object per span, attribute and link, about 25 us a span on one core,
and its export then holds the GIL on the exporter's thread while the event loop waits.
These bytes cost a few us a span, on the loop, as each span ends (export.py). The
messages and field numbers are opentelemetry-proto's (trace/v1, common/v1,
resource/v1, collector/trace/v1); what goes in each field is what the SDK's own encoder
puts there, so a collector sees the same request either way (the tests compare them).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanKind

from accel_base.protobuf_wire import varint

_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")
_DOUBLE = struct.Struct("<d")
# Span.SpanKind's numbers: 0 is unspecified.
_KINDS = {
    SpanKind.INTERNAL: 1, SpanKind.SERVER: 2, SpanKind.CLIENT: 3, SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}  # fmt: skip
# SpanFlags: the span says whether its parent is remote, and whether it is.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
# Encoded key-value pairs seen before (attribute names and values repeat: model names,
# versions, protocols); bounded, cleared when full.
_KEY_VALUES: dict[tuple[str, type, Any], bytes] = {}
_KEY_VALUES_MAX = 4096
# Only these types: equal values of them encode the same (not so 0.0 and -0.0, or the
# tuples (1, 0) and (True, False)), with the type in the key as True == 1.
_CACHED = frozenset({str, int, bool})


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes or message); `tag` already encoded."""
    return tag + varint(len(payload)) + payload


def _text(tag: bytes, text: str) -> bytes:
    return _field(tag, text.encode()) if text else b""


def any_value(value: Any) -> bytes:
    """An AnyValue's body (common/v1): the value's own field, by Python type."""
    if isinstance(value, bool):  # before int: bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Mapping):  # KeyValueList, values in field 1
        return _field(b"\x32", attributes(value, b"\x0a"))
    if isinstance(value, Sequence):  # ArrayValue, values in field 1
        return _field(b"\x2a", b"".join(_field(b"\x0a", any_value(v)) for v in value))
    return _field(b"\x0a", str(value).encode())


def key_value(key: str, value: Any) -> bytes:
    """A KeyValue's body: key (1) and value (2)."""
    encoded = _KEY_VALUES.get((key, type(value), value)) if type(value) in _CACHED else None
    if encoded is not None:
        return encoded
    encoded = _field(b"\x0a", key.encode()) + _field(b"\x12", any_value(value))
    if type(value) not in _CACHED:
        return encoded
    if len(_KEY_VALUES) >= _KEY_VALUES_MAX:
        _KEY_VALUES.clear()
    _KEY_VALUES[key, type(value), value] = encoded
    return encoded


def attributes(values: Mapping[str, Any] | None, tag: bytes) -> bytes:
    """Repeated KeyValue fields under `tag`."""
    if not values:
        return b""
    return b"".join(_field(tag, key_value(k, v)) for k, v in values.items())


def _flags(tag: bytes, parent: Any) -> bytes:
    """SpanFlags, a fixed32 (Span's field 16, Link's 6)."""
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if parent is not None and parent.is_remote else 0)
    return tag + _FIXED32.pack(flags)


def span(s: Any) -> bytes:
    """A Span's body (trace/v1) from an SDK ReadableSpan."""
    context = s.context
    parent = s.parent
    parts = [
        b"\x0a\x10", context.trace_id.to_bytes(16, "big"),
        b"\x12\x08", context.span_id.to_bytes(8, "big"),
    ]  # fmt: skip
    state = context.trace_state
    if state:
        parts.append(_text(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items())))
    if parent is not None:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    parts += (
        _field(b"\x2a", s.name.encode()),
        b"\x30", bytes((_KINDS.get(s.kind, 0),)),
        b"\x39", _FIXED64.pack(s.start_time or 0),
        b"\x41", _FIXED64.pack(s.end_time or 0),
        attributes(s.attributes, b"\x4a"),
    )  # fmt: skip
    if s.dropped_attributes:
        parts += (b"\x50", varint(s.dropped_attributes))
    for event in s.events:
        body = _FIXED64.pack(event.timestamp or 0)
        body = b"\x09" + body + _text(b"\x12", event.name) + attributes(event.attributes, b"\x1a")
        if event.dropped_attributes:
            body += b"\x20" + varint(event.dropped_attributes)
        parts.append(_field(b"\x5a", body))
    if s.dropped_events:
        parts += (b"\x60", varint(s.dropped_events))
    for link in s.links:
        linked = link.context
        body = b"\x0a\x10" + linked.trace_id.to_bytes(16, "big")
        body += b"\x12\x08" + linked.span_id.to_bytes(8, "big")
        body += attributes(link.attributes, b"\x22")
        if link.dropped_attributes:
            body += b"\x28" + varint(link.dropped_attributes)
        parts.append(_field(b"\x6a", body + _flags(b"\x35", linked)))
    if s.dropped_links:
        parts += (b"\x70", varint(s.dropped_links))
    status = s.status
    if status is not None:  # always written, as the SDK does: an UNSET one is empty
        body = _text(b"\x12", status.description or "")
        code = status.status_code.value
        parts.append(_field(b"\x7a", body + (b"\x18" + varint(code) if code else b"")))
    parts.append(_flags(b"\x85\x01", parent))
    return b"".join(parts)


def export_request(spans: Iterable[tuple[Any, Any, bytes]]) -> bytes:
    """An ExportTraceServiceRequest from (resource, instrumentation scope, encoded span)
    triples: one ResourceSpans per resource, one ScopeSpans per scope in it, in the
    order they first come."""
    by_resource: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    for resource, scope, encoded in spans:
        scopes = by_resource.setdefault(id(resource), (resource, {}))[1]
        scopes.setdefault(id(scope), (scope, []))[1].append(encoded)
    out = []
    for resource, scopes in by_resource.values():
        body = _field(b"\x0a", attributes(resource.attributes, b"\x0a"))
        for scope, encoded in scopes.values():
            body += _field(b"\x12", _scope_spans(scope, encoded))
        body += _text(b"\x1a", resource.schema_url or "")
        out.append(_field(b"\x0a", body))
    return b"".join(out)


def _scope_spans(scope: Any, spans: Sequence[bytes]) -> bytes:
    """A ScopeSpans' body: its scope (1), its spans (2), the scope's schema (3)."""
    body = _field(b"\x0a", _scope(scope)) if scope is not None else b""
    body += b"".join(_field(b"\x12", s) for s in spans)
    if scope is not None and scope.schema_url:
        body += _text(b"\x1a", scope.schema_url)
    return body


def _scope(scope: Any) -> bytes:
    body = _text(b"\x0a", scope.name) + _text(b"\x12", scope.version or "")
    return body + attributes(getattr(scope, "attributes", None), b"\x1a")
