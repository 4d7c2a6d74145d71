"""A Triton Python-backend model and an ensemble against the plain ONNX model.

    .venv/bin/python -m benchmarks.python_backend [--concurrency 1 8] [--measurement-ms 3000]

One gateway pinned to one core serves `identity_fp32` (ONNX Runtime, on the event loop),
`py_identity` (models/python/py_identity: the same identity as a `model.py`, in a
worker process of its own, under dynamic batching) and `onnx_pair` (an ensemble of two
ONNX identities, one after the other), all FP32 [1, 16] at batch 1.
perf_analyzer runs on the other core. The worker process is pinned with the gateway (it
inherits its affinity), so the two share the one core, as they would share a machine.
Printed: each model's throughput against the in-process floor (ONNX Runtime identity
at batch 1 on the server's core), and the Python model's and the ensemble's throughput
against the ONNX model's. The figures say what a request pays for crossing to a Python
worker and back, and for a second step; no goal is set.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.perf import Measurement, add_run_arguments, onnx_floor, perf_analyzer
from gateway.launch import start_gateway
from models import identity, python_models

PROTOCOLS = (("HTTP binary", "http"), ("gRPC unary", "grpc"))
TARGETS = ("identity_fp32", "py_identity", "onnx_pair")
PAIR = """name: "onnx_pair"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "identity_fp32" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "identity_fp32" model_version: -1
    input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }
] }
"""
SHAPE = ("--shape", "INPUT0:16")  # both declare [-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    add_run_arguments(parser)
    args = parser.parse_args()
    results: dict[tuple[str, int, str], Measurement] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        identity.build_one(repository, "fp32")
        python_models.build(repository, ("py_identity",))
        (repository / "onnx_pair").mkdir()
        (repository / "onnx_pair" / "config.pbtxt").write_text(PAIR)
        feed = {"INPUT0": np.ones((1, 16), np.float32)}
        floor = onnx_floor(repository / "identity_fp32", feed, ["OUTPUT0"], args.server_core)
        server = start_gateway(
            repository, "--log-level", "warning",
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core},
        )  # fmt: skip
        try:
            for label, protocol in PROTOCOLS:
                url = server.grpc_url if protocol == "grpc" else server.http_url
                for concurrency in args.concurrency:
                    for target in TARGETS:
                        results[label, concurrency, target] = perf_analyzer(
                            target, url, protocol, concurrency, args.client_core,
                            f"{label} {target}", SHAPE, args.measurement_ms,
                        )  # fmt: skip
        finally:
            server.stop()
    print(f"\nfloor: ONNX Runtime identity in-process, batch 1: {floor:,.0f} /s")
    print(
        f"{'path':<13}{'conc':>5}{'ONNX /s':>10}{'x floor':>8}{'Python /s':>11}{'x ONNX':>8}"
        f"{'pair /s':>9}{'x ONNX':>8}{'p50 ONNX':>10}{'p50 Py':>8}{'p50 pair':>10}"
    )
    for label, _ in PROTOCOLS:
        for concurrency in args.concurrency:
            onnx, python, pair = (results[label, concurrency, t] for t in TARGETS)
            base = onnx.throughput or float("nan")
            print(
                f"{label:<13}{concurrency:>5}{onnx.throughput:>10,.0f}"
                f"{onnx.throughput / floor:>8.3f}{python.throughput:>11,.0f}"
                f"{python.throughput / base:>8.3f}{pair.throughput:>9,.0f}"
                f"{pair.throughput / base:>8.3f}{onnx.p50_us / 1000:>8.2f}ms"
                f"{python.p50_us / 1000:>6.2f}ms{pair.p50_us / 1000:>8.2f}ms"
            )


if __name__ == "__main__":
    main()
