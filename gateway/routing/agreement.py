"""How closely a shadow variant's outputs match the primary's: pure functions on arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5


@dataclass(frozen=True, slots=True)
class Agreement:
    within_tolerance: bool  # every output allclose(shadow, primary, rtol, atol)
    # Whether the argmax over the last axis matched in every row of every output
    # with classes (floating point, last axis longer than 1); None: no such output.
    top1: bool | None
    max_abs_error: float  # inf where an output is missing or shaped differently
    max_rel_error: float  # |shadow - primary| / |primary|, over nonzero primaries
    mismatch: str = ""  # what made the outputs incomparable, if anything


def compare(
    primary: dict[str, np.ndarray],
    shadow: dict[str, np.ndarray],
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
) -> Agreement:
    """Compare every output of `primary` with the same-named output of `shadow`."""
    within, top1 = True, None
    max_abs = max_rel = 0.0
    for name, expected in primary.items():
        got = shadow.get(name)
        if got is None or got.shape != expected.shape:
            found = "missing" if got is None else f"shape {list(got.shape)}"
            return _incomparable(f"output '{name}': expected shape {list(expected.shape)}, {found}")
        if expected.dtype.kind in "OSUb" or got.dtype.kind in "OSUb":
            same = bool(np.array_equal(expected, got))
            within = within and same
            max_abs = max(max_abs, 0.0 if same else float("inf"))
            continue
        if expected.dtype.kind == "c" or got.dtype.kind == "c":
            return _incomparable(f"output '{name}': complex outputs are not compared")
        a, b = expected.astype(np.float64), got.astype(np.float64)
        within = within and bool(np.allclose(b, a, rtol=rtol, atol=atol, equal_nan=True))
        if a.size:
            diff = np.abs(b - a)
            both_nan = np.isnan(a) & np.isnan(b)
            diff[both_nan] = 0.0
            diff[np.isnan(diff)] = np.inf  # one side NaN: as far apart as can be
            max_abs = max(max_abs, float(diff.max()))
            nonzero = a != 0
            if nonzero.any():
                max_rel = max(max_rel, float((diff[nonzero] / np.abs(a[nonzero])).max()))
        if expected.dtype.kind == "f" and expected.ndim >= 1 and expected.shape[-1] > 1:
            same_class = bool(np.array_equal(a.argmax(axis=-1), b.argmax(axis=-1)))
            top1 = same_class if top1 is None else top1 and same_class
    return Agreement(within, top1, max_abs, max_rel)


def _incomparable(why: str) -> Agreement:
    return Agreement(False, False, float("inf"), float("inf"), why)
