"""The HTTP/2 server frame by frame, from a raw socket: what it owes a client that breaks
the protocol, pings, or gives it a tiny window."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time

import grpc
import hpack

from benchmarks.h2_floods import read_frames
from gateway.launch import free_port
from gateway.listeners import listen
from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.server import H2Server


async def _echo(request: bytes, context) -> bytes:
    return request * 10


async def _digest(request: bytes, context) -> bytes:
    return len(request).to_bytes(4, "big") + hashlib.sha256(request).digest()


# A response given as pieces (as ModelInfer's large tensors are): sent unjoined.
PIECES = [b"head", memoryview(bytes(range(256)) * 1000), b"", b"tail"]


async def _pieces(request: bytes, context) -> list:
    return list(PIECES)


def run_raw(client) -> object:
    """Run the blocking `client(port)` in a thread against a fresh server."""

    async def run():
        server = H2Server(1 << 20, 8, 30.0, max_connections=4)
        server.add_registered_method_handlers(
            "test.Echo",
            {"Call": grpc.unary_unary_rpc_method_handler(_echo),
             "Digest": grpc.unary_unary_rpc_method_handler(_digest),
             "Pieces": grpc.unary_unary_rpc_method_handler(_pieces)},
        )  # fmt: skip
        port = free_port()
        await server.start(listen("127.0.0.1", port, "gRPC"))
        try:
            return await asyncio.to_thread(client, port)
        finally:
            await server.stop(0.5)

    return asyncio.run(run())


def _call_headers(
    encoder: hpack.Encoder, *extra: tuple[str, str], path: str = "/test.Echo/Call"
) -> bytes:
    return encoder.encode(
        [(":method", "POST"), (":scheme", "http"), (":path", path),
         (":authority", "127.0.0.1"), ("content-type", "application/grpc"), ("te", "trailers"),
         *extra]
    )  # fmt: skip


def test_a_client_that_does_not_speak_http2_gets_goaway_and_is_closed():
    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\n\r\n")
            frames = read_frames(sock, lambda found: False)
        return [(kind, payload[4:8]) for kind, _, _, payload in frames if kind == f.GOAWAY]

    assert run_raw(client) == [(f.GOAWAY, f.PROTOCOL_ERROR.to_bytes(4, "big"))]


def test_pings_are_answered_and_a_tiny_window_holds_the_answer_until_credit():
    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            encoder = hpack.Encoder()
            message = b"0123456789" * 10  # the answer is 1,000 bytes, plus its prefix
            framed = b"\x00" + len(message).to_bytes(4, "big") + message
            sock.sendall(
                f.PREFACE
                + f.settings({f.INITIAL_WINDOW_SIZE: 100})
                + f.frame(f.PING, 0, 0, b"12345678")
                + f.frame(f.HEADERS, f.END_HEADERS, 1, _call_headers(encoder))
                + f.frame(f.DATA, f.END_STREAM, 1, framed)
            )  # fmt: skip

            def held(found):
                return sum(len(p) for k, _, s, p in found if k == f.DATA and s == 1) >= 100

            before = read_frames(sock, held)
            sock.sendall(f.window_update(1, 10_000))

            def ended(found):
                return any(k == f.HEADERS and flags & f.END_STREAM for k, flags, _, _ in found)

            after = read_frames(sock, ended)
        return before, after

    before, after = run_raw(client)
    assert (f.PING, f.ACK, 0, b"12345678") in before
    assert sum(len(p) for k, _, s, p in before if k == f.DATA and s == 1) == 100
    body = b"".join(p for k, _, s, p in before + after if k == f.DATA and s == 1)
    assert body == b"\x00" + (1000).to_bytes(4, "big") + b"0123456789" * 100
    trailers = hpack.Decoder().decode([p for k, _, _, p in after if k == f.HEADERS][-1])
    assert ("grpc-status", "0") in trailers


def test_a_stream_id_that_goes_back_ends_the_connection_with_protocol_error():
    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            encoder = hpack.Encoder()
            message = b"\x00\x00\x00\x00\x01x"
            sock.sendall(
                f.PREFACE + f.settings({})
                + f.frame(f.HEADERS, f.END_HEADERS, 5, _call_headers(encoder))
                + f.frame(f.DATA, f.END_STREAM, 5, message)
                + f.frame(f.HEADERS, f.END_HEADERS, 3, _call_headers(encoder))  # closed
                + f.frame(f.HEADERS, f.END_HEADERS, 7, _call_headers(encoder))
                + f.frame(f.DATA, f.END_STREAM, 7, message)
            )  # fmt: skip

            frames = read_frames(sock, lambda found: False)  # until it closes
        return [(s, p) for k, _, s, p in frames if k in (f.RST_STREAM, f.GOAWAY)]

    # RFC 9113 section 5.1.1: a connection error, and no RST_STREAM for stream 3.
    [(stream, payload)] = run_raw(client)
    assert stream == 0 and payload[4:8] == f.PROTOCOL_ERROR.to_bytes(4, "big")
    assert b"stream 3 is not above the last one opened (5)" in payload


def test_calls_whose_deadline_passes_as_they_arrive_are_each_answered_deadline_exceeded():
    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            encoder = hpack.Encoder()
            message = b"\x00\x00\x00\x00\x01x"
            timeout = ("grpc-timeout", "1n")
            calls = b"".join(
                f.frame(f.HEADERS, f.END_HEADERS, stream, _call_headers(encoder, timeout))
                + f.frame(f.DATA, f.END_STREAM, stream, message)
                for stream in range(1, 16, 2)
            )  # fmt: skip
            sock.sendall(f.PREFACE + f.settings({}) + calls)

            def all_ended(found):
                return (
                    len([1 for k, fl, _, _ in found if k == f.HEADERS and fl & f.END_STREAM]) == 8
                )

            frames = read_frames(sock, all_ended)
        decoder = hpack.Decoder()
        return [dict(decoder.decode(p)).get("grpc-status") for k, fl, _, p in frames
                if k == f.HEADERS and fl & f.END_STREAM]  # fmt: skip

    # Each one ends once, with DEADLINE_EXCEEDED or, had it run first, OK.
    statuses = run_raw(client)
    assert len(statuses) == 8 and set(statuses) <= {"4", "0"}


def test_a_large_padded_data_frame_arriving_read_by_read_is_one_message():
    """A 700 KB message in one padded DATA frame, sent in pieces the server reads apart
    (the frame's header alone, its padding's length alone, then the rest), and another
    call's frame right behind it in the last read: both answered from whole messages."""
    message = bytes(range(256)) * 2734 + b"end"
    framed = b"\x00" + len(message).to_bytes(4, "big") + message
    padding = 200
    payload = bytes([padding]) + framed + b"\x00" * padding
    header = f.frame(f.DATA, f.PADDED | f.END_STREAM, 1, payload)[:9]
    small = b"\x00\x00\x00\x00\x02hi"

    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            encoder = hpack.Encoder()
            digest = "/test.Echo/Digest"
            sock.sendall(
                f.PREFACE + f.settings({})
                + f.frame(f.HEADERS, f.END_HEADERS, 1, _call_headers(encoder, path=digest))
                + f.frame(f.HEADERS, f.END_HEADERS, 3, _call_headers(encoder, path=digest))
            )  # fmt: skip
            pieces = [header, payload[:1], payload[1:300_000], payload[300_000:]]
            for piece in pieces[:-1]:
                sock.sendall(piece)
                time.sleep(0.05)
            sock.sendall(pieces[-1] + f.frame(f.DATA, f.END_STREAM, 3, small))

            def both(found):
                return sum(k == f.HEADERS and bool(fl & f.END_STREAM) for k, fl, _, _ in found) == 2

            return read_frames(sock, both)

    frames = run_raw(client)
    answers = {s: p[5:] for k, _, s, p in frames if k == f.DATA}
    assert answers[1] == len(message).to_bytes(4, "big") + hashlib.sha256(message).digest()
    assert answers[3] == (2).to_bytes(4, "big") + hashlib.sha256(b"hi").digest()


