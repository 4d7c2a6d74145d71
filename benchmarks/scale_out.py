"""`simple` served directly, and through the remote backend (a second gateway in front).

    .venv/bin/python -m benchmarks.scale_out [--concurrency 1 8 64] [--measurement-ms 3000]

A gateway (the remote) serves `simple` (INT32 [1,16] add/sub, no batching); a second
gateway (the front) serves `simple` again as a remote model over gRPC
(`simple_grpc`) and over HTTP (`simple_http`), 8 instances each. Both gateways share
one core, as they would share a machine; perf_analyzer runs on the other. Printed: the
direct throughput against the in-process floor, and each remote path's throughput and
p50 as a share of the direct call's. A remote hop costs a second server's whole
protocol path: the figure says what spreading a model over machines costs per request
before any machine is added. No goal is set.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.perf import Measurement, add_run_arguments, perf_analyzer
from benchmarks.serving_simple import in_process_floor
from gateway.launch import start_gateway
from models import simple
from models.remote import write_remote

PROTOCOLS = (("HTTP binary", "http"), ("gRPC unary", "grpc"))
REMOTE_PATHS = ("simple_grpc", "simple_http")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    add_run_arguments(parser)
    args = parser.parse_args()
    results: dict[tuple[str, int, str], Measurement] = {}
    with tempfile.TemporaryDirectory() as tmp:
        back, front_repo = Path(tmp) / "back", Path(tmp) / "front"
        simple.build(back)
        floor = in_process_floor(back, args.server_core)
        common = ("--log-level", "warning", "--queue-budget-ms", "1000")
        remote = start_gateway(
            back, *common, log_path=Path(tmp) / "back.log", cpu_cores={args.server_core}
        )
        write_remote(front_repo, "simple_grpc", [remote.grpc_url], "simple", instances=8)
        write_remote(front_repo, "simple_http", [remote.http_url], "simple", "http", instances=8)
        front = start_gateway(
            front_repo, *common, log_path=Path(tmp) / "front.log", cpu_cores={args.server_core}
        )
        try:
            for label, protocol in PROTOCOLS:
                for concurrency in args.concurrency:
                    for server, model, key in [(remote, "simple", "direct")] + [
                        (front, path, path) for path in REMOTE_PATHS
                    ]:
                        url = server.grpc_url if protocol == "grpc" else server.http_url
                        results[label, concurrency, key] = perf_analyzer(
                            model, url, protocol, concurrency, args.client_core,
                            f"{label} {key}", (), args.measurement_ms,
                        )  # fmt: skip
        finally:
            front.stop()
            remote.stop()
    print(f"\nfloor: ONNX Runtime in-process, batch 1: {floor:,.0f} /s")
    print(
        f"{'client path':<13}{'conc':>5}{'direct /s':>11}{'x floor':>8}"
        f"{'via gRPC':>10}{'via HTTP':>10}{'p50 dir':>9}{'p50 gRPC':>10}{'p50 HTTP':>10}"
    )
    for label, _ in PROTOCOLS:
        for concurrency in args.concurrency:
            direct, via_grpc, via_http = (
                results[label, concurrency, key] for key in ("direct", *REMOTE_PATHS)
            )
            base = direct.throughput or float("nan")
            print(
                f"{label:<13}{concurrency:>5}{direct.throughput:>11,.0f}"
                f"{direct.throughput / floor:>8.3f}{via_grpc.throughput / base:>10.3f}"
                f"{via_http.throughput / base:>10.3f}{direct.p50_us / 1000:>7.2f}ms"
                f"{via_grpc.p50_us / 1000:>8.2f}ms{via_http.p50_us / 1000:>8.2f}ms"
            )
    print("(via gRPC / via HTTP: the remote path's throughput as a share of the direct call's)")


if __name__ == "__main__":
    main()
