"""Locust load tests (loadtests/) through `accel-gateway loadtest`, against a real gateway.

Each run is a few seconds of headless Locust on loopback; the assertions read Locust's
CSV statistics: every request name was called, and nothing failed.
"""

from __future__ import annotations

import csv
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gateway.launch import GatewayProcess, start_gateway
from gateway.tools.loadtest_command import is_loopback, main, parse_run_time
from models import identity, mlp, simple

ROOT = Path(__file__).resolve().parents[2]
RUN_SECONDS = 3


@pytest.fixture(scope="module")
def inputs_module():
    # `loadtests` lives beside `gateway` in the checkout, not in the installed distribution.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("loadtests.inputs")


@pytest.fixture(scope="module")
def small_gateway(tmp_path_factory) -> GatewayProcess:
    """A gateway with a few quick-to-build ONNX models: simple (INT32), mlp (FP32, dynamic
    batching), identity_fp32 (all dimensions -1) and identity_bytes (BYTES)."""
    repository = tmp_path_factory.mktemp("loadtest") / "repository"
    repository.mkdir()
    simple.build(repository)
    mlp.build(repository)
    identity.build_one(repository, "fp32")
    identity.build_one(repository, "bytes")
    logs = tmp_path_factory.mktemp("loadtest-logs")
    server = start_gateway(repository, log_path=logs / "gateway.log", timeout_s=120.0)
    yield server
    assert server.stop() == 0, server.log()


def loadtest(
    server: GatewayProcess, out: Path, *args: str, seconds: int = RUN_SECONDS
) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "gateway.tools.loadtest_command",
        "--http-port", str(server.http_port), "--grpc-port", str(server.grpc_port),
        "--users", "2", "--run-time", f"{seconds}s", "--output-dir", str(out), *args,
    ]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 60)


def stats(out: Path) -> dict[str, tuple[int, int]]:
    """Request name -> (requests, failures), from Locust's CSV (without the Aggregated row)."""
    with open(out / "locust_stats.csv", newline="") as file:
        return {
            f"{row['Type']} {row['Name']}": (int(row["Request Count"]), int(row["Failure Count"]))
            for row in csv.DictReader(file)
            if row["Name"] != "Aggregated"
        }


def assert_clean_run(result: subprocess.CompletedProcess, out: Path, names: set[str]) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    rows = stats(out)
    assert set(rows) == names, output
    for name, (requests, failures) in rows.items():
        assert requests > 0, f"{name}: no requests\n{output}"
        assert failures == 0, f"{name}: {failures} failures\n{output}"
    assert (out / "report.html").stat().st_size > 0


def test_http_binary_user(small_gateway, tmp_path):
    result = loadtest(small_gateway, tmp_path, "--protocol", "http", "--model", "simple")
    assert_clean_run(result, tmp_path, {"POST /v2/models/simple/infer"})
    assert "0 failed" in result.stdout


def test_http_json_user(small_gateway, tmp_path):
    result = loadtest(
        small_gateway,
        tmp_path,
        *("--protocol", "http", "--json", "--model", "mlp,identity_bytes", "--batch-size", "2"),
    )
    assert_clean_run(
        result,
        tmp_path,
        {"POST /v2/models/mlp/infer", "POST /v2/models/identity_bytes/infer"},
    )


def test_grpc_user(small_gateway, tmp_path):
    result = loadtest(small_gateway, tmp_path, "--protocol", "grpc", "--model", "simple")
    assert_clean_run(result, tmp_path, {"grpc ModelInfer simple"})


def test_mixed_scenario_over_models_and_protocols(small_gateway, tmp_path):
    result = loadtest(
        small_gateway,
        tmp_path,
        *("--protocol", "both", "--users", "4", "--model", "simple:1,mlp:2,identity_fp32:1"),
        *("--batch-size", "4", "--dim-value", "8"),
    )
    models = ("simple", "mlp", "identity_fp32")
    assert_clean_run(
        result,
        tmp_path,
        {f"POST /v2/models/{m}/infer" for m in models} | {f"grpc ModelInfer {m}" for m in models},
    )


