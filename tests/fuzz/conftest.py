"""A real gateway for the fuzzers: `simple` and the identity models (ONNX, built in seconds,
so the fuzz suite does not wait for the whole example repository), with system shared
memory served so that its routes are fuzzed too."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from gateway.launch import GatewayProcess, start_gateway
from models import identity, simple

# The property tests' settings; ACCEL_FUZZ_EXAMPLES sets the examples per property.
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("ACCEL_FUZZ_EXAMPLES", "300")),
    deadline=None,
    database=None,
    # New inputs every run, CI's included (Hypothesis's CI profile, which it picks when
    # CI is set, would try the same ones each time); a failure prints how to replay it
    # (print_blob).
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("fuzz")


@pytest.fixture(scope="session")
def fuzz_repository(tmp_path_factory) -> Path:
    repository = tmp_path_factory.mktemp("fuzz") / "repository"
    repository.mkdir()
    simple.build(repository)
    identity.build(repository)
    return repository


@pytest.fixture(scope="session")
def fuzz_gateway(fuzz_repository, tmp_path_factory) -> Iterator[GatewayProcess]:
    log_path = tmp_path_factory.mktemp("fuzz-logs") / "gateway.log"
    server = start_gateway(
        fuzz_repository, "--allow-shared-memory", log_path=log_path, timeout_s=120.0
    )
    yield server
    assert server.stop() == 0, server.log()
