"""backends/torchserve/otf.py against TorchServe's own writer (`ts`)."""

from __future__ import annotations

import pytest

ts_messages = pytest.importorskip("ts.protocol.otf_message_handler")

from ts.context import Context, RequestProcessor  # noqa: E402

from backends.torchserve import otf  # noqa: E402


def test_we_read_what_ts_writes():
    context = Context("m", "/tmp", {}, 2, None, "0.12.0")
    context.request_ids = {0: "a", 1: "b"}
    context.request_processor = [RequestProcessor({}), RequestProcessor({})]
    context.set_response_status(201, "Created", 1)
    context.set_response_header(1, "x-k", "v")
    context.set_response_content_type(0, "text/plain")
    written = ts_messages.create_predict_response(
        ["text", {"n": 1}], {0: "a", 1: "b"}, "Prediction success", 200, context=context
    )
    code, message, answers = otf.decode_predict_response(bytes(written))
    assert (code, message) == (200, "Prediction success")
    assert [(a.request_id, a.status, a.reason) for a in answers] == [
        ("a", 200, ""),
        ("b", 201, "Created"),
    ]
    assert answers[0].body == b"text" and answers[0].headers["content-type"] == "text/plain"
    assert answers[1].body == b'{\n  "n": 1\n}' and answers[1].headers == {"x-k": "v"}


def test_a_failed_batch_reads_as_its_code_and_message():
    written = ts_messages.create_predict_response(None, {0: "a"}, "Prediction failed", 503)
    code, message, answers = otf.decode_predict_response(bytes(written))
    assert (code, message, answers[0].status, answers[0].body) == (
        503,
        "Prediction failed",
        503,
        b"error",
    )