def test_data_file_inputs(small_gateway, tmp_path):
    data = tmp_path / "inputs.npz"
    np.savez(data, INPUT0=np.ones((3, 16), np.int32), INPUT1=np.arange(48).reshape(3, 16))
    out = tmp_path / "out"
    result = loadtest(
        small_gateway, out, "--protocol", "both", "--model", "simple", "--data-file", str(data)
    )
    assert_clean_run(result, out, {"POST /v2/models/simple/infer", "grpc ModelInfer simple"})


def test_failed_requests_give_a_nonzero_exit(small_gateway, tmp_path):
    # mlp's max_batch_size is 64: every request is refused (400 / INVALID_ARGUMENT).
    result = loadtest(
        small_gateway,
        tmp_path,
        *("--protocol", "both", "--model", "mlp", "--batch-size", "100"),
        seconds=2,
    )
    assert result.returncode != 0
    rows = stats(tmp_path)
    assert rows["POST /v2/models/mlp/infer"][1] > 0
    assert rows["grpc ModelInfer mlp"][1] > 0
    assert "FAILED" in result.stdout


def test_unknown_model_fails(small_gateway, tmp_path):
    result = loadtest(small_gateway, tmp_path, "--protocol", "both", "--model", "nosuch", seconds=1)
    assert result.returncode != 0
    assert "Request for unknown model: 'nosuch' is not found" in result.stdout + result.stderr


@pytest.mark.parametrize("host", ["10.0.0.1", "example.com", "0.0.0.0", "192.168.1.2"])
def test_refuses_non_loopback_hosts(host, capsys):
    assert main(["--host", host, "--run-time", "1s"]) == 2
    assert "only loopback hosts" in capsys.readouterr().err


def test_no_gateway_running(capsys):
    from gateway.launch import free_port

    assert main(["--http-port", str(free_port()), "--run-time", "1s"]) == 2
    assert "no gateway ready" in capsys.readouterr().err


def test_loopback_and_run_time_parsing():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"))
    assert parse_run_time("90") == 90
    assert parse_run_time("1m30s") == 90
    assert parse_run_time("2h") == 7200
    for bad in ("", "0s", "5x", "m", "10s5"):
        with pytest.raises(Exception, match="expected|at least"):
            parse_run_time(bad)


def test_inputs_from_metadata(inputs_module):
    metadata = {
        "name": "m",
        "inputs": [
            {"name": "A", "datatype": "FP32", "shape": [-1, 3, -1]},
            {"name": "B", "datatype": "BYTES", "shape": [-1, 2]},
            {"name": "C", "datatype": "BF16", "shape": [4]},
        ],
        "outputs": [{"name": "Y", "datatype": "FP32", "shape": [-1]}],
    }
    first = inputs_module.build_inputs(metadata, batch_size=2, dim_value=5, seed=7)
    again = inputs_module.build_inputs(metadata, batch_size=2, dim_value=5, seed=7)
    assert [t.shape for t in first.inputs] == [(2, 3, 5), (2, 2), (4,)]
    assert [t.array.dtype for t in first.inputs] == [np.float32, object, np.uint16]
    for a, b in zip(first.inputs, again.inputs, strict=True):
        assert a.raw == b.raw  # a fixed seed: the same data every run
    body, header_length = inputs_module.http_binary_body(first)
    header = json.loads(body[:header_length])
    sizes = [entry["parameters"]["binary_data_size"] for entry in header["inputs"]]
    assert sizes == [2 * 3 * 5 * 4, len(first.inputs[1].raw), 4 * 2]
    assert len(body) == header_length + sum(sizes)
    assert header["outputs"] == [{"name": "Y", "parameters": {"binary_data": True}}]


def test_inputs_from_data_file(inputs_module, tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"m/A": [[1, 2]], "A": [[9, 9, 9]], "B": ["x", "yz"]}))
    data = inputs_module.load_data_file(path)
    metadata = {
        "name": "m",
        "inputs": [
            {"name": "A", "datatype": "INT64", "shape": [-1, -1]},
            {"name": "B", "datatype": "BYTES", "shape": [-1]},
        ],
    }
    built = inputs_module.build_inputs(metadata, data=data)
    assert built.inputs[0].array.tolist() == [[1, 2]]  # model/input beats input
    assert built.inputs[0].array.dtype == np.int64
    assert built.inputs[1].array.tolist() == [b"x", b"yz"]
    assert inputs_module.parse_models("a, b:3") == [("a", 1.0), ("b", 3.0)]
    with pytest.raises(ValueError):
        inputs_module.parse_models("a:0")
