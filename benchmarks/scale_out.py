"""`simple` served directly, through the remote backend (a second gateway in front), and
through the Ray Serve ingress.

    .venv/bin/python -m benchmarks.scale_out [--concurrency 1 8 64] [--measurement-ms 3000]

A gateway (the remote) serves `simple` (INT32 [1,16] add/sub, no batching); a second
gateway (the front) serves `simple` again as a remote model over gRPC
(`simple_grpc`) and over HTTP (`simple_http`), 8 instances each, with the remote's
max_batch_size and no batching of their own; and a one-node Ray
cluster serves the same repository through `accel-gateway ray serve` (one ingress, one
model replica). Everything server-side shares one core, as it would share a machine;
perf_analyzer runs on the other. Printed: the direct throughput against the in-process
floor, and each other path's throughput and p50 as a share of the direct call's. A
remote hop costs a second server's whole protocol path, and the Ray ingress a Serve
handle call per request: the figures say what spreading a model over machines costs per
request before any machine is added. No goal is set. Without Ray installed (the `ray`
extra), its column is left out.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.perf import Measurement, add_run_arguments, perf_analyzer
from benchmarks.serving_simple import in_process_floor
from gateway.launch import free_ports, start_gateway
from models import simple
from models.remote import write_remote

PROTOCOLS = (("HTTP binary", "http"), ("gRPC unary", "grpc"))
REMOTE_PATHS = ("simple_grpc", "simple_http")
RAY = "ray"
COLUMNS = {"direct": "direct", "simple_grpc": "via gRPC", "simple_http": "via HTTP", RAY: "via Ray"}


@dataclass(frozen=True)
class Target:
    key: str  # the column
    model: str
    http_url: str
    grpc_url: str


@contextlib.contextmanager
def ray_ingress(repository: Path, core: int) -> Iterator[Target | None]:
    """`simple` through `accel-gateway ray serve` on a one-node cluster pinned to `core`;
    None without Ray."""
    try:
        import ray.serve  # noqa: F401
    except ImportError:
        yield None
        return
    from gateway.tools.ray.local_cluster import local_cluster

    with local_cluster(cpus=4, cpu_cores={core}) as address:
        http, grpc, metrics = free_ports(3)
        subprocess.run(
            [sys.executable, "-m", "gateway", "ray", "serve", "--model-repository",
             str(repository), "--address", address, "--http-port", str(http),
             "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        yield Target(RAY, "simple", f"127.0.0.1:{http}", f"127.0.0.1:{grpc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    add_run_arguments(parser)
    args = parser.parse_args()
    results: dict[tuple[str, int, str], Measurement] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        back, front_repo = Path(tmp) / "back", Path(tmp) / "front"
        simple.build(back)
        floor = in_process_floor(back, args.server_core)
        common = ("--log-level", "warning", "--queue-budget-ms", "1000")
        remote = start_gateway(
            back, *common, log_path=Path(tmp) / "back.log", cpu_cores={args.server_core}
        )
        stack.callback(remote.stop)
        for name, url, protocol in (("simple_grpc", remote.grpc_url, "grpc"),
                                    ("simple_http", remote.http_url, "http")):  # fmt: skip
            write_remote(front_repo, name, [url], "simple", protocol, simple.MAX_BATCH_SIZE,
                         instances=8)  # fmt: skip
        front = start_gateway(
            front_repo, *common, log_path=Path(tmp) / "front.log", cpu_cores={args.server_core}
        )
        stack.callback(front.stop)
        targets = [Target("direct", "simple", remote.http_url, remote.grpc_url)]
        targets += [Target(p, p, front.http_url, front.grpc_url) for p in REMOTE_PATHS]
        ray = stack.enter_context(ray_ingress(back, args.server_core))
        if ray is not None:
            targets.append(ray)
        for label, protocol in PROTOCOLS:
            for concurrency in args.concurrency:
                for target in targets:
                    url = target.grpc_url if protocol == "grpc" else target.http_url
                    results[label, concurrency, target.key] = perf_analyzer(
                        target.model, url, protocol, concurrency, args.client_core,
                        f"{label} {target.key}", (), args.measurement_ms,
                    )  # fmt: skip
    keys = [t.key for t in targets[1:]]
    print(f"\nfloor: ONNX Runtime in-process, batch 1: {floor:,.0f} /s")
    header = "".join(f"{COLUMNS[k]:>10}" for k in keys) + "".join(
        f"{'p50 ' + COLUMNS[k]:>14}" for k in ["direct", *keys]
    )
    print(f"{'client path':<13}{'conc':>5}{'direct /s':>11}{'x floor':>8}{header}")
    for label, _ in PROTOCOLS:
        for concurrency in args.concurrency:
            direct = results[label, concurrency, "direct"]
            base = direct.throughput or float("nan")
            shares = "".join(
                f"{results[label, concurrency, k].throughput / base:>10.3f}" for k in keys
            )
            p50s = "".join(
                f"{results[label, concurrency, k].p50_us / 1000:>12.2f}ms"
                for k in ["direct", *keys]
            )
            print(
                f"{label:<13}{concurrency:>5}{direct.throughput:>11,.0f}"
                f"{direct.throughput / floor:>8.3f}{shares}{p50s}"
            )
    print("(each path's throughput as a share of the direct call's, then the p50 latencies)")


if __name__ == "__main__":
    main()
