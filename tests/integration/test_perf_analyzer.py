"""Triton's perf_analyzer, run with no special flags, against the gateway over HTTP and gRPC."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import PERF_ANALYZER, installed_tool


@pytest.fixture(scope="module")
def perf_analyzer() -> Path:
    return installed_tool(PERF_ANALYZER, "install-perf-analyzer")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_runs_against_simple(gateway, perf_analyzer, protocol):
    url = gateway.http_url if protocol == "http" else gateway.grpc_url
    result = subprocess.run(
        # No protocol flags at all. The only option widens perf_analyzer's stability band
        # (10 % by default), which shared CI machines cannot always hold for 3 windows.
        [
            str(perf_analyzer),
            "-m",
            "simple",
            "-u",
            url,
            "-i",
            protocol,
            "--stability-percentage",
            "50",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", output)
    assert throughput and float(throughput.group(1)) > 0, output
    # perf_analyzer read our statistics extension for its server-side breakdown.
    assert "Server:" in output and "compute infer" in output, output


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_with_system_shared_memory(shm_gateway, perf_analyzer, protocol):
    """perf_analyzer puts every input and output in system shared memory: it registers its
    regions, infers through them, and unregisters them (system and CUDA) at the end."""
    url = shm_gateway.http_url if protocol == "http" else shm_gateway.grpc_url
    # 1 s windows (5 s by default, as the test above runs): what is checked here is the
    # regions' round trip, not the defaults.
    command = [str(perf_analyzer), "-m", "simple", "-u", url, "-i", protocol,
               "--shared-memory", "system", "--stability-percentage", "50",
               "--measurement-interval", "1000"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", output)
    assert throughput and float(throughput.group(1)) > 0, output
    with urllib.request.urlopen(f"http://{shm_gateway.http_url}/v2/systemsharedmemory/status") as r:
        assert json.load(r) == []  # perf_analyzer left nothing registered
