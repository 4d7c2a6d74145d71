"""Protobuf's wire format where the project writes bytes itself instead of through
generated messages (the OTLP spans, ModelInfer's raw contents)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """A (u)int64 as a base-128 varint; a negative int64 takes ten bytes."""
    if not -(1 << 63) <= value < 1 << 64:
        raise ValueError(f"{value} does not fit 64 bits")
    if value < 0:  # int64: two's complement in ten bytes
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
