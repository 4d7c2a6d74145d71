"""4 MB tensors through system shared memory against the binary HTTP extension, in one run.

    .venv/bin/python -m benchmarks.shared_memory [--concurrency 1 4] [--measurement-ms 3000]

The model is `identity_fp32` (ONNX Identity, FP32 [batch, -1]) fed [1, 1048576]: 4 MiB in
and 4 MiB out per request. The gateway, started with --allow-shared-memory, is pinned to
one core and perf_analyzer to the other. For each concurrency, perf_analyzer runs:

- HTTP, binary tensor extension: the 4 MiB travel in the request and response bodies;
- HTTP, --shared-memory system: only the JSON header travels, the tensors stay in /dev/shm;
- the same two over gRPC (raw contents, then shared memory).

The floor is the same ONNX Runtime Identity called in-process at the same size on the
server's core; every figure is printed as a ratio to it, and the shared-memory paths also
as a ratio to the wire path of their protocol. The goal: HTTP shm >= 2x HTTP binary.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.perf import Measurement, add_run_arguments, onnx_floor, perf_analyzer, print_table
from gateway.launch import start_gateway
from models.identity import build_one

MODEL = "identity_fp32"
ELEMENTS = 1024 * 1024  # FP32: 4 MiB per tensor
SHAPE = ("--shape", f"INPUT0:{ELEMENTS}")
SHARED = ("--shared-memory", "system", "--output-shared-memory-size", str(4 * ELEMENTS))

PATHS = (  # label, protocol, perf_analyzer options, the wire path it is compared with
    ("HTTP binary", "http", SHAPE, None),
    ("HTTP shared memory", "http", SHAPE + SHARED, "HTTP binary"),
    ("gRPC raw", "grpc", SHAPE, None),
    ("gRPC shared memory", "grpc", SHAPE + SHARED, "gRPC raw"),
)


def in_process_floor(model_dir: Path, core: int, seconds: float) -> float:
    """Calls per second of the Identity in-process at [1, 1048576], on the server's core."""
    feed = {"INPUT0": np.random.default_rng(0).random((1, ELEMENTS), dtype=np.float32)}
    return onnx_floor(model_dir, feed, ["OUTPUT0"], core, seconds, warmup=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    add_run_arguments(parser)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        build_one(repository, "fp32")
        floor = in_process_floor(repository / MODEL, args.server_core, 3.0)
        server = start_gateway(
            repository, "--allow-shared-memory", "--log-level", "warning",
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core},
        )  # fmt: skip
        rows: list[Measurement] = []
        try:
            for concurrency in args.concurrency:
                for label, protocol, extra, _ in PATHS:
                    url = server.grpc_url if protocol == "grpc" else server.http_url
                    run = (MODEL, url, protocol, concurrency, args.client_core, label, extra)
                    rows.append(perf_analyzer(*run, args.measurement_ms))
        finally:
            server.stop()
    print_table(
        f"{MODEL} [1,{ELEMENTS}] FP32 (4 MiB in, 4 MiB out), server on core "
        f"{args.server_core}, perf_analyzer on core {args.client_core}",
        "ONNX Runtime Identity in-process, same size",
        floor,
        rows,
    )
    print()
    by_key = {(m.label, m.concurrency): m.throughput for m in rows}
    for concurrency in args.concurrency:
        for label, _, _, baseline in PATHS:
            if baseline is None:
                continue
            ratio = by_key[(label, concurrency)] / by_key[(baseline, concurrency)]
            shown = "nan" if math.isnan(ratio) else f"{ratio:.2f}x"
            print(f"c={concurrency}: {label} / {baseline}: {shown}")


if __name__ == "__main__":
    main()
