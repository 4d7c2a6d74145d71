"""Triton's perf_analyzer, run with no special flags, against the gateway over HTTP and gRPC."""

from __future__ import annotations

import json
import re
import shutil
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
        # No protocol flags at all. The only option measures a fixed count of requests
        # instead of windows until 3 agree: how steady a shared CI machine keeps its
        # throughput is no concern of this test, and perf_analyzer exits 2 when its windows
        # do not agree, however wide the band (a cold first window can double the rest).
        [
            str(perf_analyzer),
            "-m",
            "simple",
            "-u",
            url,
            "-i",
            protocol,
            "--request-count",
            "1000",
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
    # A fixed count of requests, as the test above measures: what is checked here is the
    # regions' round trip, not whether this machine's windows agree.
    command = [str(perf_analyzer), "-m", "simple", "-u", url, "-i", protocol,
               "--shared-memory", "system", "--request-count", "500"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", output)
    assert throughput and float(throughput.group(1)) > 0, output
    with urllib.request.urlopen(f"http://{shm_gateway.http_url}/v2/systemsharedmemory/status") as r:
        assert json.load(r) == []  # perf_analyzer left nothing registered


SLOW = Path(__file__).parent / "python_models" / "py_slow"


@pytest.fixture(scope="module")
def slow_gateway(tmp_path_factory):
    """A gateway with default settings serving `py_slow` (80 ms a batch of up to 32)."""
    from tests.conftest import start_server

    repository = tmp_path_factory.mktemp("slow") / "repository"
    shutil.copytree(SLOW, repository / "py_slow", ignore=shutil.ignore_patterns("__pycache__"))
    process = start_server(repository, log_dir=tmp_path_factory.mktemp("slow-logs"))
    yield process
    assert process.stop() == 0, process.log()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_at_concurrency_64_on_a_slow_batched_model(
    slow_gateway, perf_analyzer, protocol
):
    """Issue 37: 64 closed-loop clients of a model that runs 80 ms a batch of 32 wait about
    160 ms each, always. Their backlog does not grow, so with default settings nothing is
    refused (the old 50 ms default budget refused the first window, and perf_analyzer
    stops at its first error)."""
    url = slow_gateway.http_url if protocol == "http" else slow_gateway.grpc_url
    command = [str(perf_analyzer), "-m", "py_slow", "-u", url, "-i", protocol,
               "--concurrency-range", "64", "--measurement-interval", "2000",
               "--stability-percentage", "100", "--max-trials", "4"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    errors = [
        line for line in output.splitlines() if re.search(r"error|overloaded|failed", line, re.I)
    ]
    assert errors == [], output
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", output)
    # At most 400 a second (80 ms a batch of 32); this machine's speed is not asserted.
    assert throughput and float(throughput.group(1)) > 0, output
    stats = json.load(
        urllib.request.urlopen(f"http://{slow_gateway.http_url}/v2/models/py_slow/stats")
    )
    inference = stats["model_stats"][0]["inference_stats"]
    assert inference["fail"]["count"] == 0, inference
    batches = {int(row["batch_size"]) for row in stats["model_stats"][0]["batch_stats"]}
    assert max(batches) > 8, batches  # the clients' requests were batched together
