"""The `accel-gateway` command as a newcomer meets it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_serve_without_repository_builds_the_examples(server_factory, tmp_path):
    cache = tmp_path / "cache"
    server = server_factory(None, env={"XDG_CACHE_HOME": str(cache)}, timeout_s=120)
    models = httpx.post(f"http://{server.http_url}/v2/repository/index", json={}).json()
    assert {"simple", "digits", "identity_fp32"} <= {m["name"] for m in models}
    assert (cache / "accel-gateway").is_dir()
    log = server.log()
    assert "building the example model repository" in log
    assert "digits: held-out accuracy" in log


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
