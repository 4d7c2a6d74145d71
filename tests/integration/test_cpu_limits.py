"""CPU limits are honoured: a gateway pinned to core 0 keeps every thread, its own and its
workers', on core 0, ONNX Runtime's pool included; and a cgroup CPU quota sizes the pool."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models.mlp import INPUT, N_FEATURES, OUTPUT, write_mlp

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="CPU affinity is Linux's")


def threads_of(pid: int) -> dict[str, tuple[str, int]]:
    """Thread id -> (the cores it may run on, the core it last ran on)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            status = (task / "status").read_text()
            allowed = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M).group(1)
            # Field 39 of stat, counted after the command name, which may hold spaces.
            processor = int((task / "stat").read_text().rsplit(")", 1)[1].split()[36])
            found[task.name] = (allowed, processor)
    return found


def workers_of(pid: int) -> list[int]:
    """The worker processes the gateway `pid` started (from whichever of its threads)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            for child in (task / "children").read_text().split():
                if b"workers.main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(int(child))
    return found


def test_a_pinned_gateway_and_its_workers_stay_on_their_core(tmp_path, server_factory):
    repository = tmp_path / "repository"
    for name in ("mlp_thread", "mlp_process"):
        write_mlp(repository, name, 256, dynamic_batching=False)
    with open(repository / "mlp_process" / "config.pbtxt", "a") as config:
        config.write('parameters { key: "execution" value { string_value: "process" } }\n')
    server = server_factory(repository, cpu_cores={0})

    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput(INPUT, [8, N_FEATURES], "FP32")
    tensor.set_data_from_numpy(np.random.default_rng(0).random((8, N_FEATURES), np.float32))
    served = {"mlp_thread": 0, "mlp_process": 0}
    deadline = time.monotonic() + 60
    while min(served.values()) < 20 and time.monotonic() < deadline:
        for name in served:
            try:
                assert client.infer(name, [tensor]).as_numpy(OUTPUT).shape == (8, 10)
                served[name] += 1
            except InferenceServerException as exc:
                # A pinned gateway sheds load while other work holds its one core.
                assert exc.status() == "503", exc
                time.sleep(0.05)
    assert min(served.values()) >= 20, served

    (worker,) = workers_of(server.process.pid)
    for pid in (server.process.pid, worker):
        threads = threads_of(pid)
        elsewhere = {tid: place for tid, place in threads.items() if place != ("0", 0)}
        assert not elsewhere, f"threads of {pid} allowed or run beyond core 0: {elsewhere}"
    for name in ("mlp_thread", "mlp_process"):
        assert re.search(f"model '{name}' .*onnxruntime threads: 1 intra-op", server.log())
    if "OMP_NUM_THREADS" not in os.environ:  # else the worker keeps the user's own
        assert b"OMP_NUM_THREADS=1" in Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")


@contextlib.contextmanager
def cpu_quota(cores: int) -> Iterator[Path]:
    """A new cgroup (v2, else v1) whose CPU quota is `cores` CPUs; yields its procs file."""
    name = f"accel-gateway-test-{os.getpid()}"
    v2, v1 = "/", None  # this process's cgroup in each hierarchy
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    v2_parent = Path("/sys/fs/cgroup") / v2.lstrip("/")
    v2_controllers = v2_parent / "cgroup.controllers"  # absent where v1 has the controllers
    group = None
    try:
        if v2_controllers.exists() and "cpu" in v2_controllers.read_text().split():
            group = v2_parent / name
            group.mkdir()
            if not (group / "cpu.max").exists():  # the parent must hand the controller down
                (v2_parent / "cgroup.subtree_control").write_text("+cpu")
            (group / "cpu.max").write_text(f"{cores * 100000} 100000")
        elif v1 is not None:
            group = Path("/sys/fs/cgroup/cpu") / v1.lstrip("/") / name
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text(str(cores * 100000))
        else:
            pytest.skip("no cgroup CPU controller here (neither v2 cpu.max nor v1 cpu)")
    except OSError as exc:
        if group is not None:
            with contextlib.suppress(OSError):
                group.rmdir()
        pytest.skip(f"cannot create a cgroup with a CPU quota here: {exc}")
    try:
        yield group / "cgroup.procs"
    finally:
        group.rmdir()


# Loads the MLP into ONNX Runtime with no thread settings, runs it, and reports how many
# threads the session added (ORT's intra-op pool has the count minus one, the caller).
PROBE = """
import json, os, sys
from pathlib import Path
import numpy as np
from accel_base.cpu import usable_cores
from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from backends.onnx_runtime import OnnxRuntimeBackend
before = len(os.listdir("/proc/self/task"))
backend = OnnxRuntimeBackend(Path(sys.argv[1]), mc.ModelConfig(name="mlp"), Device("cpu"))
for _ in range(20):
    backend.run({"INPUT0": np.ones((64, 784), np.float32)}, ["OUTPUT0"])
print(json.dumps({"usable": usable_cores(), "added": len(os.listdir("/proc/self/task")) - before}))
"""


def test_a_cpu_quota_sizes_onnx_runtimes_pool(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: a quota of one CPU cannot be told from the affinity")
    write_mlp(tmp_path, "mlp", 256, dynamic_batching=False)
    with cpu_quota(1) as procs:
        result = subprocess.run(
            [sys.executable, "-c", PROBE, str(tmp_path / "mlp" / "1" / "model.onnx")],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: procs.write_text(str(os.getpid())),  # into the cgroup
        )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"usable": 1, "added": 0}
