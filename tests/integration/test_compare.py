"""`accel-gateway compare` end to end on the example digits variants: in process and
against a server (HTTP and gRPC), the JSON's structure and figures, and the HTML
report drawn by headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.digits import write_held_out

EAGER, ONNX, SKLEARN = "digits_torch_export", "digits_torch_onnx", "digits"
BOUNDS = ["--batch-sizes", "1", "8", "--concurrency", "1", "2", "--requests", "150",
          "--seconds", "1", "--min-samples", "20"]  # fmt: skip
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def compare(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "compare", *args, *BOUNDS,
         "--json", str(out / "report.json"), "--html", str(out / "report.html")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fastest agreeing variant" in result.stdout or "no agreeing variant" in result.stdout
    return json.loads((out / "report.json").read_text())


def check_report(report: dict, names: list[str], labelled: bool) -> None:
    assert [v["name"] for v in report["variants"]] == names
    assert report["settings"]["batch_sizes"] == [1, 8]
    for variant in report["variants"]:
        assert set(variant["agreement"]) == {"1", "8"}
        assert [(p["batch_size"], p["concurrency"]) for p in variant["points"]] == [
            (1, 1), (1, 2), (8, 1), (8, 2)]  # fmt: skip
        for point in variant["points"]:
            assert 0 < point["requests"] <= 150 and point["seconds"] < 5
            assert point["p50_ms"] <= point["p90_ms"] <= point["p99_ms"]
            assert point["rows_per_s"] > 0 and point["latency_ms"]
        assert variant["first_call_ms"] > 0
        assert (variant["accuracy"] is not None) == labelled
    reference, same = report["variants"][0], report["variants"][1]
    assert reference["agreement"]["1"]["within_tolerance"] == 1.0 and reference["agrees"]
    # Eager PyTorch and ONNX Runtime run one trained network: they agree, row by row.
    assert same["agrees"] and same["agreement"]["8"]["top1"] == 1.0
    assert same["agreement"]["8"]["max_abs_error"] < 1e-4
    assert same["speedup"] > 0 and same["speedup_counted"]


def test_in_process_with_labelled_data(tmp_path, repository_copy):
    repository = repository_copy(EAGER, ONNX, SKLEARN)
    data = write_held_out(tmp_path / "digits.npz")
    report = compare(tmp_path, EAGER, ONNX, SKLEARN, "--model-repository", str(repository),
                     "--data", str(data))  # fmt: skip
    check_report(report, [EAGER, ONNX, SKLEARN], labelled=True)
    assert report["mode"] == "in-process" and report["samples"] == 450
    eager, onnx, sklearn = report["variants"]
    assert eager["accuracy"] > 0.9 and onnx["accuracy"] == eager["accuracy"]
    assert eager["load_s"] > 0 and eager["memory_bytes"] > 0
    # scikit-learn's network is another one: it does not agree, its speed is not a win.
    assert not sklearn["agrees"] and not sklearn["speedup_counted"]
    assert sklearn["agreement"]["1"]["top1"] < 0.99
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("<svg") == 4 + 2 + 1 and "<script" not in page
    render_in_chromium(tmp_path / "out" / "report.html", tmp_path / "shot.png")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_against_a_running_gateway(tmp_path, gateway, protocol):
    url = gateway.http_url if protocol == "http" else gateway.grpc_url
    report = compare(tmp_path, EAGER, ONNX, "--url", url, "--protocol", protocol, "--seed", "1")
    check_report(report, [EAGER, ONNX], labelled=False)
    assert report["mode"] == protocol and report["data"] == "generated (seed 1)"
    assert all(v["load_s"] is None for v in report["variants"])  # no --reload
    memory = [v["memory_bytes"] for v in report["variants"]]
    assert all(m > 0 for m in memory) if protocol == "http" else memory == [None, None]


def test_mismatched_variants_and_bad_data_fail_with_a_message(tmp_path, gateway):
    mismatch = subprocess.run(
        [sys.executable, "-m", "gateway", "compare", EAGER, "simple", "--url", gateway.http_url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert mismatch.returncode == 1
    assert "'simple' does not take and give the same tensors as 'digits_torch_export'" in (
        mismatch.stderr
    )
    np.savez(tmp_path / "bad.npz", pixels=np.ones((4, 63), np.float32))
    bad = subprocess.run(
        [sys.executable, "-m", "gateway", "compare", EAGER, ONNX, "--url", gateway.http_url,
         "--data", str(tmp_path / "bad.npz")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 1 and "'pixels': a sample is shaped [63]" in bad.stderr


def render_in_chromium(page: Path, shot: Path) -> None:
    """Headless Chromium draws the report; the plots' lines must show in the picture."""
    if CHROMIUM is None:
        message = "chromium is not installed; scripts/install test installs it (Debian)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from PIL import Image

    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    for colour in ("#1f77b4", "#d62728", "#2ca02c"):  # the three variants' colours
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        drawn = int((np.abs(pixels - rgb).sum(axis=1) < 60).sum())
        # Legend squares alone make 100 pixels a plot; lines make far more.
        assert drawn > 2000, f"{colour}: {drawn} pixels"
