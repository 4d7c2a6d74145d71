"""Throughput and latency of `simple` through the gateway, against the in-process floor.

    .venv/bin/python -m benchmarks.serving_simple [--concurrency 1 8 64] [--measurement-ms 3000]

The server is pinned to one core and perf_analyzer to the other. The floor is the
same ONNX Runtime backend called in-process at batch 1 on the server's core: what
a request would cost if serving were free. Each gateway figure is printed as a
ratio to it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

from backends.base import Device
from backends.onnx_runtime import OnnxRuntimeBackend
from benchmarks.perf import add_run_arguments, perf_analyzer, pin_to, print_table, rate
from gateway.core.model_config import read_config
from gateway.launch import start_gateway
from models.build import build_repository

PATHS = (
    ("gRPC unary", "grpc", ()),
    # ModelStreamInfer: one long-lived stream per client thread, no per-call RPC setup.
    ("gRPC streaming", "grpc", ("--streaming",)),
    ("HTTP binary tensors", "http", ()),
    ("HTTP JSON tensors", "http",
     ("--input-tensor-format", "json", "--output-tensor-format", "json")),
)  # fmt: skip


def in_process_floor(repository: Path, core: int) -> float:
    pin_to(core)
    backend = OnnxRuntimeBackend(
        repository / "simple" / "1" / "model.onnx", read_config(repository / "simple"), Device()
    )
    inputs = {
        "INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16),
        "INPUT1": np.ones((1, 16), dtype=np.int32),
    }
    floor = rate(lambda: backend.run(inputs, ["OUTPUT0", "OUTPUT1"]))
    backend.unload()
    pin_to_all()
    return floor


def pin_to_all() -> None:
    os.sched_setaffinity(0, range(os.cpu_count() or 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    add_run_arguments(parser)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        build_repository(repository, log=lambda line: None)
        floor = in_process_floor(repository, args.server_core)
        # Only `simple`: the example repository's other models take minutes to load.
        server = start_gateway(
            repository, "--log-level", "warning",
            "--model-control-mode", "explicit", "--load-model", "simple",
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core},
        )  # fmt: skip
        try:
            rows = []
            for label, protocol, extra in PATHS:
                url = server.grpc_url if protocol == "grpc" else server.http_url
                for concurrency in args.concurrency:
                    rows.append(
                        perf_analyzer(
                            "simple",
                            url,
                            protocol,
                            concurrency,
                            args.client_core,
                            label,
                            extra,
                            args.measurement_ms,
                        )  # fmt: skip
                    )
        finally:
            server.stop()
    print_table(
        f"simple (INT32 [1,16] add/sub), server on core {args.server_core}, "
        f"perf_analyzer on core {args.client_core}",
        "ONNX Runtime in-process, batch 1",
        floor,
        rows,
    )
    best = {
        label: max(
            (m.throughput for m in rows if m.label == label and m.throughput == m.throughput),
            default=float("nan"),
        )
        for label, _, _ in PATHS
    }
    for label, value in best.items():
        print(f"best {label}: {value:,.0f} infer/s")


if __name__ == "__main__":
    main()
