"""What tracing costs: `simple` with tracing off, on for 1% of requests, and on for all.

    .venv/bin/python -m benchmarks.tracing [--concurrency 8 64] [--repeats 2]
        [--measurement-ms 3000]

One gateway pinned to one core serves `simple` and exports its spans over OTLP/HTTP to a
collector in this process (which reads and drops them), on the other core with
perf_analyzer. The settings are switched at run time through the trace extension, so one
server serves every run. Two measurements:

- Rounds: perf_analyzer runs of each setting in a rotating order, `--repeats` rounds; a
  setting's figure is the geometric mean of its runs' throughput against "off" in the
  same round, with its 95% confidence interval (benchmarks.routing's). On a shared
  machine the same setting's runs differ by up to 15%, a swing that hides 1%'s cost.
  (Flipping the setting every half second under one load did no better: an A/A run of
  it, off against off, read 0.939, from an effect with the flips' period.)
- Priced, the verdict for 1%: the CPU time of the server's whole path for a `simple`
  request, in process (benchmarks/in_process.py; over HTTP, http_path.py: uvicorn's
  protocol, the app, the core, the model; over gRPC, grpc_path.py: the gateway's HTTP/2
  connection, the V2 service, the core, the model; on uvloop), with tracing off and at
  1% in alternating rounds,
  the 1% one exporting to the collector as the server does: its sampling check on
  every request, the traced ones' spans built, encoded and POSTed. The difference, at
  its interval's top, against a request's share of the server's core at the off
  throughput is what 1% takes from throughput on a busy core. Beside it, the same price
  derived from the measured 100% (its throughput loss spread over 100 requests).

"Off" itself is priced apart: what an untraced request executes of tracing (reading
whether it is on, and whether the request has a trace), timed in process, against one
request's share of the server's core at the off throughput. Goals (issue 18): off costs
nothing measurable, 1% under 3%.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import threading
import timeit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import tritonclient.http as httpclient

from benchmarks.grpc_path import GrpcPath, simple_grpc_request
from benchmarks.http_path import HttpPath, simple_request
from benchmarks.in_process import paired_difference, path_ns, priced_verdict
from benchmarks.perf import add_run_arguments, perf_analyzer, pin_to
from benchmarks.routing import PROTOCOLS, geometric_mean_interval
from benchmarks.serving_simple import in_process_floor
from gateway.core.inference import InferRequest
from gateway.core.service import InferenceCore
from gateway.launch import start_gateway
from gateway.operation.tracing.settings import TraceSettings
from gateway.operation.tracing.tracer import ExporterConfig, Tracing
from models import simple

SETTINGS = {
    "off": {"trace_level": ["OFF"]},
    "1%": {"trace_level": ["TIMESTAMPS"], "trace_rate": "100"},
    "100%": {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"},
}
GOAL_1_PERCENT = 0.97


class _Sink(BaseHTTPRequestHandler):
    spans_bytes = 0
    protocol_version = "HTTP/1.1"  # kept alive, as a collector does

    def do_POST(self) -> None:  # noqa: N802
        _Sink.spans_bytes += len(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def off_path_ns() -> float:
    """Nanoseconds of tracing an untraced request executes: the front's read of whether
    tracing is on, and the scheduler's of whether the request has a trace."""
    core_tracing = Tracing()
    request = InferRequest("simple")
    count = 1_000_000
    seconds = min(
        timeit.repeat(
            "tracing.settings.enabled; request.trace is not None",
            globals={"tracing": core_tracing, "request": request}, number=count, repeat=5,
        )
    )  # fmt: skip
    empty = min(timeit.repeat("pass", number=count, repeat=5))
    return max(seconds - empty, 0.0) / count * 1e9


# The path each protocol is priced on, and `simple`'s request as perf_analyzer sends it.
PRICED = {
    "http": (HttpPath, simple_request("simple")),
    "grpc": (GrpcPath, simple_grpc_request("simple")),
}


def price_one_percent(repository: Path, url: str, core: int, protocol: str) -> tuple[float, ...]:
    """`protocol`'s whole path for `simple` in process on `core`, tracing off against
    tracing 1% of requests to the collector at `url`, in alternating rounds: (off's
    median CPU ns per request, 1%'s added ns, its 95% interval)."""
    off = Tracing()
    on = Tracing(TraceSettings(("TIMESTAMPS",), 100), ExporterConfig(url=url))
    on.prepare()

    def set_up(core_: InferenceCore, name: str) -> None:
        core_.tracing = on if name == "1%" else off

    open_path, request = PRICED[protocol]
    rounds = path_ns(
        repository, {"off": request, "1%": request}, core, open_path,
        before_round=set_up, after=on.close,
    )  # fmt: skip
    return paired_difference(rounds, "off", "1%")


