"""backends/torchserve/predict.py against `ts` itself: the batch a handler sees is the one
ts's reader makes of the frontend's bytes, and each answer is what ts's writer encodes
(Service.predict's bytes, read back), for every kind of value and failure."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

ts_messages = pytest.importorskip("ts.protocol.otf_message_handler")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import ts  # noqa: E402
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl  # noqa: E402
from ts.service import Service  # noqa: E402
from ts.utils.util import PredictionException  # noqa: E402

from backends.torchserve import otf  # noqa: E402
from backends.torchserve.predict import predict, ts_batch  # noqa: E402

_INT = struct.Struct("!i")


def _field(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


def frontend_frame(requests: list[otf.TsRequest]) -> bytes:
    """The predict command as TorchServe's frontend writes it (lengths big-endian, -1
    ending each list): what ts's reader was made for."""
    end, parts = _INT.pack(-1), [b"I"]
    for request in requests:
        parts.append(_field(request.request_id.encode()))
        for name, value in request.headers:
            parts += (_field(name.encode()), _field(value.encode()))
        parts.append(end)
        for name, content_type, value in request.inputs:
            parts += (_field(name.encode()), _field(content_type.encode()), _field(value))
        parts.append(end)
    return b"".join([*parts, end])


class Socket:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)

    def recv(self, size: int) -> bytes:
        chunk, self.data = self.data[:size], self.data[size:]
        return bytes(chunk)


def read_by_ts(requests: list[otf.TsRequest]) -> list[dict]:
    command, batch = ts_messages.retrieve_msg(Socket(frontend_frame(requests)))
    assert command == b"I"
    return batch


REQUESTS = [
    otf.TsRequest("a", [("X-Echo", "hé")],
                  [("q", "", b"1"), ("body", "application/json", b'{"k": [2, 1e-07]}')]),
    otf.TsRequest("b", [], [("body", "text/plain", "héllo".encode())]),
    otf.TsRequest("c", [], [("body", "", b"\x00\xff")]),
    otf.TsRequest("d", [], [("body", "application/json", b"{not json")]),
    otf.TsRequest("e", [], [("body", "text/csv", b"\xff\xfe")]),
    otf.TsRequest("f", [("a", "1"), ("b", "2")], [("file", "image/png", b"\x89PNG")]),
]  # fmt: skip


