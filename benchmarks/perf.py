"""Shared pieces of the serving benchmarks: core pinning, perf_analyzer runs, the table."""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PERF_ANALYZER = Path(__file__).resolve().parents[1] / ".tools" / "perf_analyzer" / "perf_analyzer"


@dataclass
class Measurement:
    label: str
    concurrency: int
    throughput: float  # infer/s
    p50_us: float
    p99_us: float


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every serving benchmark takes: measurement window and the two cores."""
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)


def pin_to(core: int) -> None:
    """Pin this process to one core, as the server and the client are in the benchmarks."""
    os.sched_setaffinity(0, {core})


def rate(call: Callable[[], object], seconds: float = 2.0, warmup: int = 50) -> float:
    """Calls per second of `call`, after a short warm-up."""
    for _ in range(warmup):
        call()
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        call()
        count += 1
    return count / elapsed


def onnx_floor(
    model_dir: Path,
    feed: dict[str, Any],
    output_names: list[str],
    core: int,
    seconds: float = 2.0,
    warmup: int = 50,
) -> float:
    """Calls per second of an ONNX model run in-process on `core` (the floor a served
    figure is a ratio to); the process's affinity is all cores again afterwards."""
    from backends.base import Device
    from backends.onnx_runtime import OnnxRuntimeBackend
    from gateway.core.model_config import read_config

    pin_to(core)
    backend = OnnxRuntimeBackend(model_dir / "1" / "model.onnx", read_config(model_dir), Device())
    try:
        return rate(lambda: backend.run(feed, output_names), seconds, warmup)
    finally:
        backend.unload()
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def perf_analyzer(
    model: str,
    url: str,
    protocol: str,
    concurrency: int,
    core: int | str,
    label: str,
    extra: tuple[str, ...] = (),
    measurement_ms: int = 3000,
) -> Measurement:
    """Run perf_analyzer on `core` (or a taskset list of cores, "8-15") at one concurrency
    and read its CSV report."""
    if not PERF_ANALYZER.exists():
        raise SystemExit(
            f"perf_analyzer is not installed at {PERF_ANALYZER}; run scripts/test once"
        )
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.csv"
        command = [
            "taskset", "-c", str(core), str(PERF_ANALYZER), "-m", model, "-u", url,
            "-i", protocol, "--concurrency-range", str(concurrency),
            "--measurement-interval", str(measurement_ms), "-f", str(report),
            # A shared 2-core machine drifts more than perf_analyzer's default 10 %.
            "--stability-percentage", "25", "--max-trials", "8", *extra,
        ]  # fmt: skip
        try:
            # Past ~8k requests/s, perf_analyzer's own HTTP client on its one core can stall
            # (it stops reading replies and its memory grows); such a run is reported, not
            # waited for.
            result = subprocess.run(command, capture_output=True, text=True, timeout=150)
        except subprocess.TimeoutExpired:
            print(f"  {label} c={concurrency}: perf_analyzer did not finish in 150 s")
            return Measurement(label, concurrency, float("nan"), float("nan"), float("nan"))
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            print(f"  {label} c={concurrency}: perf_analyzer failed: {' / '.join(tail)}")
            return Measurement(label, concurrency, float("nan"), float("nan"), float("nan"))
        with open(report) as handle:
            row = next(csv.DictReader(handle))
    return Measurement(
        label, concurrency, float(row["Inferences/Second"]),
        float(row["p50 latency"]), float(row["p99 latency"]),
    )  # fmt: skip


def print_table(title: str, floor_label: str, floor: float, rows: list[Measurement]) -> None:
    """One row a measurement, as a ratio to the floor and to the HTTP binary figure of the
    same group (the label's part after the first comma) and concurrency, where measured."""
    print(f"\n{title}")
    print(f"floor: {floor_label}: {floor:,.0f} /s")
    print(
        f"{'path':<32}{'conc':>5}{'infer/s':>10}{'x floor':>9}{'x HTTP bin':>11}"
        f"{'p50 ms':>9}{'p99 ms':>9}"
    )
    for m in rows:
        reference = http_binary_of(m, rows)
        versus = f"{m.throughput / reference:>11.2f}" if reference else f"{'':>11}"
        print(
            f"{m.label:<32}{m.concurrency:>5}{m.throughput:>10,.0f}{m.throughput / floor:>9.3f}"
            f"{versus}{m.p50_us / 1000:>9.2f}{m.p99_us / 1000:>9.2f}"
        )


def _group(label: str) -> str:
    return label.partition(",")[2].strip()


def http_binary_of(m: Measurement, rows: list[Measurement]) -> float | None:
    """The HTTP binary throughput measured beside `m`: same group, same concurrency."""
    for r in rows:
        same = r.concurrency == m.concurrency and _group(r.label) == _group(m.label)
        if same and r.label.startswith("HTTP binary") and r.throughput > 0:
            return r.throughput
    return None
