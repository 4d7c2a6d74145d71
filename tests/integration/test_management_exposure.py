"""A gateway listening beyond loopback: management calls need the admin token unless the
operator says otherwise by name. The servers bind 0.0.0.0; traffic goes to 127.0.0.1 only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from models import simple
from tests.conftest import both_clients

ROOT = Path(__file__).resolve().parents[2]
EXPLICIT = ("--host", "0.0.0.0", "--model-control-mode", "explicit")


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("exposed-repo")
    simple.build(repo)
    return repo


def test_exposed_explicit_mode_without_token_refuses_to_start(repository):
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--model-repository", str(repository)]
        + [*EXPLICIT, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "give --admin-token TOKEN" in result.stderr
    assert "--allow-unauthenticated-management" in result.stderr


def test_exposed_with_the_flag_manages_without_token(repository, server_factory):
    server = server_factory(repository, *EXPLICIT, "--allow-unauthenticated-management")
    for client in both_clients(server):
        client.load_model("simple")
        assert client.is_model_ready("simple")
        client.unload_model("simple")
        assert not client.is_model_ready("simple")


def test_exposed_with_a_token_needs_it(repository, server_factory):
    server = server_factory(repository, *EXPLICIT, "--admin-token", "s3cret")
    for client in both_clients(server):
        with pytest.raises(InferenceServerException) as info:
            client.load_model("simple")
        assert "admin token" in info.value.message()
        assert not client.is_model_ready("simple")
        client.load_model("simple", headers={"authorization": "Bearer s3cret"})
        assert client.is_model_ready("simple")
        client.unload_model("simple", headers={"authorization": "Bearer s3cret"})


def test_exposed_without_management_starts_without_token(repository, server_factory):
    # Control mode none and no shared memory: every management call is refused anyway.
    server = server_factory(repository, "--host", "0.0.0.0")
    for client in both_clients(server):
        assert client.is_model_ready("simple")
        with pytest.raises(InferenceServerException) as info:
            client.load_model("simple")
        assert "--model-control-mode explicit" in info.value.message()
