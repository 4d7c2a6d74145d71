"""Shared fixtures: the example repository, free ports, and real gateway processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from models.build import build_repository

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServerProcess:
    process: subprocess.Popen
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_server(
    repository: Path | None,
    *args: str,
    log_dir: Path,
    env: dict | None = None,
    timeout_s: float = 60.0,
) -> ServerProcess:
    """Start `accel-gateway serve` on free ports and wait until it reports ready."""
    ports = [free_port() for _ in range(3)]
    log_path = log_dir / f"gateway-{ports[0]}.log"
    command = [
        sys.executable,
        "-m",
        "gateway",
        "serve",
        *(["--model-repository", str(repository)] if repository else []),
        "--http-port",
        str(ports[0]),
        "--grpc-port",
        str(ports[1]),
        "--metrics-port",
        str(ports[2]),
        *args,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    server = ServerProcess(process, *ports, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gateway exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"http://{server.http_url}/v2/health/ready", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"gateway not ready after {timeout_s} s:\n{server.log()}")


@pytest.fixture(scope="session")
def example_repository(tmp_path_factory) -> Path:
    """The example repository, built once per test session."""
    path = tmp_path_factory.mktemp("example") / "repository"
    build_repository(path, log=lambda line: None)
    return path


@pytest.fixture
def repository_copy(example_repository, tmp_path) -> Callable[..., Path]:
    """A private copy of some example models, for tests that change the repository."""

    def copy(*names: str) -> Path:
        target = tmp_path / "repository"
        target.mkdir(exist_ok=True)
        for name in names:
            shutil.copytree(example_repository / name, target / name)
        return target

    return copy


@pytest.fixture(scope="session")
def gateway(example_repository, tmp_path_factory) -> Iterator[ServerProcess]:
    """One gateway serving the whole example repository for the session's read-only tests."""
    server = start_server(example_repository, log_dir=tmp_path_factory.mktemp("logs"))
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture
def server_factory(tmp_path) -> Iterator[Callable[..., ServerProcess]]:
    """Start gateways with custom arguments; each is stopped when the test ends."""
    started: list[ServerProcess] = []

    def factory(repository: Path | None, *args: str, **kwargs) -> ServerProcess:
        server = start_server(repository, *args, log_dir=tmp_path, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()
