"""Triton's rate limiter through the unmodified tritonclient: two models whose instances
share one unit of a resource never run at once; without the limiter they do."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

PY_INTERVAL = Path(__file__).parent / "python_models" / "py_interval"


def two_models(tmp_path: Path) -> Path:
    repository = tmp_path / "repository"
    for name in ("first", "second"):
        shutil.copytree(PY_INTERVAL, repository / name)
        config = repository / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "py_interval"', f'name: "{name}"'))
    return repository


def intervals(server, rounds: int = 3) -> list[tuple[float, float]]:
    """When each of 2 x `rounds` requests ran, sent to both models at once."""

    def call(model: str) -> tuple[float, float]:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
        start, end = client.infer(model, [tensor]).as_numpy("RAN")[0]
        return float(start), float(end)

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(call, ["first", "second"] * rounds))


def overlapping(ran: list[tuple[float, float]]) -> int:
    ran = sorted(ran)
    return sum(1 for a, b in zip(ran, ran[1:], strict=False) if b[0] < a[1])


def test_two_models_sharing_one_unit_never_run_at_once(tmp_path, server_factory):
    repository = two_models(tmp_path)
    server = server_factory(repository, "--rate-limit", "execution_count")
    ran = intervals(server)
    assert len(ran) == 6 and overlapping(ran) == 0, ran
    # Two units declared: both run at once again
    both = server_factory(
        repository, "--rate-limit", "execution_count", "--rate-limit-resource", "R:2"
    )
    assert overlapping(intervals(both)) > 0


def test_without_the_limiter_they_run_at_once(tmp_path, server_factory):
    server = server_factory(two_models(tmp_path))  # --rate-limit off, as Triton's default
    assert overlapping(intervals(server)) > 0


def test_an_instance_needing_more_than_declared_fails_its_load(tmp_path, server_factory):
    repository = two_models(tmp_path)
    config = repository / "first" / "config.pbtxt"
    config.write_text(
        config.read_text().replace("global: true, count: 1", "global: true, count: 3")
    )
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--rate-limit", "execution_count",
        "--rate-limit-resource", "R:2",
    )  # fmt: skip
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="needs 3 units of rate-limit resource 'R'"):
        client.load_model("first")
    client.load_model("second")
    assert client.is_model_ready("second") and not client.is_model_ready("first")