def _pieces_call(port: int, settings: dict[int, int], credit: int) -> list[tuple]:
    """A Pieces call from a client that announces `settings` and grants the stream
    `credit` more after each read that brought it DATA (0: none), until its trailers."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(5.0)
        encoder = hpack.Encoder()
        path = "/test.Echo/Pieces"
        sock.sendall(
            f.PREFACE + f.settings(settings) + f.window_update(0, 1 << 20)
            + f.frame(f.HEADERS, f.END_HEADERS, 1, _call_headers(encoder, path=path))
            + f.frame(f.DATA, f.END_STREAM, 1, b"\x00\x00\x00\x00\x00")
        )  # fmt: skip
        frames: list[tuple] = []
        buffer = b""
        while not any(k == f.HEADERS and flags & f.END_STREAM for k, flags, _, _ in frames):
            chunk = sock.recv(1 << 16)
            assert chunk, "the server closed the connection"
            buffer += chunk
            data = False
            while len(buffer) >= 9:
                high, low, kind, flags, stream = f.HEADER.unpack_from(buffer)
                size = (high << 8) | low
                if len(buffer) < 9 + size:
                    break
                frames.append((kind, flags, stream, buffer[9 : 9 + size]))
                buffer = buffer[9 + size :]
                data = data or kind == f.DATA
            if credit and data:
                sock.sendall(f.window_update(1, credit))
        return frames


def _body(frames: list[tuple]) -> bytes:
    return b"".join(p for k, _, s, p in frames if k == f.DATA and s == 1)


def test_a_response_of_pieces_leaves_whole_in_one_frame_when_the_windows_allow_it():
    settings = {f.INITIAL_WINDOW_SIZE: 1 << 20, f.MAX_FRAME_SIZE: 1 << 20}
    frames = run_raw(lambda port: _pieces_call(port, settings, credit=0))
    message = b"".join(PIECES)
    assert _body(frames) == b"\x00" + len(message).to_bytes(4, "big") + message
    assert len([1 for k, _, s, _ in frames if k == f.DATA and s == 1]) == 1


def test_a_response_of_pieces_held_by_a_small_window_is_cut_into_frames_across_pieces():
    """30,000-byte credits and 16 KiB frames: frames end inside pieces and span them."""
    settings = {f.INITIAL_WINDOW_SIZE: 1000}
    frames = run_raw(lambda port: _pieces_call(port, settings, credit=30_000))
    message = b"".join(PIECES)
    assert _body(frames) == b"\x00" + len(message).to_bytes(4, "big") + message
    sizes = [len(p) for k, _, s, p in frames if k == f.DATA and s == 1]
    assert sizes[0] == 1000 and max(sizes) <= f.DEFAULT_MAX_FRAME and len(sizes) > 16
    trailers = hpack.Decoder().decode([p for k, _, _, p in frames if k == f.HEADERS][-1])
    assert ("grpc-status", "0") in trailers
