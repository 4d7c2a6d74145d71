"""backends/torchserve/streaming.py: where a handler's intermediate responses go."""

from __future__ import annotations

from accel_base import call_wire
from backends.torchserve import otf
from backends.torchserve.streaming import STREAM_NEXT, Intermediate


def frame(*ids: str) -> bytes:
    """A predict response as ts writes an intermediate one: one answer per request id."""
    import struct

    parts = [struct.pack("!i", 200), struct.pack("!i", 0)]  # code, empty message
    for request_id in ids:
        encoded = request_id.encode()
        parts += [struct.pack("!i", len(encoded)), encoded, struct.pack("!i", 0),
                  struct.pack("!i", 200), struct.pack("!i", 0), struct.pack("!i", 1),
                  struct.pack("!i", len(STREAM_NEXT)), STREAM_NEXT.encode(),
                  struct.pack("!i", 4), b"true", struct.pack("!i", 2), b"hi"]  # fmt: skip
    parts.append(struct.pack("!i", -1))
    return b"".join(parts)


def test_a_request_on_a_stream_gets_it_and_one_not_on_one_is_refused_alone():
    sent: list[bytes] = []
    early = Intermediate({"a": "s1", "b": ""}, sent.append)
    early.sendall(frame("a", "b"))
    assert early.sent == {"a"} and early.refused == {"b"}
    [one] = [call_wire.decode(f[4:]) for f in sent]
    kind, token, outputs, _parameters, final, error = one
    assert (kind, token, final, error) == ("respond", "s1", False, None)
    assert call_wire.from_wire(outputs[0], "output")[2].reshape(-1)[0] == b"hi"
    info = call_wire.from_wire(outputs[1], "output")[2].reshape(-1)[0]
    assert STREAM_NEXT.encode() not in info  # ts's marker stays inside


def test_the_frame_format_is_the_one_otf_reads():
    code, _message, answers = otf.decode_predict_response(frame("x"))
    assert code == 200 and [a.request_id for a in answers] == ["x"]
