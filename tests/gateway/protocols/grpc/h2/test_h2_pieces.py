"""The HTTP/2 server's pure pieces: header blocks, call headers, trailers, messages."""

from __future__ import annotations

import asyncio
import gzip
import random
import tracemalloc

import hpack
import pytest

from benchmarks.grpc_open_loop import grpc_call
from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2 import headers
from gateway.protocols.grpc.h2.calls import RESOURCE_EXHAUSTED, UNIMPLEMENTED, CallError, Messages
from gateway.protocols.grpc.h2.coalesce import CoalescingTransport
from gateway.protocols.grpc.h2.headers import BadCall, HeaderDecoder, call_headers, trailers

HEADERS = [
    (":method", "POST"), (":path", "/inference.GRPCInferenceService/ModelInfer"),
    ("content-type", "application/grpc"), ("grpc-timeout", "250m"), ("user", "ada"),
]  # fmt: skip


def test_a_block_that_leaves_the_table_alone_is_decoded_once():
    encoder, decoder = hpack.Encoder(), HeaderDecoder()
    first = encoder.encode(HEADERS)  # adds to the dynamic table
    again = encoder.encode(HEADERS)  # now all indexed
    assert first != again and encoder.encode(HEADERS) == again
    decoded = [decoder.decode(block) for block in (first, again, again)]
    assert decoded[1] is decoded[2]  # the second came from the cache
    assert all(dict(d)[b"user"] == b"ada" for d in decoded)


def test_the_same_bytes_after_the_table_changed_are_decoded_afresh():
    encoder, decoder = hpack.Encoder(), HeaderDecoder()
    decoder.decode(encoder.encode(HEADERS))
    indexed = encoder.encode(HEADERS)
    before = decoder.decode(indexed)
    assert decoder.decode(indexed) is before  # cached
    # The client's table moved on (one entry in front): the same indexes now point one
    # entry further, so the same bytes mean other headers and must not come from the cache.
    decoder.decode(encoder.encode([("other", "x")]))
    after = decoder.decode(indexed)
    assert after != before and (b"other", b"x") in after


def test_a_block_that_indexes_nothing_is_decoded_once_for_every_new_connection(monkeypatch):
    """A thousand new connections of a client that never indexes send the same first
    block: decoded on the first, it comes from the shared cache on the others."""
    monkeypatch.setattr(headers, "_FRESH", {})
    block, _ = grpc_call("/inference.GRPCInferenceService/ModelInfer", b"")  # no indexing
    spent: list[float] = []
    first = HeaderDecoder(spent.append).decode(block)
    assert len(spent) == 1 and dict(first)[b"te"] == b"trailers"
    assert HeaderDecoder(spent.append).decode(block) is first and len(spent) == 1
    # A connection whose table is no longer empty decodes the same bytes itself.
    other = HeaderDecoder(spent.append)
    other.decode(hpack.Encoder().encode([("x", "y")]))  # indexed: the table changed
    assert other.decode(block) == first and len(spent) == 3


def test_a_block_with_a_never_indexed_field_is_not_shared(monkeypatch):
    """Whether another connection sent the same credential must not show in timing."""
    monkeypatch.setattr(headers, "_FRESH", {})
    encoder = hpack.Encoder()
    block = encoder.encode([*HEADERS[:3], hpack.NeverIndexedHeaderTuple("authorization", "x")])
    spent: list[float] = []
    HeaderDecoder(spent.append).decode(block)
    HeaderDecoder(spent.append).decode(block)
    assert len(spent) == 2 and headers._FRESH == {}


def test_call_headers_read_path_deadline_encoding_and_metadata():
    call = call_headers([(k.encode(), v.encode()) for k, v in HEADERS] + [(b"token-bin", b"AP8")])
    assert call.path == "/inference.GRPCInferenceService/ModelInfer"
    assert call.timeout_s == pytest.approx(0.25) and call.encoding == "identity"
    assert call.metadata == (("user", "ada"), ("token-bin", b"\x00\xff"))


@pytest.mark.parametrize(
    "change, expected",
    [((b":method", b"GET"), "POST"), ((b"content-type", b"text/plain"), "application/grpc"),
     ((b"grpc-timeout", b"5x"), "grpc-timeout")],
)  # fmt: skip
def test_headers_that_are_not_a_grpc_call_say_what_is_wrong(change, expected):
    headers = dict((k.encode(), v.encode()) for k, v in HEADERS) | dict([change])
    with pytest.raises(BadCall, match=expected):
        call_headers(list(headers.items()))


def test_metadata_that_is_not_base64_where_its_name_says_so_is_refused():
    with pytest.raises(BadCall, match="token-bin"):
        call_headers([(k.encode(), v.encode()) for k, v in HEADERS] + [(b"token-bin", b"A")])


def test_a_long_message_is_cut_to_fit_a_clients_header_frame():
    block = trailers(13, "é" * 10_000, (("detail-bin", b"\x00\x01"),))
    decoded = dict(hpack.Decoder().decode(block))
    assert len(block) < 4500 and decoded["grpc-message"].endswith("...")
    assert decoded["detail-bin"] == "AAE"  # base64, unpadded


