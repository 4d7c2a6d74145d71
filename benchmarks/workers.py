"""Thread instances against worker-process instances of the same model, in one run.

    .venv/bin/python -m benchmarks.workers [--measurement-ms 3000] [--skip-wide]

One gateway pinned to one core (its workers inherit the pin) serves each model twice,
`<model>_thread` and `<model>_process`, differing only in the `execution` parameter;
perf_analyzer runs on the other core over HTTP with binary tensors.

- Hand-off cost: `mlp` (784 -> 1024 -> 1024 -> 10) without dynamic batching, one
  request at a time (concurrency 1) of batch 1 and of batch 32. The figure is the p50
  latency a process instance adds per batch; the goal is at most 30 us.
- Batched throughput: `mlp_wide` (8192-wide hidden layers, ~294 MB) with dynamic
  batching at concurrency 64; the goal is a process at least 0.95 of a thread.

Every throughput is also printed as a ratio to the floor: the same ONNX model called
in-process on one thread at the same batch size (rows per second).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from backends.base import Device
from backends.onnx_runtime import OnnxRuntimeBackend
from benchmarks.perf import Measurement, add_run_arguments, perf_analyzer, pin_to, print_table, rate
from gateway.launch import start_gateway
from gateway.model_config import read_config
from models.mlp import write_mlp

EXECUTIONS = ("thread", "process")


def build(repository: Path, model: str, hidden: int, batched: bool) -> None:
    for execution in EXECUTIONS:
        name = f"{model}_{execution}"
        write_mlp(
            repository, name, hidden, dynamic_batching=batched,
            max_batch_size=32 if hidden > 1024 else 64,
            max_queue_delay_us=20000 if hidden > 1024 else 2000, intra_op_threads=1,
        )  # fmt: skip
        with open(repository / name / "config.pbtxt", "a") as config:
            config.write(
                f'\nparameters {{ key: "execution" value {{ string_value: "{execution}" }} }}\n'
            )


def floor_rows_per_s(model_dir: Path, batch: int, core: int, seconds: float) -> float:
    """ONNX Runtime in-process on one thread at `batch` rows, on the server's core."""
    pin_to(core)
    backend = OnnxRuntimeBackend(model_dir / "1" / "model.onnx", read_config(model_dir), Device())
    feed = {"INPUT0": np.random.default_rng(0).random((batch, 784), dtype=np.float32)}
    calls = rate(lambda: backend.run(feed, ["OUTPUT0"]), seconds, warmup=3)
    backend.unload()
    return batch * calls


def serve(repository: Path, tmp: Path, args: argparse.Namespace):
    pin_to(args.client_core)  # this process only waits from here on
    return start_gateway(
        repository, "--log-level", "warning", log_path=tmp / "gateway.log",
        cpu_cores={args.server_core}, timeout_s=180,
    )  # fmt: skip


def hand_off(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        build(repository, "mlp", 1024, batched=False)
        floors = {
            b: floor_rows_per_s(repository / "mlp_thread", b, args.server_core, 2.0)
            for b in (1, 32)
        }
        server = serve(repository, Path(tmp), args)
        rows: dict[tuple[str, int], Measurement] = {}
        try:
            for batch in (1, 32):
                for execution in EXECUTIONS:
                    rows[execution, batch] = perf_analyzer(
                        f"mlp_{execution}", server.http_url, "http", 1, args.client_core,
                        f"{execution}, batch {batch}", ("-b", str(batch)), args.measurement_ms,
                    )  # fmt: skip
        finally:
            server.stop()
    for batch in (1, 32):
        print_table(
            f"mlp, batch {batch} per request, concurrency 1, HTTP binary",
            f"ONNX Runtime in-process, batch {batch}, one thread (rows/s)",
            floors[batch],
            [rows[e, batch] for e in EXECUTIONS],
        )
        thread, process = rows["thread", batch], rows["process", batch]
        print(
            f"process instance: +{process.p50_us - thread.p50_us:.0f} us per batch at p50 "
            f"(goal <= 30), throughput {process.throughput / thread.throughput:.3f}x thread"
        )


def batched_wide(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        build(repository, "mlp_wide", 8192, batched=True)
        floor = floor_rows_per_s(repository / "mlp_wide_thread", 32, args.server_core, 6.0)
        server = serve(repository, Path(tmp), args)
        try:
            rows = [
                perf_analyzer(
                    f"mlp_wide_{execution}",
                    server.http_url,
                    "http",
                    64,
                    args.client_core,
                    f"{execution}, dynamic batching",
                    (),
                    args.measurement_ms,
                )  # fmt: skip
                for execution in EXECUTIONS
            ]
        finally:
            server.stop()
    print_table(
        "mlp_wide, batch-1 requests, dynamic batching, concurrency 64, HTTP binary",
        "ONNX Runtime in-process, batch 32, one thread (rows/s)",
        floor,
        rows,
    )
    print(
        f"process / thread throughput: {rows[1].throughput / rows[0].throughput:.3f} (goal >= 0.95)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--skip-wide", action="store_true", help="only the hand-off cost")
    args = parser.parse_args()
    hand_off(args)
    if not args.skip_wide:
        batched_wide(args)


if __name__ == "__main__":
    main()
