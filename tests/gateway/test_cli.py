"""The `accel-gateway` command as a newcomer meets it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from gateway.arguments import AUTO, auto_fronts, distinct_ports
from gateway.cli import _default_repository, build_parser, main
from gateway.operation.health_command import readiness_url, serve_arguments
from models import simple
from models.build import repository_dir_name

ROOT = Path(__file__).resolve().parents[2]


def test_serve_without_repository_serves_the_examples_from_the_cache(
    server_factory, example_repository, tmp_path
):
    # A first run builds the examples into the cache: 80 s on a quiet 2-core machine, of
    # the same build the session's example repository made (models/build.py; that it is
    # built once, atomically, is tests/models/test_build.py's). Seeded with that build, the
    # command must find it where it builds it and serve it.
    cache = tmp_path / "cache"
    shutil.copytree(example_repository, cache / "accel-gateway" / repository_dir_name())
    # Found is what is asked here, not loaded: explicit control loads none of them (in a
    # fresh cache the TVM and OpenCL examples would compile as they load, about a minute).
    server = server_factory(None, "--model-control-mode", "explicit",
                            env={"XDG_CACHE_HOME": str(cache)}, timeout_s=300)  # fmt: skip
    models = httpx.post(f"http://{server.http_url}/v2/repository/index", json={}).json()
    assert {m["name"] for m in models} == {p.name for p in example_repository.iterdir()}
    assert "building the example model repository" not in server.log()


def test_serve_without_repository_builds_the_examples_when_the_cache_has_none(
    tmp_path, monkeypatch, capsys
):
    calls: list[Path] = []

    def build(dest: Path, log) -> list[str]:  # the real build is the session's; this counts
        calls.append(dest)
        (dest / "simple").mkdir()
        return ["simple"]

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr("models.build.build_repository", build)
    served = _default_repository()
    assert served == tmp_path / "accel-gateway" / repository_dir_name() and len(calls) == 1
    assert (served / "simple").is_dir()
    assert "building the example model repository" in capsys.readouterr().err


def test_port_in_use_is_a_clear_error(gateway, example_repository):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--model-repository",
            str(example_repository),
            "--http-port",
            str(gateway.http_port),
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr


@pytest.mark.parametrize(
    "ports, clash",
    [
        (["--http-port", "9100", "--grpc-port", "9100"], "--grpc-port and --http-port"),
        (["--grpc-port", "9101", "--metrics-port", "9101"], "--metrics-port and --grpc-port"),
        (["--sagemaker", "--sagemaker-port", "9102", "--http-port", "9102"],
         "--sagemaker-port and --http-port"),
    ],
)  # fmt: skip
def test_two_listeners_on_one_port_are_refused_before_anything_starts(
    tmp_path, capsys, ports, clash
):
    # Linux lets both bind (SO_REUSEADDR, before either listens): unchecked, the gateway
    # started and handed HTTP clients to the gRPC server.
    assert main(["serve", "--model-repository", str(tmp_path), *ports]) == 2
    assert f"{clash} are both on port" in capsys.readouterr().err
    # Refused before the stop's exit watchdog starts: in this process (pytest) it ended
    # the whole run 30-odd seconds later with exit code 3.
    assert not any(isinstance(t, threading.Timer) for t in threading.enumerate())


def test_port_zero_may_repeat():
    # 0 asks the system for a free port each time: no clash.
    distinct_ports({"--http-port": 0, "--grpc-port": 0, "--metrics-port": 8002})


def test_missing_repository_is_a_clear_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--model-repository", str(tmp_path / "none")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "is not a directory" in result.stderr


def test_shared_memory_is_off_unless_asked_for():
    parser = build_parser()
    assert parser.parse_args(["serve"]).allow_shared_memory is False
    assert parser.parse_args(["serve", "--allow-shared-memory"]).allow_shared_memory is True


def test_backend_nice_is_a_nice_step_count(capsys):
    parser = build_parser()
    assert parser.parse_args(["serve"]).backend_nice == 5
    assert parser.parse_args(["serve", "--backend-nice", "0"]).backend_nice == 0
    for bad in ("20", "-1", "low"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--backend-nice", bad])
    assert "--backend-nice" in capsys.readouterr().err


def test_health_answers_for_a_plain_gateway_and_names_what_is_wrong(gateway, capsys):
    assert main(["health", "--pid", str(gateway.process.pid)]) == 0
    # This test's own process is no gateway, but the `gateway` fixture's is its child,
    # as the server is under `docker run --init`.
    assert main(["health", "--pid", str(os.getpid())]) == 0
    with subprocess.Popen(["sleep", "30"]) as other:
        assert main(["health", "--pid", str(other.pid)]) == 1
        other.kill()
    assert "nor its children run `accel-gateway serve`" in capsys.readouterr().err


def test_health_knows_the_gateway_by_its_command_line():
    argv = ["/usr/local/bin/python", "/usr/local/bin/accel-gateway", "serve", "--host", "::"]
    assert serve_arguments(argv) == ["serve", "--host", "::"]
    assert serve_arguments(["python", "-m", "gateway", "serve"]) == ["serve"]
    assert serve_arguments(["python", "-m", "pytest", "-k", "serve"]) is None


def test_health_asks_loopback_for_a_server_on_every_address():
    options = build_parser().parse_args(["serve", "--host", "0.0.0.0", "--http-port", "9"])
    assert readiness_url(options) == "http://127.0.0.1:9/v2/health/ready"
    options = build_parser().parse_args(["serve", "--host", "::", "--tls-cert", "c.pem"])
    assert readiness_url(options) == "https://[::1]:8000/v2/health/ready"


def test_front_processes_auto_is_one_per_core_from_four_cores_and_the_default():
    parser = build_parser()
    assert parser.parse_args(["serve"]).workers == AUTO
    assert parser.parse_args(["serve", "--front-processes", "3"]).workers == 3
    assert parser.parse_args(["serve", "--workers", "auto"]).workers == AUTO
    assert auto_fronts((8000, 8001), cores=2) == 1  # the load or the backends need the other
    assert auto_fronts((8000, 8001), cores=3) == 1
    assert auto_fronts((8000, 8001), cores=4) == 4
    assert auto_fronts((8000, 8001), cores=16) == 16
    assert auto_fronts((0, 8001), cores=16) == 1  # fronts share fixed ports only


def test_front_processes_auto_is_one_process_for_a_repository_with_a_decoupled_model(tmp_path):
    simple.build(tmp_path)
    assert auto_fronts((8000, 8001), cores=8, repository=tmp_path) == 8
    (tmp_path / "streamer").mkdir()
    (tmp_path / "streamer" / "config.pbtxt").write_text(
        'name: "streamer"\nbackend: "python"\nmodel_transaction_policy { decoupled: true }\n'
    )
    assert auto_fronts((8000, 8001), cores=8, repository=tmp_path) == 1
