"""Where a request's CPU time goes with N front processes, and what N cores would serve.

    .venv/bin/python -m benchmarks.cores [--fronts 8] [--models simple mlp]
        [--concurrency 64] [--measurement-ms 4000]

The gateway serves `simple` (INT32 [1,16], no batching) and `mlp_batched` (FP32 784 ->
1024 -> 1024 -> 10, dynamic batching) on core 0, perf_analyzer loads it from core 1 at
concurrency 64, over HTTP binary and gRPC. Three layouts, each in the same run: one
process (`--front-processes 1`), N fronts with their own copies of the models
(`--front-copies on`, the default) and N fronts handing every request to the model host
(`--front-copies off`). During each run this reads every server process's CPU seconds
from /proc and the requests answered from the statistics, and prints each process's
CPU microseconds per request.

A process runs on one core at most (one event loop), so N cores serve at most
    min(N / total CPU per request, 1 / the largest process's CPU per request)
requests a second: the projection printed, as a ratio to one process on one core
(1 / its CPU per request, measured in the same run), with the process that limits it
and its share of the total. Goal (issue 42): at least 0.7 x N at N = 8 for `simple`
over HTTP binary and gRPC, no process above 1 / (0.7 x 8) = 17.9 % of the total. All
processes share one core here, so a figure is CPU time, not parallel speed: the 16-core
measurement is benchmarks/fronts.py's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from benchmarks.fronts import cpu_seconds, front_pids, wait_until_every_front_serves
from benchmarks.perf import PERF_ANALYZER, perf_analyzer
from benchmarks.serving_batching import build as build_mlp
from gateway.launch import start_gateway
from models import simple

PROTOCOLS = (("HTTP binary", "http"), ("gRPC", "grpc"))
MODELS = {"simple": "simple", "mlp": "mlp_batched"}


@dataclass
class Run:
    layout: str
    fronts: int
    protocol: str
    model: str
    throughput: float  # infer/s perf_analyzer measured (all on one core: not the point)
    per_process_us: dict[str, float]  # CPU microseconds a request, by process

    @property
    def total_us(self) -> float:
        return sum(self.per_process_us.values())

    def projected(self, cores: int) -> tuple[float, str]:
        """Requests a second on `cores` cores, and the process that limits it."""
        busiest = max(self.per_process_us, key=self.per_process_us.__getitem__)
        by_process = 1e6 / self.per_process_us[busiest]
        by_total = cores * 1e6 / self.total_us
        if by_total <= by_process:
            return by_total, "all cores busy"
        return by_process, busiest


def answered(http_url: str, model: str) -> int:
    url = f"http://{http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        stats = json.loads(reply.read())["model_stats"][0]["inference_stats"]
    return stats["success"]["count"] + stats["fail"]["count"]


def measure(server, fronts: int, layout: str, model: str, path: tuple[str, str], args) -> Run:
    label, protocol = path
    host = server.process.pid
    pids = {"host" if fronts > 1 else "server": host}
    pids.update({f"front {i}": pid for i, pid in enumerate(front_pids(host) if fronts > 1 else [])})
    url = server.grpc_url if protocol == "grpc" else server.http_url
    before = answered(server.http_url, model), {k: cpu_seconds(p) for k, p in pids.items()}
    m = perf_analyzer(
        model, url, protocol, args.concurrency, args.client_core, f"{label}, {layout}",
        (), args.measurement_ms,
    )  # fmt: skip
    after = answered(server.http_url, model), {k: cpu_seconds(p) for k, p in pids.items()}
    requests = max(after[0] - before[0], 1)
    per = {k: (after[1][k] - before[1][k]) * 1e6 / requests for k in pids}
    return Run(layout, fronts, label, model, m.throughput, per)


def layouts(fronts: int) -> list[tuple[str, int, tuple[str, ...]]]:
    return [
        ("one process", 1, ()),
        (f"{fronts} fronts, copies", fronts, ("--front-copies", "on")),
        (f"{fronts} fronts, host", fronts, ("--front-copies", "off")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fronts", type=int, default=8)
    parser.add_argument("--models", nargs="+", default=["simple", "mlp"], choices=MODELS)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--measurement-ms", type=int, default=4000)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    args = parser.parse_args()
    if not PERF_ANALYZER.exists():
        raise SystemExit(f"perf_analyzer is not installed at {PERF_ANALYZER}; run scripts/test")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        simple.build(repository)
        build_mlp(repository, "mlp")
        for layout, fronts, extra in layouts(args.fronts):
            server = start_gateway(
                repository, "--log-level", "warning", "--front-processes", str(fronts),
                "--queue-budget-ms", "1000", *extra,
                log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core}, timeout_s=120,
            )  # fmt: skip
            try:
                wait_until_every_front_serves(server, fronts)
                for model in args.models:
                    for path in PROTOCOLS:
                        runs.append(measure(server, fronts, layout, MODELS[model], path, args))
            finally:
                server.stop()
    report(runs, args.fronts)


def report(runs: list[Run], cores: int) -> None:
    goal_share = 1 / (0.7 * cores)
    print(f"\nCPU microseconds a request, by process; projection on {cores} cores as x one "
          f"process on one core (goal >= {0.7 * cores:.1f}; no process above "
          f"{goal_share:.1%} of the total)")  # fmt: skip
    print(f"{'model':<12}{'path':<13}{'layout':<20}{'total us':>9}{'busiest':>9}{'share':>7}"
          f"{'projected':>11}{'x one':>7}  limited by")  # fmt: skip
    for run in runs:
        one = next(r for r in runs if r.fronts == 1 and (r.model, r.protocol) ==
                   (run.model, run.protocol))  # fmt: skip
        single = 1e6 / one.total_us  # one process alone on one core
        busiest = max(run.per_process_us.values())
        projected, limit = run.projected(cores if run.fronts > 1 else 1)
        print(
            f"{run.model:<12}{run.protocol:<13}{run.layout:<20}{run.total_us:>9.1f}"
            f"{busiest:>9.1f}{busiest / run.total_us:>7.1%}{projected:>11,.0f}"
            f"{projected / single:>7.2f}  {limit}"
        )
    print("\nper process (us a request):")
    for run in runs:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in run.per_process_us.items())
        print(f"  {run.model} {run.protocol} {run.layout}: {parts}")


if __name__ == "__main__":
    main()
