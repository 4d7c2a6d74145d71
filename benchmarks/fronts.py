"""Front processes: `simple` served by `--workers 1` (one process) and by N front processes
in front of the one model host, over HTTP binary and gRPC.

    .venv/bin/python -m benchmarks.fronts [--fronts 2 4 8] [--server-cores 0-7]
        [--client-cores 8-15] [--concurrency 64] [--measurement-ms 3000] [--batching]

The gateway runs on `--server-cores` (all its processes), perf_analyzer on
`--client-cores`. Printed: each run's throughput against the in-process floor (ONNX
Runtime at batch 1 on the first server core) and against `--workers 1` measured in the
same run, and that ratio over N (1.0: perfect scaling); and where the server's CPU went
during each run, read from /proc: microseconds a request in the host process and in all
fronts together, and requests a bundle. Before measuring, requests on new connections
until every front has served one (a connection stays with the front that accepted it).
With `--batching`, `simple` has dynamic batching (no delay: what has queued while an
instance ran goes as one batch), so the host runs many requests per model call, and
fronts bundle them (gateway/front_processes/bundles.py). Goals (issue 15), on a machine with 8
cores for the gateway: at least 0.8 x N at N = 4 and 0.7 x N at N = 8. With fewer
server cores than fronts the figure is the cost of the hand-off, not scaling.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.perf import PERF_ANALYZER, Measurement, perf_analyzer
from benchmarks.serving_simple import in_process_floor
from gateway.launch import start_gateway
from models import simple
from models.config_text import DynamicBatching

PROTOCOLS = (("HTTP binary", "http"), ("gRPC unary", "grpc"))


def cores(text: str) -> set[int]:
    """A taskset-style list: "0", "0-7", "0,2,4-5"."""
    chosen: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        chosen.update(range(int(first), int(last or first) + 1))
    return chosen


def front_metric(metrics_port: int, name: str) -> list[float]:
    """A per-front metric's values (accel_gateway_front_requests, _bundles)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{")]


