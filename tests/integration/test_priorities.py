"""Priority levels under a flood, through the unmodified tritonclient: a high-priority
request sent behind a queue of low-priority ones runs next, over HTTP and gRPC."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from test_batching import pending

from tests.conftest import wait_until

PY_INTERVAL = Path(__file__).parent / "python_models" / "py_interval"
FLOOD = 8


def ran(server, protocol: str, priority: int = 0) -> float:
    """When a request to `slow` started running (the model's clock)."""
    mod = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = mod.InferenceServerClient(url)
    tensor = mod.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    return float(client.infer("slow", [tensor], priority=priority).as_numpy("RAN")[0, 0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_high_priority_request_runs_before_a_queued_low_priority_flood(
    tmp_path, server_factory, protocol
):
    repository = tmp_path / "repository"
    shutil.copytree(PY_INTERVAL, repository / "slow")
    config = repository / "slow" / "config.pbtxt"
    text = config.read_text().replace('name: "py_interval"', 'name: "slow"')
    text = text.replace("max_batch_size: 4", "max_batch_size: 1")  # one request a run
    config.write_text(text + "dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n")
    server = server_factory(repository)
    with ThreadPoolExecutor(FLOOD) as pool:
        flood = [pool.submit(ran, server, "http") for _ in range(FLOOD)]  # the default: 2
        wait_until(lambda: pending(server, "slow") == FLOOD, 30, "the flood queued")
        urgent = ran(server, protocol, priority=1)
        starts = sorted(f.result() for f in flood)
    # At most the run in progress (and one the driver had already taken) went before it
    assert sum(start < urgent for start in starts) <= 2, (urgent, starts)
    assert urgent < starts[-1]
