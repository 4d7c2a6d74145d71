"""Thread instances against worker-process instances of the same model, in one run.

    .venv/bin/python -m benchmarks.workers [--measurement-ms 3000] [--skip-wide]

One gateway pinned to one core (its workers inherit the pin) serves each model twice,
`<model>_thread` and `<model>_process`, differing only in the `execution` parameter;
perf_analyzer runs on the other core over HTTP with binary tensors.

- Hand-off cost: `mlp` (784 -> 1024 -> 1024 -> 10) without dynamic batching, one
  request at a time (concurrency 1) of batch 1 and of batch 32. The figure is the p50
  latency a process instance adds per batch; the goal is at most 30 us.
- The same cost without HTTP: the backend called in-process against one worker process
  driven through workers.client, on one core, p50 of single calls. Its floor is the
  least any worker can add: a second process that runs the same ONNX session after
  receiving a one-line message and answers with one (a bare socket round trip).
- Batched throughput: `mlp_wide` (8192-wide hidden layers, ~294 MB) with dynamic
  batching at concurrency 64; the goal is a process at least 0.95 of a thread.

Every throughput is also printed as a ratio to the floor: the same ONNX model called
in-process on one thread at the same batch size (rows per second).
"""

from __future__ import annotations

import argparse
import marshal
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from backends.base import Device
from backends.onnx_runtime import OnnxRuntimeBackend
from benchmarks.perf import Measurement, add_run_arguments, perf_analyzer, pin_to, print_table, rate
from gateway.core.model_config import read_config
from gateway.launch import start_gateway
from models.mlp import write_mlp
from workers.client import WorkerProcess
from workers.environment import worker_environment

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


def p50_us(call: Callable[[], object], calls: int = 3000) -> float:
    for _ in range(calls // 10):
        call()
    times = []
    for _ in range(calls):
        began = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - began)
    return sorted(times)[calls // 2] / 1e3


def bare_worker_us(artifact: Path, config, feed: dict[str, np.ndarray]) -> float:
    """p50 of a round trip to a forked process that runs the session on a short message."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the child: no gateway code, only the session and the socket
        ours.close()
        backend = OnnxRuntimeBackend(artifact, config, Device())
        while message := theirs.recv(4096):
            marshal.loads(message)
            backend.run(feed, ["OUTPUT0"])
            theirs.send(marshal.dumps(("ran", 0)))
        os._exit(0)
    theirs.close()
    request = marshal.dumps(("run", [("INPUT0", "<f4", feed["INPUT0"].shape, 0, 0)]))

    def round_trip() -> None:
        ours.send(request)
        marshal.loads(ours.recv(4096))

    try:
        return p50_us(round_trip)
    finally:
        ours.close()
        os.waitpid(pid, 0)


def direct_hand_off(args: argparse.Namespace) -> None:
    pin_to(args.server_core)  # this process and the worker it starts share one core
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp)
        write_mlp(repository, "mlp", 1024, dynamic_batching=False, intra_op_threads=1)
        config = read_config(repository / "mlp")
        artifact = repository / "mlp" / "1" / "model.onnx"
        env, device = worker_environment(config, Device(), os.getpid())
        worker = WorkerProcess("mlp-benchmark", env)
        worker.load("onnxruntime_onnx", artifact, config, device, 120)
        backend = OnnxRuntimeBackend(artifact, config, Device())
        print("\nmlp without HTTP, one core, p50 of single calls (us)")
        print(f"{'batch':>5} {'in-process':>11} {'bare worker':>12} {'our worker':>11} "
              f"{'added (floor)':>14}")  # fmt: skip
        try:
            for batch in (1, 32):
                feed = {"INPUT0": np.random.default_rng(0).random((batch, 784), dtype=np.float32)}

                def through_worker(feed: dict[str, np.ndarray] = feed) -> None:
                    worker.send_run(feed, ["OUTPUT0"])
                    assert worker.reply_within(10.0) is not None

                alone = p50_us(lambda feed=feed: backend.run(feed, ["OUTPUT0"]))
                bare = bare_worker_us(artifact, config, feed)
                ours = p50_us(through_worker)
                print(f"{batch:>5} {alone:>11.0f} {bare:>12.0f} {ours:>11.0f} "
                      f"{ours - alone:>+8.0f} ({bare - alone:+.0f})")  # fmt: skip
        finally:
            worker.unload(10)
            backend.unload()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--skip-wide", action="store_true", help="only the hand-off cost")
    args = parser.parse_args()
    direct_hand_off(args)
    hand_off(args)
    if not args.skip_wide:
        batched_wide(args)


if __name__ == "__main__":
    main()