def test_trailers_carry_the_status_and_a_percent_encoded_message():
    decoded = dict(hpack.Decoder().decode(trailers(14, "50% down: ünï\n", (("a", "b"),))))
    assert decoded == {"grpc-status": "14", "grpc-message": "50%25 down: %C3%BCn%C3%AF%0A",
                       "a": "b"}  # fmt: skip


def _framed(message: bytes, compressed: bool = False) -> bytes:
    return bytes([compressed]) + len(message).to_bytes(4, "big") + message


def test_messages_are_cut_whole_from_bytes_that_come_in_any_pieces():
    messages = Messages("gzip", max_bytes=1000)
    wire = _framed(b"one") + _framed(gzip.compress(b"two" * 100), True) + _framed(b"")
    for k in range(len(wire)):
        messages.feed(wire[k : k + 1])
    assert [messages.take() for _ in range(3)] == [b"one", b"two" * 100, b""]
    assert messages.ready_bytes == 0 and not messages.partial


def test_messages_cut_at_random_points_come_out_whole_and_are_counted_while_held():
    """Large and small messages, one after another, fed in reads cut anywhere: each
    comes out whole, and what is held is counted, whole or not."""
    rng = random.Random(7)
    sent = [rng.randbytes(rng.choice([0, 3, 70_000, 300_000])) for _ in range(40)]
    wire = b"".join(_framed(m) for m in sent)
    messages = Messages("identity", max_bytes=1 << 20)
    position = 0
    while position < len(wire):
        step = rng.choice([1, 4, 5, 6, 1000, 65_536, 262_144])
        messages.feed(wire[position : position + step])
        position += step
        assert messages.buffered == min(position, len(wire))  # nothing taken yet
    assert not messages.partial
    assert [messages.take() for _ in sent] == sent and messages.buffered == 0


def test_a_message_sent_in_tiny_pieces_costs_about_its_bytes():
    """What a connection may hold is counted in message bytes: 300,000 two-byte reads
    held as as many objects took 22 times that."""
    messages = Messages("identity", max_bytes=1 << 20)
    messages.feed(_framed(b"x" * 1_000_000)[:5])
    tracemalloc.start()
    try:
        for _ in range(300_000):
            messages.feed(b"xx")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert messages.buffered == 600_005 and held < 2 * 600_000


def test_a_message_not_yet_whole_is_partial_and_cleared_at_once():
    messages = Messages("identity", max_bytes=1 << 20)
    messages.feed(_framed(b"x" * 100_000)[:50_000])
    messages.feed(b"x" * 10_000)
    assert messages.partial and messages.buffered == 60_000 and not messages.ready
    messages.clear()
    assert not messages.partial and messages.buffered == 0


def test_messages_past_the_limit_or_in_an_unknown_encoding_are_refused():
    with pytest.raises(CallError) as unknown:
        Messages("snappy", max_bytes=10)
    assert unknown.value.status == UNIMPLEMENTED
    with pytest.raises(CallError) as big:
        Messages("identity", max_bytes=10).feed(_framed(b"x" * 11)[:5])  # told by the prefix
    with pytest.raises(CallError) as bomb:
        Messages("gzip", max_bytes=10).feed(_framed(gzip.compress(b"x" * 11), True))
    assert big.value.status == bomb.value.status == RESOURCE_EXHAUSTED


def test_frames_settings_round_trip_and_bad_ones_are_named():
    frame = f.settings({f.INITIAL_WINDOW_SIZE: 100, f.MAX_FRAME_SIZE: 1 << 20})
    assert f.parse_settings(frame[9:]) == {f.INITIAL_WINDOW_SIZE: 100, f.MAX_FRAME_SIZE: 1 << 20}
    with pytest.raises(f.H2Error, match="MAX_FRAME_SIZE"):
        f.parse_settings(f.settings({f.MAX_FRAME_SIZE: 100})[9:])
    with pytest.raises(f.H2Error, match="padding"):
        f.strip_padding(b"\x05abc", f.PADDED)


class _Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_writes_of_a_busy_connection_leave_together_in_order_and_before_a_close():
    async def scenario():
        loop = asyncio.get_running_loop()
        busy = {"now": True}
        raw = _Recording()
        transport = CoalescingTransport(raw, loop, lambda: busy["now"])
        for piece in (b"a", b"b", b"c"):
            transport.write(piece)
        held = list(raw.writes)
        await asyncio.sleep(0)
        after_turn = list(raw.writes)
        busy["now"] = False
        transport.write(b"d")  # one call in flight: at once
        transport_closed_with = _Recording()
        closing = CoalescingTransport(transport_closed_with, loop, lambda: True)
        closing.write(b"last")
        closing.close()
        return held, after_turn, raw.writes, transport_closed_with.writes

    held, after_turn, final, closed = asyncio.run(scenario())
    assert held == [] and after_turn == [b"abc"] and final == [b"abc", b"d"]
    assert closed == [b"last"]
