"""Soak: half of saturation for ten minutes, HTTP and gRPC mixed, open loop.

    .venv/bin/python -m benchmarks.soak [--minutes 10]

One gateway pinned to one core serves `mlp` (784 -> 1024 -> 1024 -> 10, dynamic
batching). Saturation is measured first, with the same mix: closed loops of 16 HTTP
connections and 16 gRPC callers at once. Then half of each protocol's share is offered,
open loop (HTTP with binary tensors, gRPC unary calls), from the other core. Reported per
minute: requests, errors and p99 for each protocol, the server's resident memory (its
own process; instances here are threads), the requests the generator sent over 10 ms
late (its own pauses, which turn into bursts), and the share of the server's core the
hypervisor stole. Goals (issue 12): zero errors, resident memory growing under 5% from
the end of the first minute to the end, every minute's p99 within 2x of the first
minute's."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

import grpc
import numpy as np

from benchmarks.open_loop import closed_loop, no_collector_pauses, offer
from benchmarks.overload import p99_ms, request_bytes
from benchmarks.perf import pin_to
from gateway.launch import start_gateway
from gateway.proto import grpc_service_pb2 as pb
from gateway.proto import grpc_service_pb2_grpc as pb_grpc
from models.mlp import write_mlp

MODEL = "mlp"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
LATE_S = 0.010  # a request sent later than this after its time counts as late


def steal_ticks(core: int) -> int:
    """Ticks the hypervisor took from `core` (/proc/stat's steal column) since boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            return int(line.split()[8])
    return 0


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


async def grpc_closed_loop(url: str, callers: int, seconds: float) -> float:
    """Successful answers a second with `callers` that each wait for their last call."""
    async with grpc.aio.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = grpc_request()
        end, answers = time.monotonic() + seconds, 0

        async def caller() -> None:
            nonlocal answers
            while time.monotonic() < end:
                with contextlib.suppress(grpc.aio.AioRpcError):  # counted as no answer
                    await stub.ModelInfer(request, timeout=10)
                    answers += 1

        await asyncio.gather(*(caller() for _ in range(callers)))
        return answers / seconds


async def mixed_saturation(http_port: int, grpc_url: str, seconds: float) -> tuple[float, float]:
    """Answers a second over (HTTP, gRPC) while both closed loops run at once."""
    request = request_bytes(http_port, MODEL)
    http, grpc_rate = await asyncio.gather(
        closed_loop("127.0.0.1", http_port, request, 16, seconds),
        grpc_closed_loop(grpc_url, 16, seconds),
    )
    return http, grpc_rate


async def grpc_minute(
    url: str, rate: float, seconds: float
) -> tuple[list[float], Counter[str], int]:
    """Open loop of unary ModelInfer calls; (latencies of successes, failures by code,
    calls sent late)."""
    async with grpc.aio.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = grpc_request()
        latencies: list[float] = []
        failures: Counter[str] = Counter()

        async def one() -> None:
            began = time.monotonic()
            try:
                await stub.ModelInfer(request, timeout=10)
                latencies.append(time.monotonic() - began)
            except grpc.aio.AioRpcError as exc:
                failures[f"gRPC {exc.code().name}"] += 1

        tasks, late = [], 0
        start, total = time.monotonic(), int(rate * seconds)
        while len(tasks) < total:
            now = time.monotonic()
            due = min(int((now - start) * rate) + 1, total)
            late += sum(now - start - i / rate > LATE_S for i in range(len(tasks), due))
            tasks += [asyncio.ensure_future(one()) for _ in range(due - len(tasks))]
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        return latencies, failures, late


async def mixed_minute(
    http_port: int, grpc_url: str, http_rate: float, grpc_rate: float, seconds: float
):
    http_run, grpc_result = await asyncio.gather(
        offer("127.0.0.1", http_port, request_bytes(http_port, MODEL), http_rate, seconds),
        grpc_minute(grpc_url, grpc_rate, seconds),
    )
    return http_run, grpc_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument(
        "--gateway-arg",
        action="append",
        default=[],
        help="an extra `serve` argument, e.g. --gateway-arg=--backend-nice=0",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        write_mlp(repository, MODEL, 1024, dynamic_batching=True, intra_op_threads=1)
        pin_to(args.client_core)
        server = start_gateway(
            repository, "--log-level", "warning", *args.gateway_arg,
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core}, timeout_s=180,
        )  # fmt: skip
        pid = server.process.pid
        try:
            # Half of each protocol's share: the gRPC front costs more per call, so an
            # even split of half the total can be more than the gRPC share can carry.
            http_sat, grpc_sat = asyncio.run(
                mixed_saturation(server.http_port, server.grpc_url, 5.0)
            )
            http_rate, grpc_rate = http_sat / 2, grpc_sat / 2
            print(f"saturation {http_sat + grpc_sat:,.0f}/s ({http_sat:,.0f} HTTP + "
                  f"{grpc_sat:,.0f} gRPC); offering half: {http_rate:,.0f} + "
                  f"{grpc_rate:,.0f}/s")  # fmt: skip
            print("minute  http p99 ms  grpc p99 ms  requests  errors  RSS MiB  sent late  steal %")
            first_p99, first_rss, worst = None, None, 0.0
            errors: Counter[str] = Counter()
            for minute in range(1, args.minutes + 1):
                stolen = steal_ticks(args.server_core)
                with no_collector_pauses():
                    http_run, (grpc_ok, grpc_failed, grpc_late) = asyncio.run(
                        mixed_minute(server.http_port, server.grpc_url, http_rate, grpc_rate, 60.0)
                    )
                steal = 100 * (steal_ticks(args.server_core) - stolen) / TICKS_PER_S / 60.0
                http_ok = [o.latency_s for o in http_run.outcomes if o.status == 200]
                failures = grpc_failed + Counter(
                    f"HTTP {o.status or 'unanswered'}" for o in http_run.outcomes if o.status != 200
                )
                failed = sum(failures.values())
                errors += failures
                p99s = (p99_ms(http_ok), p99_ms(grpc_ok))
                rss = rss_mib(pid)
                first_p99 = first_p99 or p99s
                first_rss = first_rss or rss
                count = len(http_run.outcomes) + len(grpc_ok) + sum(grpc_failed.values())
                late = http_run.late_sends + grpc_late
                print(f"{minute:>6}  {p99s[0]:>11.2f}  {p99s[1]:>11.2f}  {count:>8}  "
                      f"{failed:>6}  {rss:>7.1f}  {late:>9}  {steal:>7.1f}")  # fmt: skip
                worst = max(worst, *(p / f for p, f in zip(p99s, first_p99, strict=True)))
                del http_run, grpc_ok  # not alive through the next minute's collections
            kinds = ", ".join(f"{kind}: {n}" for kind, n in errors.most_common()) or "none"
            growth = 100 * (rss / first_rss - 1)
            print(f"errors {sum(errors.values())} ({kinds}; goal 0); RSS {growth:+.1f}% after "
                  f"the first minute (goal < 5%); worst minute's p99 {worst:.2f}x the first's "
                  "(goal <= 2)")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
