"""backends/torchserve/forms.py: a body as the inputs TorchServe's frontend makes of it."""

from __future__ import annotations

import pytest

from backends.torchserve.forms import body_inputs


def test_a_plain_body_is_one_input_with_its_media_type():
    assert body_inputs(b"{}", "application/json; charset=utf-8") == [
        ("body", "application/json", b"{}")
    ]
    assert body_inputs(b"raw", "") == [("body", "", b"raw")]


def test_a_urlencoded_form_is_its_fields():
    assert body_inputs(b"a=1&b=&c=x%20y", "application/x-www-form-urlencoded") == [
        ("a", "", b"1"), ("b", "", b""), ("c", "", b"x y"),
    ]  # fmt: skip


def test_a_urlencoded_form_is_utf8_as_netty_reads_it():
    assert body_inputs(b"n%C3%A9=%E2%82%AC", "application/x-www-form-urlencoded") == [
        ("né", "", "€".encode())
    ]


def test_a_multipart_form_keeps_a_file_parts_content_type():
    body = (
        b'--XX\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n'
        b'--XX\r\nContent-Disposition: form-data; name="img"; filename="x.png"\r\n'
        b"Content-Type: image/png\r\n\r\n\x89PNG\x00\xff\r\n--XX--\r\n"
    )
    assert body_inputs(body, "multipart/form-data; boundary=XX") == [
        ("a", "", b"1"), ("img", "image/png", b"\x89PNG\x00\xff"),
    ]  # fmt: skip


def test_a_multipart_body_without_its_boundary_is_refused():
    with pytest.raises(ValueError, match="boundary"):
        body_inputs(b"--XX\r\n\r\n", "multipart/form-data")
