"""Soak: half of saturation for ten minutes, HTTP and gRPC mixed, open loop.

    .venv/bin/python -m benchmarks.soak [--minutes 10]

One gateway pinned to one core serves `mlp` (784 -> 1024 -> 1024 -> 10, dynamic
batching). Saturation is measured first (a closed loop of 16 HTTP connections); then
half of it is offered, half over HTTP (binary tensors) and half over gRPC, from the other
core. Reported per minute: requests, errors and p99 for each protocol, and the server's
resident memory (its own process; instances here are threads). Goals (issue 12): zero
errors, resident memory growing under 5% from the end of the first minute to the end,
every minute's p99 within 2x of the first minute's.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

from benchmarks.open_loop import closed_loop, offer
from benchmarks.overload import p99_ms, request_bytes
from benchmarks.perf import pin_to
from gateway.launch import start_gateway
from gateway.proto import grpc_service_pb2 as pb
from gateway.proto import grpc_service_pb2_grpc as pb_grpc
from models.mlp import write_mlp

MODEL = "mlp"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def grpc_request() -> pb.ModelInferRequest:
    data = np.random.default_rng(1).random((1, 784), dtype=np.float32)
    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 784])
    request.raw_input_contents.append(data.tobytes())
    return request


async def grpc_minute(url: str, rate: float, seconds: float) -> tuple[list[float], int]:
    """Open loop of unary ModelInfer calls; (latencies of successes, failures)."""
    async with grpc.aio.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = grpc_request()
        latencies: list[float] = []
        failures = 0

        async def one() -> None:
            nonlocal failures
            began = time.monotonic()
            try:
                await stub.ModelInfer(request, timeout=10)
                latencies.append(time.monotonic() - began)
            except grpc.aio.AioRpcError:
                failures += 1

        tasks = []
        start, total = time.monotonic(), int(rate * seconds)
        while len(tasks) < total:
            due = min(int((time.monotonic() - start) * rate) + 1, total)
            tasks += [asyncio.ensure_future(one()) for _ in range(due - len(tasks))]
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        return latencies, failures


async def mixed_minute(http_port: int, grpc_url: str, rate: float, seconds: float):
    http_run, grpc_result = await asyncio.gather(
        offer("127.0.0.1", http_port, request_bytes(http_port, MODEL), rate / 2, seconds),
        grpc_minute(grpc_url, rate / 2, seconds),
    )
    return http_run, grpc_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        write_mlp(repository, MODEL, 1024, dynamic_batching=True, intra_op_threads=1)
        pin_to(args.client_core)
        server = start_gateway(
            repository, "--log-level", "warning", log_path=Path(tmp) / "gateway.log",
            cpu_cores={args.server_core}, timeout_s=180,
        )  # fmt: skip
        pid = server.process.pid
        try:
            request = request_bytes(server.http_port, MODEL)
            saturation = asyncio.run(closed_loop("127.0.0.1", server.http_port, request, 16, 5))
            rate = saturation / 2
            print(f"saturation {saturation:,.0f}/s; offering {rate:,.0f}/s, half over gRPC")
            print("minute  http p99 ms  grpc p99 ms  requests  errors  RSS MiB")
            first_p99, first_rss, errors, worst = None, None, 0, 0.0
            for minute in range(1, args.minutes + 1):
                http_run, (grpc_ok, grpc_failed) = asyncio.run(
                    mixed_minute(server.http_port, server.grpc_url, rate, 60.0)
                )
                http_ok = [o.latency_s for o in http_run.outcomes if o.status == 200]
                failed = len(http_run.outcomes) - len(http_ok) + grpc_failed
                errors += failed
                p99s = (p99_ms(http_ok), p99_ms(grpc_ok))
                rss = rss_mib(pid)
                first_p99 = first_p99 or p99s
                first_rss = first_rss or rss
                count = len(http_run.outcomes) + len(grpc_ok) + grpc_failed
                print(f"{minute:>6}  {p99s[0]:>11.2f}  {p99s[1]:>11.2f}  {count:>8}  "
                      f"{failed:>6}  {rss:>7.1f}")  # fmt: skip
                worst = max(worst, *(p / f for p, f in zip(p99s, first_p99, strict=True)))
            print(f"errors {errors} (goal 0); RSS {100 * (rss / first_rss - 1):+.1f}% after the "
                  f"first minute (goal < 5%); worst minute's p99 {worst:.2f}x the first's "
                  "(goal <= 2)")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
