"""Triton's Model Analyzer, unmodified, profiles the gateway in its remote launch mode and
writes its results and reports (scripts/install-model-analyzer puts it in its own
environment; README: "Model Analyzer")."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from models import simple
from tests.conftest import MODEL_ANALYZER, PERF_ANALYZER, installed_tool


@pytest.fixture
def model_analyzer() -> Path:
    installed_tool(PERF_ANALYZER, "install-perf-analyzer")  # it drives perf_analyzer
    return installed_tool(MODEL_ANALYZER, "install-model-analyzer")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_model_analyzer_profiles_the_gateway(model_analyzer, server_factory, tmp_path, protocol):
    repository = tmp_path / "repository"
    simple.build(repository)
    # Remote mode loads and unloads the profiled model itself: explicit control.
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--load-model", "simple"
    )
    config = tmp_path / "profile.yaml"
    config.write_text(
        "profile_models:\n  simple:\n    cpu_only: true\n"
        "    parameters:\n      concurrency: [1, 2]\n"
        # Shorter windows than perf_analyzer's 5 s: two points a protocol, not minutes.
        "    perf_analyzer_flags:\n      measurement-interval: 1000\n"
        # Any three windows are stable enough (as in test_perf_analyzer.py): on a busy
        # machine the default 10 % failed, and Model Analyzer ran perf_analyzer again
        # with 50 more requests a window, up to four times a point.
        "      stability-percentage: 100\n"
    )
    export = tmp_path / "export"
    export.mkdir()
    command = [
        str(model_analyzer), "profile", "-f", str(config),
        "--model-repository", str(repository), "--triton-launch-mode", "remote",
        "--client-protocol", protocol,
        "--triton-http-endpoint", server.http_url,
        "--triton-grpc-endpoint", server.grpc_url,
        "--triton-metrics-url", f"http://127.0.0.1:{server.metrics_port}/metrics",
        "--perf-analyzer-path", str(PERF_ANALYZER),
        "--output-model-repository-path", str(tmp_path / "variants"),
        "--override-output-model-repository", "--export-path", str(export),
        "--checkpoint-directory", str(tmp_path / "checkpoints"),
        "--run-config-search-disable", "--perf-analyzer-timeout", "120",
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Profile complete" in output, output[-4000:]
    with open(export / "results" / "metrics-model-inference.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2], rows
    for row in rows:
        assert row["Model"] == "simple" and row["Instance Group"] == "1:CPU"
        # It measured something; how fast this machine serves is for benchmarks.
        assert float(row["Throughput (infer/sec)"]) > 0, row
        assert float(row["p99 Latency (ms)"]) > 0, row
    summary = export / "reports" / "summaries" / "simple" / "result_summary.html"
    assert "simple" in summary.read_text()
    detailed = list((export / "reports" / "detailed").glob("*/detailed_report.html"))
    assert detailed, "no detailed report"
