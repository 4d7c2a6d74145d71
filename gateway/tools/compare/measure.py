"""One variant measured: agreement with the reference row by row, accuracy against
labels, load time, first call, memory, and latency and throughput per batch size and
concurrency. Results are plain dicts, as the JSON report writes them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway.core.routing.agreement import compare_rows
from gateway.tools.compare.inputs import Dataset, Signature

SAMPLES_KEPT = 500  # latency samples and per-row errors kept in the report, for its plots


@dataclass(frozen=True)
class Settings:
    batch_sizes: tuple[int, ...] = (1, 8)
    concurrency: tuple[int, ...] = (1, 4)
    requests: int = 2000  # at most, per batch size and concurrency
    seconds: float = 5.0  # at most, per batch size and concurrency
    min_samples: int = 100  # fewer: the point is marked as not enough
    rtol: float = 1e-3
    atol: float = 1e-4
    min_agreement: float = 0.99  # share of rows within tolerance (and of top-1 matches)


def _sample(values: np.ndarray | list[float], keep: int = SAMPLES_KEPT) -> list[float]:
    array = np.asarray(values, dtype=np.float64)
    if len(array) > keep:
        array = array[np.linspace(0, len(array) - 1, keep).astype(int)]
    return [round(float(v), 9) for v in array]


def _class_output(outputs: dict[str, np.ndarray]) -> str | None:
    """The first floating-point output with a class axis (last axis longer than 1)."""
    for name, array in outputs.items():
        if array.dtype.kind == "f" and array.ndim >= 1 and array.shape[-1] > 1:
            return name
    return None


def run_batches(target: Any, name: str, batches: list[dict]) -> list[dict[str, np.ndarray]]:
    return [target.infer(name, batch) for batch in batches]


def _stack(outputs: list[dict[str, np.ndarray]], batching: bool) -> dict[str, np.ndarray]:
    join = np.concatenate if batching else np.stack
    return {key: join([o[key] for o in outputs]) for key in outputs[0]}


def agreement(
    reference: dict[str, np.ndarray], outputs: dict[str, np.ndarray], settings: Settings
) -> dict[str, Any]:
    try:
        rows = compare_rows(reference, outputs, settings.rtol, settings.atol)
    except ValueError as exc:  # an output missing or shaped differently
        return {"rows": 0, "within_tolerance": 0.0, "top1": 0.0, "max_abs_error": None,
                "max_rel_error": None, "abs_errors": [], "incomparable": str(exc)}  # fmt: skip
    return {
        "rows": len(rows.abs_error),
        "within_tolerance": float(rows.within_tolerance.mean()),
        "top1": None if rows.top1 is None else float(rows.top1.mean()),
        "max_abs_error": float(rows.abs_error.max()),
        "max_rel_error": float(rows.rel_error.max()),
        "abs_errors": _sample(rows.abs_error),
    }


def accuracy(outputs: dict[str, np.ndarray], labels: np.ndarray | None) -> float | None:
    name = _class_output(outputs)
    if labels is None or name is None:
        return None
    predicted = outputs[name].reshape(len(outputs[name]), -1).argmax(axis=1)
    return float((predicted == labels[: len(predicted)]).mean())


def latency_point(
    target: Any, name: str, batches: list[dict], batch_size: int, concurrency: int,
    settings: Settings,
) -> dict[str, Any]:  # fmt: skip
    start = time.perf_counter()
    latencies = target.run_load(name, batches, concurrency, settings.requests, settings.seconds)
    elapsed = time.perf_counter() - start
    ms = np.asarray(latencies) * 1e3
    p50, p90, p99 = (np.percentile(ms, q) if len(ms) else float("nan") for q in (50, 90, 99))
    return {
        "batch_size": batch_size,
        "concurrency": concurrency,
        "requests": len(latencies),
        "seconds": round(elapsed, 3),
        "rows_per_s": len(latencies) * batch_size / elapsed if elapsed > 0 else 0.0,
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "enough_samples": len(latencies) >= settings.min_samples,
        "latency_ms": _sample(ms),
    }


def measure_variant(
    target: Any,
    name: str,
    load_s: float | None,
    dataset: Dataset,
    signature: Signature,
    settings: Settings,
    reference: dict[int, dict[str, np.ndarray]] | None,
    step: Callable[[str], None],
) -> tuple[dict[str, Any], dict[int, dict[str, np.ndarray]]]:
    """The variant's report entry, and its outputs per batch size (the reference's are
    what later variants are compared with)."""
    step(f"{name}: first call")
    sizes = settings.batch_sizes if signature.batching else (1,)
    per_size = {bs: dataset.batches(bs, signature.batching) for bs in sizes}
    first = time.perf_counter()
    target.infer(name, per_size[sizes[0]][0])
    first_call_ms = (time.perf_counter() - first) * 1e3
    outputs: dict[int, dict[str, np.ndarray]] = {}
    entry: dict[str, Any] = {
        "name": name, "load_s": load_s, "first_call_ms": first_call_ms,
        "memory_bytes": target.memory_bytes(name), "agreement": {}, "points": [],
    }  # fmt: skip
    for bs in sizes:
        step(f"{name}: outputs at batch {bs}")
        outputs[bs] = _stack(run_batches(target, name, per_size[bs]), signature.batching)
        expected = reference[bs] if reference is not None else outputs[bs]
        entry["agreement"][str(bs)] = agreement(expected, outputs[bs], settings)
    entry["accuracy"] = accuracy(outputs[sizes[0]], dataset.labels)
    for bs in sizes:
        for concurrency in settings.concurrency:
            step(f"{name}: batch {bs}, concurrency {concurrency}")
            entry["points"].append(
                latency_point(target, name, per_size[bs], bs, concurrency, settings)
            )
    return entry, outputs
