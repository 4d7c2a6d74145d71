"""Byte sizes as operators write them (`12GiB`, `512MB`, `0.8`), and as messages show them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "tib": 2**40,
}  # fmt: skip
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """`4096`, `1.5GiB`, `200 MB` -> bytes; ValueError saying what is accepted otherwise."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"'{text}' is not a size: give bytes, optionally with a unit "
            "(KB, MB, GB, TB or KiB, MiB, GiB, TiB), e.g. 8GiB"
        )
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise ValueError(f"'{text}' is too large a size")
    return int(value)


def format_bytes(count: float) -> str:
    """1536 -> '1.5 KiB': sizes in messages, readable and exact enough to compare."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


@dataclass(frozen=True, slots=True)
class Budget:
    """A share of a device's memory: a fraction of what is free at start, or bytes."""

    fraction: float | None = None
    bytes: int | None = None

    def of(self, free_bytes: int) -> int:
        if self.bytes is not None:
            return self.bytes
        return int((self.fraction if self.fraction is not None else 1.0) * free_bytes)

    def __str__(self) -> str:
        return format_bytes(self.bytes) if self.bytes is not None else f"{self.fraction:g}"


def parse_budget(text: str) -> Budget:
    """A number in (0, 1] is a fraction of the memory free at start; anything else is a
    size in bytes (`parse_bytes`)."""
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if 0 < number <= 1:
        return Budget(fraction=number)
    size = parse_bytes(text)
    if size <= 0:
        raise ValueError(f"a memory budget must be more than 0 bytes, not '{text}'")
    return Budget(bytes=size)
