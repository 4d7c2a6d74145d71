"""HTTP/2 frames (RFC 9113): their layout, the codes a gRPC server meets, and builders.

Pure: bytes in, bytes out. A frame is a 9-byte header (24-bit payload length, type,
flags, 31-bit stream id) and its payload.
"""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # what every client connection opens with

# Frame types.
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9

# Flags (their meaning depends on the type).
END_STREAM = 0x1
ACK = 0x1  # SETTINGS, PING
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# SETTINGS parameters.
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6

# Error codes (RST_STREAM, GOAWAY).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB

DEFAULT_WINDOW = 65_535  # every window's size until SETTINGS or WINDOW_UPDATE say otherwise
DEFAULT_MAX_FRAME = 16_384
MAX_WINDOW = 2**31 - 1
HEADER = struct.Struct(">HBBBI")  # length (high 16 bits, low 8), type, flags, stream id
_SETTING = struct.Struct(">HI")
_U32 = struct.Struct(">I")
_GOAWAY = struct.Struct(">II")


class H2Error(Exception):
    """The peer broke the protocol: the connection ends with GOAWAY and `code`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return frame_head(kind, flags, stream, len(payload)) + payload


def frame_head(kind: int, flags: int, stream: int, size: int) -> bytes:
    """A frame's 9-byte header, for a payload sent as pieces of its own."""
    return HEADER.pack(size >> 8, size & 0xFF, kind, flags, stream)


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(k, v) for k, v in values.items()))


def parse_settings(payload: bytes) -> dict[int, int]:
    if len(payload) % 6:
        raise H2Error(FRAME_SIZE_ERROR, "a SETTINGS payload must be 6-byte entries")
    found = {}
    for offset in range(0, len(payload), 6):
        key, value = _SETTING.unpack_from(payload, offset)
        found[key] = value
    if found.get(ENABLE_PUSH, 0) > 1:
        raise H2Error(PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH must be 0 or 1")
    if found.get(INITIAL_WINDOW_SIZE, 0) > MAX_WINDOW:
        raise H2Error(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE past 2^31-1")
    size = found.get(MAX_FRAME_SIZE, DEFAULT_MAX_FRAME)
    if not DEFAULT_MAX_FRAME <= size <= 2**24 - 1:
        raise H2Error(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
    return found


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, _U32.pack(increment))


def parse_u32(payload: bytes, what: str) -> int:
    if len(payload) != 4:
        raise H2Error(FRAME_SIZE_ERROR, f"a {what} payload must be 4 bytes")
    return _U32.unpack(payload)[0] & 0x7FFFFFFF


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, _U32.pack(code))


def goaway(last_stream: int, code: int, message: str = "") -> bytes:
    return frame(GOAWAY, 0, 0, _GOAWAY.pack(last_stream, code) + message.encode()[:256])


def padding(pad_length: int, size: int) -> int:
    """A PADDED frame's padding, from its first byte, checked against its size."""
    if pad_length >= size:
        raise H2Error(PROTOCOL_ERROR, "padding as long as the frame")
    return pad_length


def strip_padding(payload: bytes, flags: int) -> bytes:
    """The payload without its padding (PADDED) and priority fields (HEADERS only)."""
    if flags & PADDED:
        if not payload:
            raise H2Error(PROTOCOL_ERROR, "padding as long as the frame")
        payload = payload[1 : len(payload) - padding(payload[0], len(payload))]
    return payload


def header_frames(stream: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """A header block as HEADERS, and CONTINUATION frames where it is larger than the
    client's largest frame."""
    first_flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return frame(HEADERS, first_flags | END_HEADERS, stream, block)
    pieces = [block[start : start + max_frame] for start in range(0, len(block), max_frame)]
    out = [frame(HEADERS, first_flags, stream, pieces[0])]
    for piece in pieces[1:-1]:
        out.append(frame(CONTINUATION, 0, stream, piece))
    out.append(frame(CONTINUATION, END_HEADERS, stream, pieces[-1]))
    return b"".join(out)
