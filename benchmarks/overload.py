"""Overload: what callers see when three times the saturation rate arrives, open loop.

    .venv/bin/python -m benchmarks.overload [--seconds 20] [--factor 3] [--connections 1000]
        [--models simple mlp] [--protocols http grpc] [--gateway-arg=--shed-lag-ms=1]

(The fronts refuse early only with `--shed-lag-ms`; without it the server queues what
a thousand connections bring, as Triton would, and the latency goals are not its aim.)

One gateway pinned to one core serves `simple` (INT32 add/sub, runs inline) and `mlp`
(784 -> 1024 -> 1024 -> 10, dynamic batching); the generator runs on the other core. For
each model and protocol (HTTP with binary tensors; gRPC unary calls, framed by hand in
benchmarks/grpc_open_loop.py so that one core can offer the rate):
1. saturation: answers a second of the better closed loop of 16 or 64 connections;
2. unloaded latency: p99 of an open loop at a tenth of saturation;
3. the floor: the same rate, connections and generator, for FLOOR_SECONDS, against
   benchmarks/canned_server.py on the server's core, which refuses everything at once: the
   p99 the generator and the machine add to any answer at that rate, printed beside the
   gateway's refusals (against a raw uvloop server outside this benchmark, 0.7 to 6.9 ms
   at 21,000 a second from one run to the next on a quiet 2-core machine);
4. overload: `--factor` times saturation, open loop, for `--seconds`, on
   `--connections` kept-alive connections opened before the clock starts (one request
   in flight on each: a request due while all wait counts as unanswered), 10 s client
   timeout; printed per second (by send
   time), with the generator's and the server's CPU share, so a generator short of CPU
   shows; then the time until the server falls idle once the load stops.
Goals (issue 37): every request answered (no client timeout), refusals (503 / gRPC
UNAVAILABLE) under 5 ms at p99, admitted requests' p99 under 10x the unloaded p99, the
server idle within 1 s.
"""

from __future__ import annotations

import argparse
import itertools
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.grpc_open_loop import GrpcConnection
from benchmarks.open_loop import (
    Run,
    binary_infer_request,
    closed_loop,
    no_collector_pauses,
    offer,
    run_generator,
)
from benchmarks.overload_requests import grpc_infer, http_infer
from benchmarks.perf import pin_to
from gateway.launch import free_ports, start_gateway
from models import simple
from models.mlp import write_mlp

FLOOR_SECONDS = 5.0
IDLE_CPU_SHARE = 0.05  # the server counts as idle below this share of its core
# The better of closed loops this wide: a loop too narrow leaves the server idle between
# answers, a wide one makes a batched model's batches.
SATURATION_CONNECTIONS = (16, 64)