def fronts_serving(metrics_port: int) -> int:
    """How many fronts have handed a request to the host."""
    return sum(1 for n in front_metric(metrics_port, "accel_gateway_front_requests") if n > 0)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def front_pids(host: int) -> list[int]:
    children = Path(f"/proc/{host}/task/{host}/children").read_text().split()
    return [
        pid for pid in map(int, children)
        if b"gateway.front_processes.main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]  # fmt: skip


@dataclass
class Where:
    """Where one run's server CPU went: microseconds a request in the host and in all
    fronts together (NaN where unknown: no request answered, or a front restarted), and
    requests a bundle carried (0: none bundled)."""

    host_us: float
    fronts_us: float
    per_bundle: float


def answered(server) -> int:
    url = f"http://{server.http_url}/v2/models/simple/stats"
    with urllib.request.urlopen(url, timeout=5) as reply:
        stats = json.loads(reply.read())["model_stats"][0]["inference_stats"]
    return stats["success"]["count"]


def measured_where(server, workers: int, run: Callable[[], Measurement]) -> tuple:
    """`run()`'s measurement, with where the server's CPU went meanwhile."""
    host = server.process.pid
    fronts = front_pids(host) if workers > 1 else []

    def reading() -> tuple[float, ...]:
        port = server.metrics_port
        return (
            answered(server),
            sum(front_metric(port, "accel_gateway_front_bundles")),
            sum(front_metric(port, "accel_gateway_front_bundled_requests")),
            cpu_seconds(host),
        )

    before, fronts_before = reading(), sum(map(cpu_seconds, fronts))
    measurement = run()
    after = reading()
    requests, bundles, bundled, host_s = (b - a for a, b in zip(before, after, strict=True))
    nan = float("nan")
    try:
        if (front_pids(host) if workers > 1 else []) != fronts:
            raise FileNotFoundError("a front restarted")
        fronts_s = sum(map(cpu_seconds, fronts)) - fronts_before
    except FileNotFoundError:  # a front gone: its CPU time is not known
        fronts_s = nan
    if not requests:
        return measurement, Where(nan, nan, 0.0)
    per = 1e6 / requests
    return measurement, Where(host_s * per, fronts_s * per, bundled / bundles if bundles else 0.0)


def wait_until_every_front_serves(server, fronts: int, timeout_s: float = 60.0) -> None:
    """The server is ready once one front listens. A connection stays with the front that
    accepted it, so perf_analyzer's connections, opened before every front listened,
    would load a few fronts only: requests on new connections until each has served."""
    if fronts < 2:
        return
    body = json.dumps({
        "inputs": [{"name": name, "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}
                   for name in ("INPUT0", "INPUT1")],
    }).encode()  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while fronts_serving(server.metrics_port) < fronts:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {fronts_serving(server.metrics_port)} of {fronts} fronts serve")
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/models/simple/infer", body,
            {"Content-Type": "application/json", "Connection": "close"},
        )  # fmt: skip
        urllib.request.urlopen(request, timeout=5).read()


def measure(repository: Path, workers: int, args: argparse.Namespace, log: Path) -> list:
    server = start_gateway(
        repository, "--log-level", "warning", "--workers", str(workers),
        "--queue-budget-ms", "1000",
        log_path=log, cpu_cores=cores(args.server_cores),
    )  # fmt: skip
    try:
        wait_until_every_front_serves(server, workers)
        runs = []
        for label, protocol in PROTOCOLS:
            url = server.grpc_url if protocol == "grpc" else server.http_url
            run = functools.partial(
                perf_analyzer, "simple", url, protocol, args.concurrency, args.client_cores,
                f"{label} workers={workers}", (), args.measurement_ms,
            )  # fmt: skip
            runs.append(measured_where(server, workers, run))
        return runs
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fronts", type=int, nargs="+", default=[2])
    parser.add_argument("--server-cores", default="0")
    parser.add_argument("--client-cores", default="1")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--batching", action="store_true", help="dynamic batching on `simple`")
    args = parser.parse_args()
    if not PERF_ANALYZER.exists():
        raise SystemExit(f"perf_analyzer is not installed at {PERF_ANALYZER}; run scripts/test")
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        simple.build(repository, batching=DynamicBatching() if args.batching else None)
        floor = in_process_floor(repository, min(cores(args.server_cores)))
        results: dict[int, list[tuple[Measurement, Where]]] = {}
        for workers in [1, *args.fronts]:
            results[workers] = measure(repository, workers, args, Path(tmp) / f"w{workers}.log")
    print(f"\nfloor: ONNX Runtime in-process, batch 1: {floor:,.0f} /s")
    batching = "on" if args.batching else "off"
    print(f"server cores {args.server_cores}, perf_analyzer cores {args.client_cores}, "
          f"concurrency {args.concurrency}, batching {batching}")  # fmt: skip
    print(f"{'path':<13}{'workers':>8}{'infer/s':>10}{'x floor':>9}{'x one':>8}{'x one / N':>11}"
          f"{'p99 ms':>8}{'host us':>9}{'fronts us':>11}{'a bundle':>10}")  # fmt: skip
    for index, (label, _) in enumerate(PROTOCOLS):
        one = results[1][index][0].throughput
        for workers, runs in results.items():
            run, where = runs[index]
            ratio = run.throughput / one if one else float("nan")
            print(
                f"{label:<13}{workers:>8}{run.throughput:>10,.0f}{run.throughput / floor:>9.3f}"
                f"{ratio:>8.3f}{ratio / workers:>11.3f}{run.p99_us / 1000:>8.2f}"
                f"{where.host_us:>9.1f}{where.fronts_us:>11.1f}{where.per_bundle:>10.1f}"
            )
    print("(x one: against --workers 1 in this run; goals with 8 server cores: x one / N "
          ">= 0.8 at N=4, >= 0.7 at N=8. host us, fronts us: CPU time a request in the "
          "host process (with --workers 1, the whole server) and in all fronts together; "
          "a bundle: requests a bundle carried)")  # fmt: skip


if __name__ == "__main__":
    main()
