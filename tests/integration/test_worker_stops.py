"""A clean stop of a gateway with worker processes is clean: no framework's multiprocessing
objects left for Python's resource tracker to report as leaked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from test_workers import alive, wait_for

from models.digits import held_out

# Both compile through tinygrad's pool of processes (multiprocessing, spawned by the worker)
# when its kernel cache is cold.
OPENCL_MODELS = ("digits_opencl", "mlp_opencl")


def descendants(root: int) -> dict[int, str]:
    """Pid -> command line of every process below `root`."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[int(entry.name)] = argv.replace(b"\0", b" ").decode(errors="replace")
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = commands[pid]
                frontier.append(pid)
    return found


def test_sigterm_leaves_no_leaked_semaphores(
    repository_copy, server_factory, example_build, tmp_path
):
    missing = [name for name in OPENCL_MODELS if name not in example_build.names]
    if missing:
        pytest.skip(f"{', '.join(missing)} not built here (tinygrad or OpenCL missing)")
    # A cold kernel cache of its own, so that the workers compile, and so start their pools.
    cold = tmp_path / "cold-cache"
    server = server_factory(repository_copy(*OPENCL_MODELS), env={"XDG_CACHE_HOME": str(cold)})
    client = httpclient.InferenceServerClient(server.http_url)
    images = held_out()[0][:4]
    tensor = httpclient.InferInput("pixels", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    assert client.infer("digits_opencl", [tensor]).as_numpy("probabilities").shape == (4, 10)
    mlp = httpclient.InferInput("INPUT0", [1, 784], "FP32")
    mlp.set_data_from_numpy(np.zeros((1, 784), np.float32))
    client.infer("mlp_opencl", [mlp])
    client.close()
    below = descendants(server.process.pid)
    trackers = [pid for pid, command in below.items() if "resource_tracker" in command]
    # Without them the test would prove nothing: the pools' semaphores are what leaked.
    assert trackers, f"no worker started a multiprocessing pool: {sorted(below.values())}"
    assert server.stop() == 0
    # The trackers report at their own end, which may come after the gateway's.
    wait_for(lambda: not any(alive(pid) for pid in below), timeout_s=30, what="every child to end")
    lines = [line for line in server.log().splitlines() if "leaked" in line]
    assert not lines, "\n".join(lines)
