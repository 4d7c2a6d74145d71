"""Soak: half of saturation for ten minutes, HTTP and gRPC mixed, open loop.

    .venv/bin/python -m benchmarks.soak [--minutes 10]

One gateway pinned to one core serves `mlp` (784 -> 1024 -> 1024 -> 10, dynamic
batching). Saturation is measured first, with the same mix: closed loops of 16 HTTP
connections and 16 gRPC callers at once. Then half of each protocol's share is offered,
open loop, from the other core: HTTP with binary tensors from this process, gRPC unary
calls from Triton's perf_analyzer at a constant request rate, a minute a measurement
window (with a Python grpc.aio client on the same core, the gRPC p99 swung between
5.6 and 17 ms from minute to minute, rising with the minutes the client itself ran
late). Reported per
minute: requests, errors and p99 for each protocol, the server's resident memory (its
own process; instances here are threads), the requests the HTTP generator sent over 10
ms late (its own pauses, which turn into bursts), the share of the server's core
the hypervisor stole, and how busy the load generators' core was (near 100%, their
pauses decide a run as much as the server does). Goals (issue 12): zero errors,
resident memory growing under 5% from the end of the first minute to the end, every
minute's p99 within 2x of the first minute's."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import grpc
import numpy as np

from accel_base.proto import grpc_service_pb2 as pb
from accel_base.proto import grpc_service_pb2_grpc as pb_grpc
from benchmarks.open_loop import closed_loop, no_collector_pauses, offer
from benchmarks.overload import p99_ms, request_bytes
from benchmarks.perf import PERF_ANALYZER, pin_to
from gateway.launch import start_gateway
from models.mlp import write_mlp

MODEL = "mlp"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
LATE_S = 0.010  # a request sent later than this after its time counts as late


def core_ticks(core: int) -> tuple[int, int]:
    """`core`'s ticks since boot (/proc/stat): those the hypervisor took (steal), and those
    it spent busy (user, nice, system, irq, softirq)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, line.split()[1:9])
            return steal, user + nice + system + irq + softirq
    return 0, 0


def steal_ticks(core: int) -> int:
    """Ticks the hypervisor took from `core` (/proc/stat's steal column) since boot."""
    return core_ticks(core)[0]


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


_PASS = re.compile(r"Pass \[(\d+)\] throughput: ([\d.]+) infer/sec\. p99 latency: (\d+) usec")


def start_grpc_load(url: str, rate: float, minutes: int) -> subprocess.Popen:
    """perf_analyzer offering `rate` gRPC calls a second, one measurement window a minute,
    `minutes` of them (the stability check never passes, so it runs them all)."""
    if not PERF_ANALYZER.exists():
        raise SystemExit(f"perf_analyzer is not installed at {PERF_ANALYZER}; run scripts/test")
    command = [
        str(PERF_ANALYZER), "-m", MODEL, "-u", url, "-i", "grpc", "-v", "--async",
        "--request-rate-range", f"{rate:.0f}", "--request-distribution", "constant",
        "--measurement-interval", "60000", "--max-trials", str(minutes),
        "--stability-percentage", "0.0001", "--percentile", "99",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def grpc_minutes(load: subprocess.Popen) -> tuple[list[tuple[float, float]], list[str]]:
    """Each window's (calls a second, p99 ms), and perf_analyzer's error lines; a run
    still going 3 minutes after the HTTP load ended is stopped and read as it is."""
    try:
        output, _ = load.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        load.kill()
        output, _ = load.communicate()
        print("  perf_analyzer had not finished its windows 3 minutes after the HTTP load")
    windows = [(float(m[2]), int(m[3]) / 1e3) for m in _PASS.finditer(output)]
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    return windows, errors


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
            grpc_load = start_grpc_load(server.grpc_url, grpc_rate, args.minutes)
            # (HTTP p99 ms, requests, errors, RSS MiB, sent late, steal %, client core busy %)
            minutes = []
            errors: Counter[str] = Counter()
            try:
                for _ in range(args.minutes):
                    stolen = steal_ticks(args.server_core)
                    _, client_busy = core_ticks(args.client_core)
                    request = request_bytes(server.http_port, MODEL)
                    with no_collector_pauses():
                        run = asyncio.run(offer("127.0.0.1", server.http_port, request,
                                                http_rate, 60.0))  # fmt: skip
                    steal = 100 * (steal_ticks(args.server_core) - stolen) / TICKS_PER_S / 60.0
                    # The load generators' own core: near 100%, their pauses become bursts.
                    client = 100 * (core_ticks(args.client_core)[1] - client_busy) / TICKS_PER_S
                    client /= 60.0
                    failures = Counter(
                        f"HTTP {o.status or 'unanswered'}" for o in run.outcomes if o.status != 200
                    )
                    errors += failures
                    ok = [o.latency_s for o in run.outcomes if o.status == 200]
                    minutes.append((p99_ms(ok), len(run.outcomes), sum(failures.values()),
                                    rss_mib(pid), run.late_sends, steal, client))  # fmt: skip
                    del run, ok  # not alive through the next minute's collections
            finally:
                windows, grpc_errors = grpc_minutes(grpc_load)
            if grpc_load.returncode != 0 and len(windows) < args.minutes:
                errors["gRPC (perf_analyzer stopped)"] += 1
            if grpc_errors:
                errors["gRPC"] += len(grpc_errors)
            print("minute  http p99 ms  grpc p99 ms  http requests  grpc calls/s  errors  "
                  "RSS MiB  sent late  steal %  client core %")  # fmt: skip
            worst = 0.0
            for minute, (http_p99, count, failed, rss, late, steal, client) in enumerate(minutes):
                grpc_rate_seen, grpc_p99 = windows[minute] if minute < len(windows) else (0, 0)
                first = (minutes[0][0], windows[0][1] if windows else float("nan"))
                worst = max(worst, http_p99 / first[0], grpc_p99 / first[1])
                print(f"{minute + 1:>6}  {http_p99:>11.2f}  {grpc_p99:>11.2f}  {count:>13}  "
                      f"{grpc_rate_seen:>12.0f}  {failed:>6}  {rss:>7.1f}  {late:>9}  "
                      f"{steal:>7.1f}  {client:>13.0f}")  # fmt: skip
            for line in grpc_errors[:5]:
                print(f"  perf_analyzer: {line}")
            kinds = ", ".join(f"{kind}: {n}" for kind, n in errors.most_common()) or "none"
            growth = 100 * (minutes[-1][3] / minutes[0][3] - 1)
            print(f"errors {sum(errors.values())} ({kinds}; goal 0); RSS {growth:+.1f}% after "
                  f"the first minute (goal < 5%); worst minute's p99 {worst:.2f}x the first's "
                  "(goal <= 2)")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
