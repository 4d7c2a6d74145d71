"""Shared fixtures: the example repository, free ports, and real gateway processes."""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

from gateway import launch
from gateway.launch import GatewayProcess, start_gateway
from models.build import build_repository

# Under pytest-xdist (scripts/test), each pytest process takes its servers' ports from a
# range of its own, below the kernel's ephemeral ports (bind to port 0, and clients'
# connections): two processes never hand out the same port in the seconds between one
# choosing it and its server binding it.
PORTS_PER_PROCESS = 4000
# 3 ranges from 20000 to 31999: above Ray's worker ports (10002-19999, which a cluster's
# GCS port among them broke), below Linux's ephemeral ports (32768 on).
LOWEST_PORT = 20000
RANGES = 3


if (_worker := os.environ.get("PYTEST_XDIST_WORKER", "")).startswith("gw"):
    _low = LOWEST_PORT + int(_worker[2:]) % RANGES * PORTS_PER_PROCESS
    launch.free_ports = functools.partial(
        launch.free_ports, within=range(_low, _low + PORTS_PER_PROCESS)
    )


def start_server(repository: Path | None, *args: str, log_dir: Path, **kwargs) -> GatewayProcess:
    log_path = log_dir / f"gateway-{len(list(log_dir.glob('gateway-*.log')))}.log"
    # Generous: a cold start compiles the torch.compile examples (no inductor cache yet).
    kwargs.setdefault("timeout_s", 180.0)
    return start_gateway(repository, *args, log_path=log_path, **kwargs)


TOOLS = Path(__file__).resolve().parents[1] / ".tools"
PERF_ANALYZER = TOOLS / "perf_analyzer" / "perf_analyzer"
MODEL_ANALYZER = TOOLS / "model-analyzer" / "bin" / "model-analyzer"


def installed_tool(path: Path, installer: str) -> Path:
    """`path`, a tool scripts/test installs (with scripts/`installer`): skipped where it is
    missing, failed under CI, where it must be there."""
    if not path.exists():
        message = (
            f"{path} is not installed; scripts/{installer} (which scripts/test runs) installs it"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def infer_concurrently(
    url: str, model: str, requests: list[list], workers: int = 16, errors: bool = False
) -> list:
    """Each request's InferResult, sent from `workers` threads at once, each with an HTTP
    client of its own (made and closed on its thread); with `errors`, a request that fails
    gives its InferenceServerException in its place instead of raising. tritonclient's
    async_infer does not stand in for concurrent clients: the one installed here (2.73)
    sleeps 10 ms after sending each request, so a fast model sees one at a time."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    results: list = [None] * len(requests)

    def worker(first: int) -> None:
        client = httpclient.InferenceServerClient(url)
        try:
            for index in range(first, len(requests), workers):
                try:
                    results[index] = client.infer(model, requests[index])
                except InferenceServerException as exc:
                    if not errors:
                        raise
                    results[index] = exc
        finally:
            client.close()

    with ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(worker, first) for first in range(workers)]:
            done.result()  # a worker's failure fails the test
    return results


def wait_until(
    condition: Callable[[], object],
    timeout_s: float = 30.0,
    message: str | Callable[[], str] = "",
    interval_s: float = 0.05,
) -> object:
    """What `condition()` returns once it is true, asked every `interval_s`; the test
    fails if it is not within `timeout_s`. For a state a test must wait for but cannot
    time (a signal handled, requests arrived, a process gone): the deadline is generous,
    since reaching it is a failure, never a measurement."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            pytest.fail(f"not within {timeout_s:g} s: {text or condition}")
        time.sleep(interval_s)


def both_clients(server: GatewayProcess) -> list:
    """An unmodified tritonclient of each protocol, HTTP first, for `server`."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    return [
        httpclient.InferenceServerClient(server.http_url),
        grpcclient.InferenceServerClient(server.grpc_url),
    ]


def write_ensemble_cycle(repo: Path) -> None:
    """Ensembles cycle_a and cycle_b, each a step of the other: loads to be refused."""
    for name, other in (("cycle_a", "cycle_b"), ("cycle_b", "cycle_a")):
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}" platform: "ensemble" max_batch_size: 64\n'
            'input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ 8, 8 ] } ]\n'
            'output [ { name: "LABEL" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            f'ensemble_scheduling {{ step [ {{ model_name: "{other}" model_version: -1 '
            'input_map { key: "IMAGE" value: "IMAGE" } '
            'output_map { key: "LABEL" value: "LABEL" } } ] }\n'
        )


class ExampleBuild(NamedTuple):
    repo: Path
    names: list[str]
    lines: list[str]  # the build log, one line per model


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory) -> Iterator[Path]:
    """Compiled-model caches (TVM libraries, tinygrad kernels) of this session only, for
    every test and every server it starts: nothing shared with other runs."""
    previous = os.environ.get("XDG_CACHE_HOME")
    path = tmp_path_factory.mktemp("xdg-cache")
    os.environ["XDG_CACHE_HOME"] = str(path)
    yield path
    if previous is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(scope="session")
def example_build(tmp_path_factory) -> ExampleBuild:
    """The example repository, built once per test session (tens of seconds with every
    framework installed), with the builder's log."""
    path = tmp_path_factory.mktemp("example") / "repository"
    lines: list[str] = []
    names = build_repository(path, log=lines.append)
    return ExampleBuild(path, names, lines)


@pytest.fixture(scope="session")
def example_repository(example_build) -> Path:
    return example_build.repo


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
def gateway(example_repository, tmp_path_factory) -> Iterator[GatewayProcess]:
    """One gateway serving the whole example repository for the session's read-only tests."""
    server = start_server(example_repository, log_dir=tmp_path_factory.mktemp("logs"))
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture
def server_factory(tmp_path) -> Iterator[Callable[..., GatewayProcess]]:
    """Start gateways with custom arguments; each is stopped when the test ends."""
    started: list[GatewayProcess] = []

    def factory(repository: Path | None, *args: str, **kwargs) -> GatewayProcess:
        server = start_server(repository, *args, log_dir=tmp_path, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def shm_gateway(example_repository, tmp_path_factory) -> Iterator[GatewayProcess]:
    """A gateway with system shared memory allowed, serving `simple` and two identities."""
    repository = tmp_path_factory.mktemp("shm") / "repository"
    for name in ("simple", "identity_bytes", "identity_fp32"):
        shutil.copytree(example_repository / name, repository / name)
    server = start_server(
        repository, "--allow-shared-memory", log_dir=tmp_path_factory.mktemp("shm-logs")
    )
    yield server
    assert server.stop() == 0, server.log()
