"""Raw HTTP/2 attacks on a gRPC server, as bytes (built by hand with hpack for headers):
the floods and exhaustion patterns behind the CVEs that took HTTP/2 servers down, and
what a hardened server answers to each. Shared by tests/gateway/protocols/grpc/h2/test_h2_attacks.py
(the answers) and benchmarks/h2_attacks.py (what they cost a well-behaved client)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import hpack

from gateway.protocols.grpc.h2 import frames as f

ECHO = "/test.Echo/Call"
MESSAGE = b"\x00\x00\x00\x00\x05hello"  # a gRPC message: uncompressed, 5 bytes


def call_headers(encoder: hpack.Encoder, path: str = ECHO, *extra: tuple[str, str]) -> bytes:
    return encoder.encode(
        [(":method", "POST"), (":scheme", "http"), (":path", path),
         (":authority", "127.0.0.1"), ("content-type", "application/grpc"), ("te", "trailers"),
         *extra]
    )  # fmt: skip


def opening() -> bytes:
    return f.PREFACE + f.settings({}) + f.frame(f.SETTINGS, f.ACK, 0)


@dataclass(frozen=True)
class Attack:
    name: str
    # The bytes after the opening, given the method's path and the server's receive window.
    build: Callable[[str, int], bytes]
    code: int | None  # the GOAWAY code that must end it (None: the connection goes on)
    reads: bool = True  # whether the attacker reads what the server sends while it floods


def _continuation_flood(piece: bytes) -> Callable[[str, int], bytes]:
    def build(path: str, window: int) -> bytes:
        block = call_headers(hpack.Encoder(), path)
        head = f.frame(f.HEADERS, 0, 1, block[:4])
        return head + f.frame(f.CONTINUATION, 0, 1, piece) * 20_000

    return build


def _settings_flood(path: str, window: int) -> bytes:
    return f.settings({f.INITIAL_WINDOW_SIZE: 65_535}) * 20_000


def _ping_flood(path: str, window: int) -> bytes:
    return f.frame(f.PING, 0, 0, b"pingpong") * 20_000


def _rapid_reset(path: str, window: int) -> bytes:
    encoder = hpack.Encoder()
    out = []
    for stream in range(1, 20_001, 2):
        block = call_headers(encoder, path)
        out.append(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, stream, block))
        out.append(f.rst_stream(stream, f.CANCEL))
    return b"".join(out)


def _hpack_bomb(path: str, window: int) -> bytes:
    """One 4 KB value in the dynamic table, then a block naming it 20 times (80 KB)."""
    encoder = hpack.Encoder()
    big = ("x-bomb", "b" * 4000)
    first = call_headers(encoder, path, big)  # indexes it
    bomb = call_headers(encoder, path, *[big] * 20)  # 20 one-byte references
    return (
        f.frame(f.HEADERS, f.END_HEADERS, 1, first)
        + f.frame(f.DATA, f.END_STREAM, 1, MESSAGE)
        + f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 3, bomb)
    )


def _distinct_header_blocks(path: str, window: int) -> bytes:
    """Streams each with a 12 KB block of values never seen before (no indexing),
    Huffman-coded: the dearest bytes to decode."""
    encoder = hpack.Encoder()
    head = call_headers(encoder, path)  # indexed from the second stream on
    out = []
    for k, stream in enumerate(range(1, 2 * 400, 2)):
        values = [(f"x-junk-{i}", f"{k:08d}{i:04d}" * 100) for i in range(10)]
        junk = [hpack.NeverIndexedHeaderTuple(n, v) for n, v in values]
        block = (call_headers(encoder, path) if k else head) + encoder.encode(junk, huffman=True)
        out.append(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, stream, block))
    return b"".join(out)


def unfinished_messages(path: str, window: int, past: int = 0) -> bytes:
    """16 streams whose messages are never finished, each sent a 16th of the window
    (and `past` bytes more in all): declared as large as the window allows."""
    encoder = hpack.Encoder()
    share = (window - (1 << 16)) // 16 + past // 16
    frame_size = 1 << 20  # the server's largest frame
    out = []
    for stream in range(1, 33, 2):
        out.append(f.frame(f.HEADERS, f.END_HEADERS, stream, call_headers(encoder, path)))
        body = (b"\x00" + (window - 20_000).to_bytes(4, "big")).ljust(share, b"\x00")
        out.extend(
            f.frame(f.DATA, 0, stream, body[start : start + frame_size])
            for start in range(0, len(body), frame_size)
        )
    return b"".join(out)


def _empty_data(path: str, window: int) -> bytes:
    encoder = hpack.Encoder()
    return f.frame(f.HEADERS, f.END_HEADERS, 1, call_headers(encoder, path)) + (
        f.frame(f.DATA, 0, 1, b"") * 20_000
    )


def _padded_empty_data(path: str, window: int) -> bytes:
    """DATA frames whose one byte says "no padding": nothing, dressed as something."""
    encoder = hpack.Encoder()
    return f.frame(f.HEADERS, f.END_HEADERS, 1, call_headers(encoder, path)) + (
        f.frame(f.DATA, f.PADDED, 1, b"\x00") * 20_000
    )


def _priority_flood(path: str, window: int) -> bytes:
    return f.frame(f.PRIORITY, 0, 1, b"\x00\x00\x00\x00\x10") * 20_000


ATTACKS = [
    Attack("continuation flood, empty", _continuation_flood(b""), f.ENHANCE_YOUR_CALM),
    Attack("continuation flood, 1 byte", _continuation_flood(b"\x00"), f.ENHANCE_YOUR_CALM),
    Attack("settings flood, ACKs read", _settings_flood, f.ENHANCE_YOUR_CALM),
    Attack("settings flood, ACKs unread", _settings_flood, f.ENHANCE_YOUR_CALM, reads=False),
    Attack("ping flood, ACKs read", _ping_flood, f.ENHANCE_YOUR_CALM),
    Attack("ping flood, ACKs unread", _ping_flood, f.ENHANCE_YOUR_CALM, reads=False),
    Attack("rapid reset", _rapid_reset, f.ENHANCE_YOUR_CALM),
    Attack("hpack bomb", _hpack_bomb, f.ENHANCE_YOUR_CALM),
    Attack("distinct 12 KB header blocks", _distinct_header_blocks, f.ENHANCE_YOUR_CALM),
    Attack("empty DATA flood", _empty_data, f.ENHANCE_YOUR_CALM),
    Attack("padded empty DATA flood", _padded_empty_data, f.ENHANCE_YOUR_CALM),
    Attack("priority flood", _priority_flood, f.ENHANCE_YOUR_CALM),
]


def run_attack(port: int, attack: Attack, window: int, path: str = ECHO, timeout_s: float = 10.0):
    """Send `attack` on a connection of its own to a server whose receive window is
    `window` (its largest request message, plus 16 KiB); returns (the GOAWAY code the
    server sent or None, seconds from the first byte sent to the server's close)."""
    return send_attack(port, opening() + attack.build(path, window), attack.reads, timeout_s)


def send_attack(port: int, payload: bytes, reads: bool, timeout_s: float = 10.0):
    """`payload` sent on a new connection, reading what comes back all along (`reads`)
    or only once it is all sent; blocking calls, so the attacker costs its own core
    little. Returns as run_attack does."""
    received = bytearray()
    closed_at: list[float] = []

    def read(sock: socket.socket) -> None:
        try:
            while chunk := sock.recv(1 << 16):
                received.extend(chunk)
        except OSError:  # reset, or timed out
            pass
        closed_at.append(time.monotonic())

    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(timeout_s)
        reader = threading.Thread(target=read, args=(sock,))
        started = time.monotonic()
        if reads:
            reader.start()
        with contextlib.suppress(OSError):  # the server closed before it had it all
            sock.sendall(payload)
        if not reads:
            reader.start()
        reader.join()
    return goaway_code(bytes(received)), closed_at[0] - started


def read_frames(sock: socket.socket, until, timeout: float = 5.0) -> list[tuple]:
    """Frames (type, flags, stream, payload) read until `until(frames)` says enough or
    the server closes (TimeoutError past `timeout` between reads)."""
    sock.settimeout(timeout)
    buffer, found = b"", []
    while not until(found):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= 9:
            high, low, kind, flags, stream = f.HEADER.unpack_from(buffer)
            size = (high << 8) | low
            if len(buffer) < 9 + size:
                break
            found.append((kind, flags, stream & 0x7FFFFFFF, buffer[9 : 9 + size]))
            buffer = buffer[9 + size :]
    return found


def goaway_code(data: bytes) -> int | None:
    """The code of the last GOAWAY among the frames in `data`."""
    code, position = None, 0
    while len(data) - position >= 9:
        high, low, kind, _, _ = f.HEADER.unpack_from(data, position)
        size = (high << 8) | low
        if kind == f.GOAWAY and len(data) >= position + 9 + 8:
            code = int.from_bytes(data[position + 13 : position + 17], "big")
        position += 9 + size
    return code