def _typed(value):
    """A value with its type at every level (b"x" == bytearray(b"x"): a handler that
    writes into its input tells them apart)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def test_the_batch_is_what_ts_reads_from_the_frontend():
    assert _typed(ts_batch(REQUESTS)) == _typed(read_by_ts(REQUESTS))


@pytest.mark.parametrize("setting", ["false", "true"])
def test_ts_decode_input_request_is_honoured(monkeypatch, setting):
    monkeypatch.setenv("TS_DECODE_INPUT_REQUEST", setting)
    batch = ts_batch(REQUESTS)
    assert _typed(batch) == _typed(read_by_ts(REQUESTS))
    assert isinstance(batch[0]["parameters"][1]["value"], bytearray) == (setting == "false")


def _service(handle) -> Service:
    metrics = MetricsCacheYamlImpl(
        config_file_path=str(Path(ts.__file__).parent / "configs" / "metrics.yaml")
    )
    metrics.initialize_cache()
    return Service("m", "/tmp", None, handle, None, 4, metrics_cache=metrics)


def both(handle, requests=REQUESTS[:3]) -> tuple[tuple, tuple]:
    """(ours, ts's) for one batch through `handle`."""
    ours_service, ts_service = _service(handle), _service(handle)
    for service in (ours_service, ts_service):
        service.set_cl_socket(None)
    ours = predict(ours_service, ts_batch(requests))
    theirs = otf.decode_predict_response(bytes(ts_service.predict(read_by_ts(requests))))
    return ours, theirs


def test_each_kind_of_value_is_answered_as_ts_encodes_it():
    def handle(data, context):
        context.set_response_status(201, "Made", 1)
        context.set_response_content_type(2, "application/x-thing")
        context.set_response_header(0, "x-k", "v")
        return [{"p": [0.1, 2.5e-07, 1e-05, float("nan")], "é": "ü"}, "text é",
                torch.arange(3)]  # fmt: skip

    ours, theirs = both(handle)
    assert ours == theirs
    assert ours[2][1].status == 201 and ours[2][0].headers == {"x-k": "v"}

    def raw(data, context):
        return [b"\x00", bytearray(b"\x01"), [1, {"a": None}]]

    ours, theirs = both(raw)
    assert ours == theirs


def test_a_status_is_answered_as_the_int_ts_writes():
    def handle(data, context):
        context.set_response_status(np.int64(201), "Made", 0)
        context.set_response_status(True, "", 1)
        return ["x", "y", "z"]

    ours, theirs = both(handle)
    assert ours == theirs
    assert [type(a.status) for a in ours[2]] == [int, int, int]


def test_a_handler_failing_outside_its_output_fails_as_in_ts():
    """Only an answer that is no JSON is ts's 503 "Unsupported model output data type";
    a stopping criterion that raises fails the batch, there and here."""

    def handle(data, context):
        context.stopping_criteria = [None, None, None]  # not callable: TypeError
        return ["x", "y", "z"]

    theirs, ours = _service(handle), _service(handle)
    for service in (theirs, ours):
        service.set_cl_socket(None)
    with pytest.raises(TypeError):
        theirs.predict(read_by_ts(REQUESTS[:3]))
    with pytest.raises(TypeError):
        predict(ours, ts_batch(REQUESTS[:3]))


def test_the_last_of_a_stream_is_marked_as_ts_marks_it():
    def handle(data, context):
        context.set_response_header(0, "ts_stream_next", "true")
        return ["x", "y", "z"]

    ours, theirs = both(handle)
    assert ours == theirs and ours[2][0].headers == {"ts_stream_next": "false"}


def _raises(error):
    def handle(data, context):
        raise error

    return handle


@pytest.mark.parametrize(
    "handle, code",
    [
        (_raises(PredictionException("teapot", 418)), 418),
        (_raises(MemoryError()), 507),
        (_raises(RuntimeError("CUDA error: out of memory")), 507),
        (_raises(ValueError("bad")), 503),
        (lambda data, context: "not a list", 503),
        (lambda data, context: ["one"], 503),  # three requests, one answer
        (lambda data, context: [{1, 2}, "x", "y"], 503),  # a set is not JSON
    ],
)
def test_failures_are_answered_as_ts_answers_them(handle, code):
    ours, theirs = both(handle)
    assert ours == theirs
    assert ours[0] == code and all(a.body == b"error" for a in ours[2])


def test_request_headers_are_read_once_per_text_and_large_ones_not_kept():
    from backends.torchserve.backend import MAX_CACHED_HEADERS, _headers, _request_headers

    _headers.cache_clear()
    text = json.dumps([["host", "a"], ["x-id", "1"]])
    assert _request_headers(text) == [("host", "a"), ("x-id", "1")]
    first = _request_headers(text)
    first.append(("changed", "by a caller"))  # a caller's list is its own
    assert _request_headers(text) == [("host", "a"), ("x-id", "1")]
    assert _headers.cache_info().currsize == 1
    large = json.dumps([["x-large", "a" * MAX_CACHED_HEADERS]])
    assert _request_headers(large) == [("x-large", "a" * MAX_CACHED_HEADERS)]
    assert _headers.cache_info().currsize == 1
    for bad in ('{"not": "pairs"}', '[["one"]]', "[[1, 2]]", "not json", ["a", "b"], 7):
        with pytest.raises(ValueError):
            _request_headers(bad)
    assert _headers.cache_info().currsize == 1
