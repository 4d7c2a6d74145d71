from __future__ import annotations

import gzip
import zlib

import pytest

from accel_base.errors import InvalidArgument, PayloadTooLarge
from gateway.protocols.http.compression import choose_encoding, compress, decompress


def test_round_trips():
    for encoding in ("gzip", "deflate"):
        assert decompress(compress(b"x" * 1000, encoding), encoding, 10_000) == b"x" * 1000
    assert decompress(gzip.compress(b"abc"), "gzip", 10) == b"abc"
    assert decompress(zlib.compress(b"abc"), "deflate", 10) == b"abc"


def test_decompression_is_bounded():
    bomb = gzip.compress(b"\0" * 1_000_000)
    with pytest.raises(PayloadTooLarge, match="over the 1000-byte limit"):
        decompress(bomb, "gzip", 1000)


def test_bad_encodings():
    with pytest.raises(InvalidArgument, match="unsupported Content-Encoding 'br'"):
        decompress(b"", "br", 10)
    with pytest.raises(InvalidArgument, match="could not be decompressed"):
        decompress(b"not gzip", "gzip", 10)


def test_choose_encoding():
    assert choose_encoding("br, deflate;q=0.5, gzip") == "deflate"
    assert choose_encoding("identity") is None
    assert choose_encoding(None) is None
