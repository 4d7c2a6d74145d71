"""`accel-gateway health`: is the gateway ready? The container's HEALTHCHECK.

A health check runs beside the server and does not see the options it was started
with, so it reads them from the server's own command line (`/proc/PID/cmdline`; in the
container the server is PID 1, or a child of it under `docker run --init`) and asks
`/v2/health/ready` on loopback at its HTTP port: over HTTPS when it serves TLS, without
checking the certificate (this is the server's own machine, and its certificate names
the address clients use). When the server requires client certificates, give one it
trusts with --client-cert and --client-key. Exit status 0: ready; 1: not ready or not
answering, with the reason.
"""

from __future__ import annotations

import argparse
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
PROC = Path("/proc")


def add_parser(commands) -> None:
    health = commands.add_parser(
        "health", help="exit 0 if the running gateway is ready (the container's HEALTHCHECK)"
    )
    health.add_argument("--pid", type=int, default=1, help="the gateway's process, or its "
                        "parent (default 1, as in the image)")  # fmt: skip
    health.add_argument("--timeout", type=float, default=4.0, help="seconds (default 4)")
    health.add_argument("--client-cert", type=Path, help="PEM client certificate, for a "
                        "gateway started with --tls-client-ca")  # fmt: skip
    health.add_argument("--client-key", type=Path, help="PEM key of --client-cert")


def serve_arguments(argv: list[str]) -> list[str] | None:
    """`serve ...` when `argv` runs the gateway (`accel-gateway serve`, `python -m
    gateway serve`), else None."""
    for i, arg in enumerate(argv):
        runner = argv[max(i - 2, 0) : i]
        if arg == "serve" and (runner[-1:] and Path(runner[-1]).name == "accel-gateway"
                               or runner == ["-m", "gateway"]):  # fmt: skip
            return argv[i:]
    return None


def _argv(pid: int) -> list[str]:
    return [a.decode() for a in (PROC / str(pid) / "cmdline").read_bytes().split(b"\0") if a]


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in (PROC / str(pid) / "task").glob("*/children"):
        found += [int(child) for child in task.read_text().split()]
    return found


def find_server(pid: int) -> list[str]:
    """The `serve` arguments of process `pid`, or of its nearest descendant that serves."""
    generation = [pid]
    for _ in range(3):  # an init, a shell, the server
        for each in generation:
            found = serve_arguments(_argv(each))
            if found is not None:
                return found
        generation = [child for each in generation for child in _children(each)]
    raise ValueError(f"neither process {pid} nor its children run `accel-gateway serve`")


def readiness_url(options: argparse.Namespace) -> str:
    host = LOOPBACK.get(options.host, options.host)
    scheme = "https" if options.tls_cert else "http"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{options.http_port}/v2/health/ready"


def probe(url: str, timeout: float, client_cert: Path | None, client_key: Path | None) -> str:
    """'' when ready, else why not."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]  # loopback
    try:
        if url.startswith("https"):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            if client_cert is not None:
                context.load_cert_chain(client_cert, client_key)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        with urllib.request.build_opener(*handlers).open(url, timeout=timeout):
            return ""
    except urllib.error.HTTPError as exc:
        return f"{url} answered {exc.code}"
    except (OSError, ssl.SSLError) as exc:
        return f"{url} did not answer: {exc}"


def run(args: argparse.Namespace, parse: Callable[[list[str]], argparse.Namespace]) -> int:
    try:
        options = parse(find_server(args.pid))
    except (OSError, ValueError) as exc:
        print(f"accel-gateway health: cannot read the server's options: {exc}", file=sys.stderr)
        return 1
    except SystemExit:  # argparse has said what it could not parse
        print("accel-gateway health: the server's command line does not parse as "
              "`accel-gateway serve` options", file=sys.stderr)  # fmt: skip
        return 1
    url = readiness_url(options)
    if options.tls_client_ca and args.client_cert is None:
        print(f"accel-gateway health: {url} requires a client certificate; give "
              "--client-cert and --client-key", file=sys.stderr)  # fmt: skip
        return 1
    reason = probe(url, args.timeout, args.client_cert, args.client_key)
    if reason:
        print(f"accel-gateway health: not ready: {reason}", file=sys.stderr)
        return 1
    return 0
