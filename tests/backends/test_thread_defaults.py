"""Each framework's thread pools start from the usable cores, not the machine's: checked
in a real process pinned to core 0 (as `taskset -c 0` pins it), loading a real model."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.mixed_precision import SAVEDMODEL, TORCHSCRIPT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="CPU affinity is Linux's")


def on_core_0(code: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """The lines `code` (or the script it names) prints, run by a fresh interpreter pinned
    to core 0."""
    command = [code] if code.endswith(".py") else ["-c", code]
    result = subprocess.run(
        [sys.executable, *command, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.splitlines()


def without_thread_variables() -> dict[str, str]:
    names = ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "TVM_BIND_THREADS")
    return {key: value for key, value in os.environ.items() if key not in names}


def example(repository: Path, name: str) -> str:
    if not (repository / name).is_dir():
        pytest.skip(f"{name} is not in the example repository (its framework is missing)")
    return str(repository / name)


def test_torch_pools_follow_the_affinity(example_repository):
    code = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from backends.base import Device\n"
        "from backends.torchscript import TorchScriptBackend\n"
        "from gateway.core.model_config import read_config\n"
        "model = Path(sys.argv[1])\n"
        "TorchScriptBackend(model / '1' / 'model.pt', read_config(model), Device('cpu'))\n"
        "print(torch.get_num_threads(), torch.get_num_interop_threads())\n"
    )
    # Torch's own inter-op default is the machine's core count, whatever the affinity.
    model = example(example_repository, TORCHSCRIPT)
    assert on_core_0(code, model, env=without_thread_variables())[-1] == "1 1"


def test_tensorflow_pools_follow_the_affinity(example_repository):
    code = (
        "import sys, tensorflow as tf\n"
        "from pathlib import Path\n"
        "from backends.base import Device\n"
        "from backends.tensorflow_savedmodel import SavedModelBackend\n"
        "from gateway.core.model_config import read_config\n"
        "model = Path(sys.argv[1])\n"
        "SavedModelBackend(model / '1' / 'model.savedmodel', read_config(model), Device('cpu'))\n"
        "threading = tf.config.threading\n"
        "print(threading.get_intra_op_parallelism_threads(),\n"
        "      threading.get_inter_op_parallelism_threads())\n"
    )
    model = example(example_repository, SAVEDMODEL)
    assert on_core_0(code, model)[-1] == "1 1"


# A TVM kernel with a parallel loop, run enough to start TVM's pool, after the backend
# module has set TVM's thread variables; prints the cores each thread may run on.
TVM_PARALLEL = """
import os
import numpy as np
import backends.tvm_backend
import tvm
from tvm.script import tirx as T

@T.prim_func
def double(a: T.Buffer((1 << 20,), "float32"), b: T.Buffer((1 << 20,), "float32")):
    for i in T.parallel(1 << 20):
        b[i] = a[i] * T.float32(2)

run = tvm.compile(tvm.IRModule({"main": double}), target="llvm")["main"]
a, b = (tvm.runtime.tensor(np.ones(1 << 20, np.float32)) for _ in range(2))
for _ in range(50):
    run(a, b)
for task in os.listdir("/proc/self/task"):
    status = open(f"/proc/self/task/{task}/status").read()
    print(next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list")))
print(len(os.listdir("/proc/self/task")), os.environ["TVM_NUM_THREADS"])
"""


@pytest.mark.skipif(not importlib.util.find_spec("tvm"), reason="TVM is not installed")
def test_tvm_pool_follows_the_affinity_and_pins_nothing(tmp_path):
    script = tmp_path / "parallel.py"  # TVMScript reads its source from a file
    script.write_text(TVM_PARALLEL)
    root = str(Path(__file__).resolve().parents[2])
    env = {**without_thread_variables(), "PYTHONPATH": root}
    assert on_core_0(str(script), env=env)[-1].split()[-1] == "1"  # TVM_NUM_THREADS
    # Two threads asked for on one core: TVM would pin its worker to the machine's core 1
    # and widen the caller to every core.
    lines = on_core_0(str(script), env={**env, "TVM_NUM_THREADS": "2"})
    assert lines[-1].split()[0] != "1", "TVM's pool did not start"
    assert set(lines[:-1]) == {"Cpus_allowed_list:\t0"}


@pytest.mark.skipif(not importlib.util.find_spec("tinygrad"), reason="tinygrad is not installed")
def test_pocl_threads_are_capped_by_the_usable_cores():
    # PoCL sizes its pool from the affinity alone, so a cgroup quota needs this cap.
    code = "import os, backends.opencl; print(os.environ['POCL_MAX_PTHREAD_COUNT'])"
    env = {k: v for k, v in os.environ.items() if k != "POCL_MAX_PTHREAD_COUNT"}
    assert on_core_0(code, env=env)[-1] == "1"
