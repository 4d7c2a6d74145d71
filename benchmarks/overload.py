"""Overload: what callers see when three times the saturation rate arrives, open loop.

    .venv/bin/python -m benchmarks.overload [--seconds 10] [--factor 3]

One gateway pinned to one core serves `mlp` (784 -> 1024 -> 1024 -> 10) twice: with
dynamic batching and without. For each, on the other core:
1. saturation: answers a second of a closed loop (HTTP, binary tensors), the better of 8
   connections (the most that admission control never refuses on one instance) and 16
   (which a batched model needs to fill its batches; on an unbatched one the clients past
   8 that retry at once spin on refusals, and the answers measured fall);
2. unloaded latency: p99 of an open loop at a tenth of saturation;
3. overload: `--factor` times saturation, open loop, for `--seconds`; then the time until
   the server's CPU falls idle once the load stops.
Goals (issue 12): every request answered (no client timeout), refusals under 5 ms at p99,
admitted requests' p99 under 10x the unloaded p99, the server idle within 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.open_loop import (
    Run,
    binary_infer_request,
    closed_loop,
    no_collector_pauses,
    offer,
)
from benchmarks.perf import pin_to
from gateway.launch import start_gateway
from gateway.scheduling.admission import EXEMPT_PER_INSTANCE
from models.mlp import write_mlp

MODELS = {"mlp_batched": True, "mlp_direct": False}
HIDDEN = 4096  # compute-bound: a run costs far more than reading and refusing a request
IDLE_CPU_SHARE = 0.05  # the server counts as idle below this share of its core


def request_bytes(port: int, model: str) -> bytes:
    return binary_infer_request(port, model, (1, 784), "INPUT0", "OUTPUT0")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


class CpuSampler(threading.Thread):
    """The server's CPU time every 100 ms, from the load's start until stopped: the wait
    for late answers comes after the last send, and the server may fall idle during it."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []  # (clock, CPU seconds)
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), cpu_seconds(self.pid)))
            if self.stopped.wait(0.1):
                return

    def seconds_to_idle(self, since: float, limit_s: float = 30.0) -> float:
        """From `since` until the first 100 ms in which the server used under
        IDLE_CPU_SHARE of its core; sampling goes on until then (at most `limit_s`)."""
        checked = 0
        while True:
            samples = self.samples[checked:]
            for (began, before), (ended, after) in itertools.pairwise(samples):
                if began >= since and (after - before) / (ended - began) < IDLE_CPU_SHARE:
                    return began - since
            checked += max(len(samples) - 1, 0)
            if not self.is_alive() or time.monotonic() - since > limit_s:
                return float("inf")
            time.sleep(0.1)


def p99_ms(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 99) * 1e3) if latencies else float("nan")


def report(model: str, saturation: float, connections: int, unloaded_p99: float, rate: float,
           run: Run, idle_s: float) -> None:  # fmt: skip
    answered = [o for o in run.outcomes if o.status is not None]
    ok = [o.latency_s for o in answered if o.status == 200]
    refused = [o.latency_s for o in answered if o.status == 503]
    other = len(answered) - len(ok) - len(refused)
    unanswered = len(run.outcomes) - len(answered)
    admitted_p99 = p99_ms(ok)
    print(f"\n{model}: saturation {saturation:,.0f} answers/s (closed loop, "
          f"{connections} connections)")  # fmt: skip
    print(f"  unloaded p99 {unloaded_p99:.2f} ms (open loop at a tenth of saturation)")
    print(f"  offered {rate:,.0f}/s for {len(run.outcomes) / rate:.0f} s: {len(run.outcomes)} "
          f"requests, {run.late_sends} sent over 10 ms late")  # fmt: skip
    print(f"  answered {len(answered)} (200: {len(ok)}, 503: {len(refused)}, other: {other}), "
          f"unanswered {unanswered} (goal 0)")  # fmt: skip
    print(f"  refusals p99 {p99_ms(refused):.2f} ms (goal < 5); admitted p99 "
          f"{admitted_p99:.2f} ms = {admitted_p99 / unloaded_p99:.1f}x unloaded (goal < 10)")
    print(f"  idle {idle_s:.2f} s after the load stopped (goal < 1)")


def measure(model: str, port: int, pid: int, args: argparse.Namespace) -> None:
    request = request_bytes(port, model)
    saturation, connections = max(
        (asyncio.run(closed_loop("127.0.0.1", port, request, n, 3.0)), n)
        for n in (EXEMPT_PER_INSTANCE, 2 * EXEMPT_PER_INSTANCE)
    )
    with no_collector_pauses():
        calm = asyncio.run(offer("127.0.0.1", port, request, saturation / 10, 3.0))
    unloaded_p99 = p99_ms([o.latency_s for o in calm.outcomes if o.status == 200])
    rate = args.factor * saturation
    sampler = CpuSampler(pid)
    sampler.start()
    try:
        with no_collector_pauses():
            run = asyncio.run(offer("127.0.0.1", port, request, rate, args.seconds))
        idle_s = sampler.seconds_to_idle(run.ended)
    finally:
        sampler.stopped.set()
        sampler.join()
    report(model, saturation, connections, unloaded_p99, rate, run, idle_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--gateway-arg", action="append", default=[],
                        help="an extra `serve` argument, e.g. --gateway-arg=--queue-budget-ms=5")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        for name, batched in MODELS.items():
            write_mlp(repository, name, HIDDEN, dynamic_batching=batched, intra_op_threads=1)
        pin_to(args.client_core)
        server = start_gateway(
            repository, "--log-level", "warning", *args.gateway_arg,
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core}, timeout_s=180,
        )  # fmt: skip
        try:
            for name in MODELS:
                measure(name, server.http_port, server.process.pid, args)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
