"""A request body as the inputs TorchServe's frontend makes of it: form fields by name
(`application/x-www-form-urlencoded`, `multipart/form-data`), else one input "body" with
the body's media type (without its parameters)."""

from __future__ import annotations

from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import parse_qsl

Input = tuple[str, str, bytes]  # (name, content type, value)


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def body_inputs(body: bytes, content_type: str) -> list[Input]:
    kind = media_type(content_type)
    if kind == "application/x-www-form-urlencoded":
        # UTF-8 as Netty decodes a form; bytes that are not UTF-8 come back as they were.
        text = body.decode("utf-8", "surrogateescape")
        fields = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="surrogateescape")
        return [(name, "", value.encode("utf-8", "surrogateescape")) for name, value in fields]
    if kind == "multipart/form-data":
        return _multipart(body, content_type)
    return [("body", kind if content_type else "", body)]


def _multipart(body: bytes, content_type: str) -> list[Input]:
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise ValueError("a multipart/form-data body without parts (is its boundary right?)")
    inputs = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise ValueError("a form part without a name in its Content-Disposition")
        value = part.get_payload(decode=True) or b""
        # A file part keeps its content type; a plain field has none (as TorchServe's).
        is_file = part.get_param("filename", header="content-disposition") is not None
        inputs.append((name, part.get_content_type() if is_file else "", value))
    return inputs
