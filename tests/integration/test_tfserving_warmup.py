"""TF Serving's warm-up records (assets.extra/tf_serving_warmup_requests) replayed before
a version serves, on a real `accel-gateway tensorflow-model-server` process: a model
that counts its runs answers its first request with the records' runs counted."""

from __future__ import annotations

import httpx
import pytest

tf = pytest.importorskip("tensorflow")

from models.tfserving.savedmodels import build_counting, model_config_file  # noqa: E402
from tests.integration.tfserving_server import start_tfserving  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tfs-warmup")
    bases = {
        "counting": build_counting(tmp / "counting", 1, warmup=3),
        "broken": build_counting(tmp / "broken", 1, warmup=1, warmup_input="nope"),
    }
    config = model_config_file(tmp / "models.config", bases)
    server, url, _ = start_tfserving(tmp, "counting", f"--model_config_file={config}",
                                     "--num_request_iterations_for_warmup=2")  # fmt: skip
    yield httpx.Client(base_url=url, timeout=60)
    server.terminate()
    server.wait(60)


def test_the_records_run_before_the_version_serves(served) -> None:
    answer = served.post("/v1/models/counting:predict", json={"instances": [1.5]}).json()
    # Three records, each run twice; the gateway's own batch of zeros, which every
    # model runs once as it loads (gateway/core/placement/warm_up.py); then this request.
    assert answer == {"predictions": [{"y": 3.0, "calls": 8}]}


def test_a_record_that_fails_fails_its_version(served) -> None:
    (status,) = served.get("/v1/models/broken").json()["model_version_status"]
    assert status["state"] == "END"
    assert "warm-up request 0 has inputs ['nope']" in status["status"]["error_message"]
