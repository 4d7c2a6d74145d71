"""The environment a worker process starts with: settings that are process-wide in the
frameworks (device visibility, thread pools, allocators) become per instance.

They must be in place before the framework is imported, hence environment variables
set at spawn rather than calls made inside the worker.
"""

from __future__ import annotations

import os
from pathlib import Path

from accel_base.cpu import usable_cores
from accel_base.logs import FORMAT_VARIABLE, logs_json
from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from backends.parameters import string_parameter

# Allocators that grow on demand instead of taking (nearly) all of a GPU at start, so
# that several workers can share one GPU.
_ALLOCATOR_SETTINGS = {
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}
# Pool sizes read at start by OpenMP, MKL, OpenBLAS and TVM (which falls back on OpenMP's).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def worker_environment(
    config: mc.ModelConfig, device: Device, parent_pid: int, base: dict[str, str] | None = None
) -> tuple[dict[str, str], Device]:
    """The worker's environment and the device as the worker will see it.

    A GPU instance sees only its own GPU (which it then calls GPU 0); a CPU instance sees
    none, so a framework cannot take GPU memory for a model meant for the CPU.
    """
    env = dict(os.environ if base is None else base)
    # The worker imports workers/, backends/ and accel_base/ from this tree.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["ACCEL_GATEWAY_PARENT_PID"] = str(parent_pid)
    # Its lines in the format the gateway logs in now (JSON lines among JSON lines).
    if logs_json():
        env[FORMAT_VARIABLE] = "json"
    else:
        env.pop(FORMAT_VARIABLE, None)
    for key, value in _ALLOCATOR_SETTINGS.items():
        env.setdefault(key, value)
    if device.kind == "gpu":
        visible = env.get("CUDA_VISIBLE_DEVICES")
        # Indexes are the gateway's view, which CUDA_VISIBLE_DEVICES may already narrow.
        entries = [e.strip() for e in visible.split(",")] if visible else None
        env["CUDA_VISIBLE_DEVICES"] = entries[device.index] if entries else str(device.index)
        worker_device = Device("gpu", 0)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        worker_device = device
    # The config's count (ONNX Runtime's key, or PyTorch's), else the gateway's own
    # variable, else the cores the worker may use (it inherits the affinity and cgroup).
    threads = _configured_threads(config)
    cores = str(usable_cores())
    for key in _THREAD_VARIABLES:
        env[key] = threads or env.get(key) or cores
    return env, worker_device


def _configured_threads(config: mc.ModelConfig) -> str | None:
    for key in ("intra_op_thread_count", "INTRA_OP_THREAD_COUNT"):
        threads = (string_parameter(config, key) or "").strip()
        if threads.isdigit() and int(threads) > 0:
            return threads
    return None
