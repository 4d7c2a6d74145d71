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
        mismatch = _shape_mismatch(name, expected, got)
        if mismatch:
            return _incomparable(mismatch)
        if expected.dtype.kind in "OSUb" or got.dtype.kind in "OSUb":
            same = bool(np.array_equal(expected, got))
            within = within and same
            max_abs = max(max_abs, 0.0 if same else float("inf"))
            continue
        if expected.dtype.kind == "c" or got.dtype.kind == "c":
            return _incomparable(f"output '{name}': complex outputs are not compared")
        has_classes = expected.dtype.kind == "f" and expected.ndim >= 1 and expected.shape[-1] > 1
        if np.array_equal(expected, got):  # the common case, priced at one comparison
            if has_classes and top1 is None:
                top1 = True
            continue
        a, b = expected.astype(np.float64, copy=False), got.astype(np.float64, copy=False)
        if a.size:
            diff = _distance(a, b)
            within = within and _within(a, b, diff, rtol, atol)
            max_abs = max(max_abs, float(diff.max()))
            finite = (a != 0) & np.isfinite(a)  # a NaN or infinity shows in max_abs
            if finite.any():
                with np.errstate(over="ignore"):  # a tiny primary: an infinite ratio
                    rel = diff[finite] / np.abs(a[finite])
                max_rel = max(max_rel, float(rel.max()))
        if has_classes:
            same_class = bool(np.array_equal(a.argmax(axis=-1), b.argmax(axis=-1)))
            top1 = same_class if top1 is None else top1 and same_class
    return Agreement(within, top1, max_abs, max_rel)


def _incomparable(why: str) -> Agreement:
    return Agreement(False, False, float("inf"), float("inf"), why)


def _shape_mismatch(name: str, expected: np.ndarray, got: np.ndarray | None) -> str:
    """Why `got` cannot be compared with `expected` by shape, or "" when it can."""
    if got is not None and got.shape == expected.shape:
        return ""
    found = "missing" if got is None else f"shape {list(got.shape)}"
    return f"output '{name}': expected shape {list(expected.shape)}, {found}"


def _distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|b - a| element by element: 0 where both are NaN or the same infinity, infinite
    where only one is NaN or the infinities differ (as far apart as can be)."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, set below
        diff = np.asarray(np.abs(b - a))  # an array even for 0-d outputs
    undefined = np.isnan(diff)
    if undefined.any():
        diff[undefined] = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.inf)[undefined]
    return diff


def _within(a: np.ndarray, b: np.ndarray, diff: np.ndarray, rtol: float, atol: float) -> bool:
    """numpy's allclose(b, a, rtol, atol, equal_nan=True), from the distance already
    taken: an infinite or NaN primary must be matched exactly (distance 0), and a NaN
    never matches a number (whose bound may have overflowed to infinity too)."""
    with np.errstate(invalid="ignore", over="ignore"):
        bound = atol + rtol * np.abs(a)
    close = diff <= np.where(np.isfinite(a), bound, 0.0)
    return bool(np.all(close & (np.isnan(a) == np.isnan(b))))


@dataclass(frozen=True, slots=True)
class RowAgreement:
    """Agreement row by row (axis 0) over every output: arrays of one value per row."""

    within_tolerance: np.ndarray  # bool
    top1: np.ndarray | None  # bool; None: no output with classes
    abs_error: np.ndarray  # float64, each row's largest absolute difference
    rel_error: np.ndarray  # float64, each row's largest relative difference


def compare_rows(
    primary: dict[str, np.ndarray],
    other: dict[str, np.ndarray],
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
) -> RowAgreement:
    """`compare` for a batch, kept per row; an incomparable output raises ValueError."""
    if not primary:
        raise ValueError("the primary gave no outputs to compare")
    rows = len(next(iter(primary.values())))
    within = np.ones(rows, dtype=bool)
    abs_error, rel_error = np.zeros(rows), np.zeros(rows)
    top1: np.ndarray | None = None
    for name, expected in primary.items():
        got = other.get(name)
        mismatch = _shape_mismatch(name, expected, got)
        if mismatch:
            raise ValueError(mismatch)
        if expected.dtype.kind in "OSUbc" or got.dtype.kind in "OSUbc":
            same = (expected.reshape(rows, -1) == got.reshape(rows, -1)).all(axis=1)
            within &= same
            abs_error = np.maximum(abs_error, np.where(same, 0.0, np.inf))
            continue
        a, b = (
            expected.astype(np.float64).reshape(rows, -1),
            got.astype(np.float64).reshape(rows, -1),
        )
        within &= np.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True).all(axis=1)
        diff = _distance(a, b)
        if diff.shape[1]:
            abs_error = np.maximum(abs_error, diff.max(axis=1))
            # Over finite nonzero primaries only (a NaN or infinity shows in abs_error).
            finite = (a != 0) & np.isfinite(a)
            rel = np.divide(diff, np.abs(a), out=np.zeros_like(diff), where=finite)
            rel_error = np.maximum(rel_error, rel.max(axis=1))
        if expected.dtype.kind == "f" and expected.ndim >= 2 and expected.shape[-1] > 1:
            same_class = (
                expected.argmax(axis=-1).reshape(rows, -1) == got.argmax(axis=-1).reshape(rows, -1)
            ).all(axis=1)
            top1 = same_class if top1 is None else top1 & same_class
    return RowAgreement(within, top1, abs_error, rel_error)
