"""Start `accel-gateway serve` as a child process on free ports and wait until it is ready.

Tests, benchmarks and load tests all need a real server they own; this is the one
way they start it.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1", within: range | None = None) -> list[int]:
    """`count` different free ports, the system's choice or drawn from `within`: each
    socket stays bound until all are taken, since the system may hand a just-closed port
    out again (and a port drawn twice is taken the second time)."""
    attempts = count if within is None else 50 * count
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            if attempts == 0:
                raise RuntimeError(f"no {count} free ports in {within}")
            attempts -= 1
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind((host, 0 if within is None else random.choice(within)))
            except OSError:
                if within is None:
                    raise
                continue  # drawn and taken: draw again
            ports.append(sock.getsockname()[1])
        return ports


@dataclass
class GatewayProcess:
    process: subprocess.Popen
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    # How this process reaches a TLS gateway; None: plaintext.
    ssl_context: ssl.SSLContext | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context else "http"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def _ready(server: GatewayProcess) -> bool:
    url = f"{server.scheme}://{server.http_url}/v2/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=1, context=server.ssl_context) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):  # ssl.SSLError is an OSError
        return False
    except http.client.HTTPException as exc:
        raise RuntimeError(
            f"something that does not speak HTTP answers on {server.http_url} ({exc!r}): "
            "another server on the gateway's HTTP port"
        ) from None


def _given(args: tuple[str, ...], option: str) -> bool:
    return any(arg == option or arg.startswith(f"{option}=") for arg in args)


def _tls_context(args: tuple[str, ...], context: ssl.SSLContext | None) -> ssl.SSLContext | None:
    if context is not None or not _given(args, "--tls-cert"):
        return context
    if _given(args, "--tls-client-ca"):
        raise ValueError(
            "this gateway requires client certificates: pass ssl_context= with one loaded "
            "(SSLContext.load_cert_chain) so that its readiness can be polled"
        )
    # Our own child on loopback: its readiness needs no proof of its name.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def start_gateway(
    repository: Path | None,
    *args: str,
    log_path: Path,
    env: dict[str, str] | None = None,
    cpu_cores: set[int] | None = None,
    timeout_s: float = 60.0,
    ssl_context: ssl.SSLContext | None = None,
    ports: tuple[int, int, int] | None = None,
) -> GatewayProcess:
    """Start a gateway (on `cpu_cores` only, if given) and wait for /v2/health/ready.

    With `--tls-cert` among `args`, readiness is polled over HTTPS with `ssl_context`, which
    must hold a client certificate when `--tls-client-ca` is given too; without one, the
    server's certificate is not checked. `ports` (HTTP, gRPC, metrics) restarts a
    gateway where it was; by default three free ones are taken.
    """
    ssl_context = _tls_context(args, ssl_context)
    ports = ports or tuple(free_ports(3))
    command = [
        sys.executable, "-m", "gateway", "serve",
        *(["--model-repository", str(repository)] if repository else []),
        "--http-port", str(ports[0]), "--grpc-port", str(ports[1]),
        "--metrics-port", str(ports[2]), *args,
    ]  # fmt: skip
    pin = (lambda: os.sched_setaffinity(0, cpu_cores)) if cpu_cores else None
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            preexec_fn=pin,
        )
    server = GatewayProcess(process, *ports, log_path, ssl_context)
    try:
        _wait_ready(server, timeout_s)
    except BaseException:
        server.stop()  # never left running behind a failed start (it and its workers)
        raise
    return server


def _wait_ready(server: GatewayProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"gateway exited with {server.process.returncode}:\n{server.log()}")
        if _ready(server):
            return
        time.sleep(0.1)
    raise RuntimeError(f"gateway not ready after {timeout_s} s:\n{server.log()}")
