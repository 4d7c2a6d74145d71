"""Large tensors on the wire and through system shared memory, beside this machine's floors.

    .venv/bin/python -m benchmarks.shared_memory [--sizes 65536 602112 4194304]
        [--concurrency 1 4] [--measurement-ms 3000]

The model is `identity_fp32` (ONNX Identity, FP32 [batch, -1]), fed one row of each size:
64 KiB, 588 KiB (one FP32 224x224x3 image) and 4 MiB by default, the same size coming
back. The gateway, started with --allow-shared-memory, is pinned to one core and
perf_analyzer to the other. For each size and concurrency perf_analyzer runs HTTP with
binary tensors, gRPC with raw contents, and both with `--shared-memory system` (only the
JSON or protobuf header travels; the tensors stay in /dev/shm).

Each figure is a rate of requests (MB/s: requests a second times the tensor's size) and a
ratio to a floor measured in the same run (benchmarks/transfer_floors.py): the wire paths
against round trips of the same size over loopback TCP between two processes at the same
concurrency, the shared-memory paths against one copy in and one out of a mapped /dev/shm
object. Goals (issue 41): HTTP binary and gRPC at least 0.8x the TCP floor at 4 MiB and
0.7x at one image; shared memory at least 0.5x the mapped floor.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from benchmarks.perf import Measurement, add_run_arguments, perf_analyzer
from benchmarks.transfer_floors import mapped_copies, tcp_round_trips
from gateway.launch import start_gateway
from models.identity import build_one

MODEL = "identity_fp32"
SIZES = (64 * 1024, 224 * 224 * 3 * 4, 4 * 1024 * 1024)  # bytes of one FP32 tensor
# The goals a size is held to on the wire (TCP floor) and through shared memory (mapped).
WIRE_GOALS = {224 * 224 * 3 * 4: 0.7, 4 * 1024 * 1024: 0.8}
SHARED_GOAL = 0.5

PATHS = (  # label, protocol, through shared memory
    ("HTTP binary", "http", False),
    ("gRPC raw", "grpc", False),
    ("HTTP shared memory", "http", True),
    ("gRPC shared memory", "grpc", True),
)


def options(size: int, shared: bool) -> tuple[str, ...]:
    """perf_analyzer's options for one row of `size` bytes, on the wire or in /dev/shm."""
    shape = ("--shape", f"INPUT0:{size // 4}")
    if not shared:
        return shape
    return (*shape, "--shared-memory", "system", "--output-shared-memory-size", str(size))


def describe(size: int) -> str:
    return f"{size / 1024:,.0f} KiB" if size < 1024 * 1024 else f"{size / 2**20:g} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    add_run_arguments(parser)
    args = parser.parse_args()
    if any(size <= 0 or size % 4 for size in args.sizes):
        parser.error("--sizes are bytes of FP32 tensors: positive multiples of 4")

    floors: dict[tuple[str, int, int], float] = {}  # (kind, size, concurrency) -> per second
    for size in args.sizes:
        floors["mapped", size, 0] = mapped_copies(size, args.server_core)
        for concurrency in args.concurrency:
            floors["tcp", size, concurrency] = tcp_round_trips(
                size, concurrency, args.server_core, args.client_core
            )
    rows: list[tuple[int, Measurement, bool]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        build_one(repository, "fp32")
        server = start_gateway(
            repository, "--allow-shared-memory", "--log-level", "warning",
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core},
        )  # fmt: skip
        try:
            for size in args.sizes:
                for concurrency in args.concurrency:
                    for label, protocol, shared in PATHS:
                        url = server.grpc_url if protocol == "grpc" else server.http_url
                        measured = perf_analyzer(
                            MODEL, url, protocol, concurrency, args.client_core, label,
                            options(size, shared), args.measurement_ms,
                        )  # fmt: skip
                        rows.append((size, measured, shared))
        finally:
            server.stop()
    report(rows, floors, args)


def report(rows: list[tuple[int, Measurement, bool]], floors: dict, args) -> None:
    print(
        f"\n{MODEL}, one row each way, server on core {args.server_core}, perf_analyzer on "
        f"core {args.client_core}"
    )
    print("floors (MB/s of one direction's tensor bytes):")
    for size in args.sizes:
        tcp = ", ".join(
            f"c={c} {floors['tcp', size, c] * size / 1e6:,.0f}" for c in args.concurrency
        )
        mapped = floors["mapped", size, 0] * size / 1e6
        print(f"  {describe(size):>9}: loopback TCP {tcp}; mapped copy in and out {mapped:,.0f}")
    print(f"{'size':>9} {'path':<20}{'conc':>5}{'infer/s':>10}{'MB/s':>9}{'x floor':>9}  goal")
    for size, m, shared in rows:
        floor = floors["mapped", size, 0] if shared else floors["tcp", size, m.concurrency]
        ratio = m.throughput / floor
        goal = SHARED_GOAL if shared else WIRE_GOALS.get(size)
        verdict = (
            ""
            if goal is None or math.isnan(ratio)
            else f"{goal:.1f}x " + ("met" if ratio >= goal else "not met")
        )
        print(
            f"{describe(size):>9} {m.label:<20}{m.concurrency:>5}{m.throughput:>10,.0f}"
            f"{m.throughput * size / 1e6:>9,.0f}{ratio:>9.3f}  {verdict}"
        )
    print("x floor: wire paths against loopback TCP round trips at the same concurrency,")
    print("shared memory against one copy in and one out of a mapped /dev/shm object")


if __name__ == "__main__":
    main()