def request_bytes(port: int, model: str) -> bytes:
    """One `mlp` row as a whole HTTP request (binary tensors; benchmarks.soak uses it)."""
    return binary_infer_request(port, model, (1, 784), "INPUT0", "OUTPUT0")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class CpuSampler(threading.Thread):
    """A process's CPU time every 100 ms until stopped."""

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

    def share(self, begin: float, end: float) -> float:
        """The process's share of a core between two clock times (nearest samples)."""
        inside = [s for s in self.samples if begin <= s[0] <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return (c1 - c0) / (t1 - t0)

    def seconds_to_idle(self, since: float, limit_s: float = 30.0) -> float:
        """From `since` until the first 100 ms in which the process used under
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


def per_second(run: Run, start: float, server: CpuSampler, client: CpuSampler) -> None:
    print("   s    offered   200    503  other  unanswered  refused p99  admitted p99  "
          "server CPU  generator CPU")  # fmt: skip
    seconds = int(np.ceil(run.ended - start))
    for second in range(seconds):
        begin = start + second
        these = [o for o in run.outcomes if begin <= o.sent < begin + 1]
        ok = [o.latency_s for o in these if o.status == 200]
        refused = [o.latency_s for o in these if o.status == 503]
        unanswered = sum(1 for o in these if o.status is None)
        other = len(these) - len(ok) - len(refused) - unanswered
        print(f"{second:>4}  {len(these):>9}  {len(ok):>4}  {len(refused):>5}  {other:>5}  "
              f"{unanswered:>10}  {p99_ms(refused):>8.2f} ms  {p99_ms(ok):>9.2f} ms  "
              f"{server.share(begin, begin + 1):>9.0%}  "
              f"{client.share(begin, begin + 1):>13.0%}")  # fmt: skip


def summary(label: str, unloaded_p99: float, run: Run, idle_s: float) -> dict[str, float]:
    ok = [o.latency_s for o in run.outcomes if o.status == 200]
    refused = [o.latency_s for o in run.outcomes if o.status == 503]
    unanswered = sum(1 for o in run.outcomes if o.status is None)
    unsent = sum(1 for o in run.outcomes if o.unsent)
    other = len(run.outcomes) - len(ok) - len(refused) - unanswered
    figures = {"unanswered": unanswered, "refused_p99_ms": p99_ms(refused),
               "admitted_x": p99_ms(ok) / unloaded_p99, "idle_s": idle_s}  # fmt: skip
    print(f"{label}: {len(run.outcomes)} offered ({run.late_sends} sent over 10 ms late): "
          f"200 {len(ok)}, 503 {len(refused)}, other {other}, unanswered {unanswered} "
          f"(of which {unsent} found every connection waiting; goal 0); refusals p99 "
          f"{figures['refused_p99_ms']:.2f} ms (goal < 5); admitted p99 {p99_ms(ok):.2f} ms = "
          f"{figures['admitted_x']:.1f}x unloaded (goal < 10); idle {idle_s:.2f} s after "
          "the load stopped (goal < 1)")  # fmt: skip
    return figures


class CannedServer:
    """benchmarks/canned_server.py in a process of its own on `core`."""

    def __init__(self, core: int) -> None:
        self.ports = free_ports(2)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.canned_server", *map(str, self.ports)],
            stdout=subprocess.PIPE, preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        )  # fmt: skip
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 30.0)
        if not ready or self.process.stdout.readline() != b"ready\n":
            self.stop()
            raise RuntimeError("benchmarks/canned_server.py did not start within 30 s")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def measure(
    model: str, protocol: str, server, canned: CannedServer, args: argparse.Namespace
) -> dict[str, float]:
    if protocol == "http":
        port, request, connection = server.http_port, http_infer(server.http_port, model), None
    else:
        port, request, connection = server.grpc_port, grpc_infer(model), GrpcConnection
    kinds = {"connection": connection} if connection else {}
    saturation = max(
        run_generator(closed_loop("127.0.0.1", port, request, n, 2.0, **kinds))
        for n in SATURATION_CONNECTIONS
    )
    with no_collector_pauses():
        calm = run_generator(offer("127.0.0.1", port, request, saturation / 10, 3.0, **kinds))
    unloaded_p99 = p99_ms([o.latency_s for o in calm.outcomes if o.status == 200])
    rate = args.factor * saturation
    floor_port = canned.ports[0] if protocol == "http" else canned.ports[1]
    with no_collector_pauses():
        floor_run = run_generator(offer(
            "127.0.0.1", floor_port, request, rate, FLOOR_SECONDS,
            max_connections=args.connections, opened=args.connections, **kinds,
        ))  # fmt: skip
    floor_p99 = p99_ms([o.latency_s for o in floor_run.outcomes if o.status == 503])
    others = sum(1 for o in floor_run.outcomes if o.status != 503)
    if others:  # the floor is every answer's, or it reads too low
        print(f"the floor's run: {others} of {len(floor_run.outcomes)} requests not refused"
              " at once (unanswered, another status): the floor is not the floor")  # fmt: skip
    label = f"{model} over {protocol}"
    print(f"\n{label}: saturation {saturation:,.0f}/s (closed loops of "
          f"{' or '.join(map(str, SATURATION_CONNECTIONS))} connections); unloaded p99 "
          f"{unloaded_p99:.2f} ms (open loop at a tenth); "
          f"offering {rate:,.0f}/s for {args.seconds:.0f} s on up to {args.connections} "
          f"connections; the floor at that rate: p99 {floor_p99:.2f} ms")  # fmt: skip
    server_cpu, client_cpu = CpuSampler(server.process.pid), CpuSampler(os.getpid())
    server_cpu.start()
    client_cpu.start()
    try:
        with no_collector_pauses():
            run = run_generator(offer("127.0.0.1", port, request, rate, args.seconds,
                                    max_connections=args.connections,
                                    opened=args.connections, **kinds))  # fmt: skip
        idle_s = server_cpu.seconds_to_idle(run.ended)
    finally:
        for sampler in (server_cpu, client_cpu):
            sampler.stopped.set()
            sampler.join()
    per_second(run, run.started, server_cpu, client_cpu)
    return {**summary(label, unloaded_p99, run, idle_s), "floor_p99_ms": floor_p99}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--models", nargs="+", default=["simple", "mlp"],
                        choices=["simple", "mlp"])  # fmt: skip
    parser.add_argument("--protocols", nargs="+", default=["http", "grpc"],
                        choices=["http", "grpc"])  # fmt: skip
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument(
        "--gateway-arg",
        action="append",
        default=[],
        help="an extra `serve` argument, e.g. --gateway-arg=--shed-lag-ms=0",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        simple.build(repository)
        write_mlp(repository, "mlp", 1024, dynamic_batching=True, intra_op_threads=1)
        pin_to(args.client_core)
        server = start_gateway(
            repository, "--log-level", "warning", *args.gateway_arg,
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core}, timeout_s=180,
        )  # fmt: skip
        results = {}
        try:
            canned = CannedServer(args.server_core)
            try:
                for model, protocol in itertools.product(args.models, args.protocols):
                    results[(model, protocol)] = measure(model, protocol, server, canned, args)
            finally:
                canned.stop()
        finally:
            server.stop()
        print("\nmodel   protocol  unanswered  refusals p99  (floor p99)  admitted p99 / unloaded"
              "  idle after")  # fmt: skip
        for (model, protocol), r in results.items():
            print(f"{model:<7} {protocol:<8}  {r['unanswered']:>10}  {r['refused_p99_ms']:>9.2f} ms"
                  f"  ({r['floor_p99_ms']:>6.2f} ms)  {r['admitted_x']:>22.1f}x"
                  f"  {r['idle_s']:>8.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
