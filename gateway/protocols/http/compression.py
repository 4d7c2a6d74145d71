"""gzip and deflate bodies, as tritonclient sends and accepts them over HTTP.

Decompression is bounded: a small compressed body must not expand past the body limit.
"""

from __future__ import annotations

import zlib

from accel_base.errors import InvalidArgument, PayloadTooLarge

# zlib window bits: 16 + MAX_WBITS reads a gzip wrapper, MAX_WBITS a zlib (deflate) one.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    if not encoding or encoding == "identity":
        return body
    wbits = _WBITS.get(encoding.strip().lower())
    if wbits is None:
        raise InvalidArgument(
            f"unsupported Content-Encoding '{encoding}', expected gzip, deflate or identity"
        )
    decompressor = zlib.decompressobj(wbits)
    try:
        data = decompressor.decompress(body, limit)
    except zlib.error as exc:
        raise InvalidArgument(f"the {encoding} body could not be decompressed: {exc}") from None
    if decompressor.unconsumed_tail:
        raise PayloadTooLarge(f"the decompressed request body is over the {limit}-byte limit")
    if not decompressor.eof or decompressor.unused_data:
        raise InvalidArgument(f"the {encoding} body is truncated or has trailing data")
    return data


def choose_encoding(accept_encoding: str | None) -> str | None:
    """gzip or deflate when the client accepts one (in its order), else None."""
    for item in (accept_encoding or "").split(","):
        name, _, options = item.partition(";")
        name = name.strip().lower()
        if name in _WBITS and options.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00"):
            return name
    return None


def compress(payload: bytes, encoding: str) -> bytes:
    compressor = zlib.compressobj(wbits=_WBITS[encoding])
    return compressor.compress(payload) + compressor.flush()