class Server:
    """The gateway under test and the calls that steer and read it."""

    def __init__(self, http_url: str, grpc_url: str) -> None:
        self.control = httpclient.InferenceServerClient(http_url)
        self.urls = {"http": http_url, "grpc": grpc_url}

    def set(self, name: str) -> None:
        self.control.update_trace_settings(settings=SETTINGS[name])


def rounds(server: Server, protocol: str, concurrency: int, args, label: str) -> dict:
    """Each round runs the three settings in a rotating order; their throughput."""
    measured: list[dict[str, float]] = []
    for round_ in range(args.repeats):
        names = list(SETTINGS)
        names = names[round_ % 3 :] + names[: round_ % 3]
        rates = {}
        for name in names:
            server.set(name)
            rates[name] = perf_analyzer(
                "simple", server.urls[protocol], protocol, concurrency, args.client_core,
                f"{label} {name}", (), args.measurement_ms,
            ).throughput  # fmt: skip
        print(
            f"  {label} c={concurrency}: " + " ".join(f"{n} {r:,.0f}/s" for n, r in rates.items()),
            flush=True,
        )
        measured.append(rates)
    return {
        name: [r[name] / r["off"] for r in measured if r[name] > 0 and r["off"] > 0]
        for name in ("1%", "100%")
    }


def report(name: str, values: list[float], goal: bool) -> None:
    mean, low, high = geometric_mean_interval(values)
    verdict = ""
    if goal:
        verdict = f"; goal >= {GOAL_1_PERCENT}: {'met' if mean >= GOAL_1_PERCENT else 'not met'}"
    print(f"  {name} over {len(values)}: {mean:.3f} (95% interval {low:.3f}-{high:.3f}){verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the three settings")
    add_run_arguments(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        simple.build(repository)
        floor = in_process_floor(repository, args.server_core)
        pin_to(args.client_core)  # the collector's threads too
        off_ns = off_path_ns()
        sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
        threading.Thread(target=sink.serve_forever, daemon=True).start()
        url = f"127.0.0.1:{sink.server_address[1]}/v1/traces"
        priced = {
            protocol: price_one_percent(repository, f"http://{url}", args.server_core, protocol)
            for _, protocol in PROTOCOLS
        }
        gateway = start_gateway(
            repository, "--log-level", "warning", "--queue-budget-ms", "1000",
            "--trace-config", f"opentelemetry,url={url}",
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core},
        )  # fmt: skip
        server = Server(gateway.http_url, gateway.grpc_url)
        by_rounds: dict[tuple[str, str], list[float]] = {}
        off_rates: dict[str, float] = {}
        try:
            for label, protocol in PROTOCOLS:
                for concurrency in args.concurrency:
                    measured = rounds(server, protocol, concurrency, args, label)
                    for name, values in measured.items():
                        by_rounds.setdefault((label, name), []).extend(values)
                server.set("off")
                off_rates[label] = perf_analyzer(
                    "simple", server.urls[protocol], protocol, max(args.concurrency),
                    args.client_core, f"{label} off", (), args.measurement_ms,
                ).throughput  # fmt: skip
        finally:
            gateway.stop()
            sink.shutdown()
    print(f"\nfloor: ONNX Runtime in-process, batch 1: {floor:,.0f} /s")
    print(f"spans received by the collector: {_Sink.spans_bytes / 1e6:.1f} MB")
    for label, protocol in PROTOCOLS:
        share_ns = 1e9 / off_rates[label] if off_rates[label] > 0 else math.nan
        print(
            f"{label}: off {off_rates[label]:,.0f}/s ({off_rates[label] / floor:.3f} x floor); "
            f"off's own work {off_ns:.0f} ns of a request's {share_ns / 1000:.1f} us "
            f"({off_ns / share_ns:.4%})"
        )
        rounds_100 = by_rounds.get((label, "100%"), [])
        report("100% / off, rounds", rounds_100, goal=False)
        report("  1% / off, rounds", by_rounds.get((label, "1%"), []), goal=False)
        verdict = priced_verdict(share_ns, priced[protocol], GOAL_1_PERCENT, label.split()[0])
        print(f"    1% / off, priced: {verdict}")
        if rounds_100:
            mean_100 = geometric_mean_interval(rounds_100)[0]
            derived = 1 / (1 + (1 / mean_100 - 1) / 100)
            print(
                f"    1% / off, from the measured 100%: {derived:.4f} (a traced request "
                f"{share_ns * (1 / mean_100 - 1) / 1000:.1f} us of the server's core)"
            )


if __name__ == "__main__":
    main()
