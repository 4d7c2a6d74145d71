"""`accel-gateway ray serve|shutdown`: deploy a model repository on a Ray cluster.

    accel-gateway ray serve --model-repository DIR [--address auto] [--http-port 8000]
    accel-gateway ray shutdown [--address auto]

`serve` connects to the cluster, deploys every model of the repository and the V2
ingress, waits until the ingress answers ready, and returns: the application stays up
in the cluster (Serve's controller keeps it) until `shutdown`. The ingress runs on the
node where `serve` runs; the repository must be at the same path on every node (a
shared file system), since each model's replicas read it wherever they are placed.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from gateway.arguments import distinct_ports, port

READY_TIMEOUT_S = 600.0


def add_parser(commands) -> None:
    ray = commands.add_parser("ray", help="serve a model repository on a Ray cluster")
    actions = ray.add_subparsers(dest="ray_command", required=True)
    serve = actions.add_parser("serve", help="deploy the repository's models and the ingress")
    serve.add_argument("--model-repository", type=Path, required=True)
    serve.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    serve.add_argument("--host", default="127.0.0.1", help="the ingress's address")
    serve.add_argument("--http-port", type=port, default=8000)
    serve.add_argument("--grpc-port", type=port, default=8001)
    serve.add_argument("--metrics-port", type=port, default=8002)
    serve.add_argument("--ingress-replicas", type=int, default=1,
                       help="ingress replicas, sharing the ports on each node")  # fmt: skip
    serve.add_argument("--timeout", type=float, default=READY_TIMEOUT_S,
                       help="seconds to wait for the ingress to be ready")  # fmt: skip
    shutdown = actions.add_parser("shutdown", help="delete the application from the cluster")
    shutdown.add_argument("--address", default="auto")


def _connect(address: str) -> None:
    import ray

    from gateway.tools.ray.board import NAMESPACE

    ray.init(address=address, namespace=NAMESPACE, logging_level="WARNING",
             log_to_driver=False)  # fmt: skip


def _wait_ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the ingress did not answer ready at {url} in {timeout_s:g} s")
        time.sleep(0.5)


def run(args: argparse.Namespace) -> int:
    import ray
    from ray import serve

    from gateway.tools.ray.board import board_actor, remove_board
    from gateway.tools.ray.deployments import APP_NAME, application

    if args.ray_command == "serve":
        try:
            distinct_ports({
                "--http-port": args.http_port, "--grpc-port": args.grpc_port,
                "--metrics-port": args.metrics_port,
            })  # fmt: skip
        except ValueError as exc:
            print(f"accel-gateway ray: {exc}", file=sys.stderr)
            return 2
    _connect(args.address)
    if args.ray_command == "shutdown":
        serve.delete(APP_NAME)
        remove_board(ray)
        return 0
    board_actor(ray)
    serve.start(proxy_location="Disabled")
    options = {
        "model_repository": str(args.model_repository.resolve()), "host": args.host,
        "http_port": args.http_port, "grpc_port": args.grpc_port,
        "metrics_port": args.metrics_port,
    }  # fmt: skip
    node_ip = ray.util.get_node_ip_address()
    if f"node:{node_ip}" not in ray.cluster_resources():
        raise SystemExit(
            f"this machine ({node_ip}) is not a node of the Ray cluster at {args.address}; "
            "run accel-gateway ray serve on a node of it, where the ingress will serve"
        )
    app = application(args.model_repository.resolve(), options, args.ingress_replicas, node_ip)
    serve.run(app, name=APP_NAME, route_prefix=None, blocking=False)
    _wait_ready(f"http://{args.host}:{args.http_port}/v2/health/ready", args.timeout)
    print(
        f"accel-gateway on Ray Serve: HTTP {args.host}:{args.http_port}, gRPC "
        f"{args.host}:{args.grpc_port}, metrics {args.host}:{args.metrics_port}",
        flush=True,
    )
    return 0
