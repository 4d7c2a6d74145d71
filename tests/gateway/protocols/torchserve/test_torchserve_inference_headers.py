"""A prediction's headers as its handler gets them, kept per set of headers within a bound."""

from __future__ import annotations

import json

from gateway.protocols.torchserve.inference import (
    MAX_HEADER_BYTES,
    _handler_headers,
    _http_headers,
)

HEADERS = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json; charset=utf-8")]


def test_the_content_type_and_the_headers_as_json_with_the_explain_mark():
    _http_headers.cache_clear()
    content_type, text = _handler_headers(HEADERS, False)
    assert content_type == "application/json; charset=utf-8"
    assert json.loads(text) == [["host", "127.0.0.1"], ["content-type", content_type]]
    _, explained = _handler_headers(HEADERS, True)
    assert json.loads(explained)[-1] == ["explain", "True"]
    assert _handler_headers(list(HEADERS), False) == (content_type, text)
    assert _http_headers.cache_info().currsize == 2  # one per set and mark, reused


def test_headers_over_the_limit_are_made_but_not_kept():
    _http_headers.cache_clear()
    large = [*HEADERS, (b"x-large", b"a" * MAX_HEADER_BYTES)]
    content_type, text = _handler_headers(large, False)
    assert content_type == "application/json; charset=utf-8" and len(text) > MAX_HEADER_BYTES
    assert _http_headers.cache_info().currsize == 0
