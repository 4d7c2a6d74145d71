"""Where a model's instances run, as its config says: threads of the gateway, or worker
processes, and the settings of those workers.

Config parameters (ModelConfig.parameters, string values as Triton has them):
    execution               "process" or "thread"; the default is below
    worker_run_timeout_s    a batch running longer means a hung worker: it is killed
    worker_max_restarts     crashes in a row before a worker is no longer restarted
    worker_load_timeout_s   a worker that has not loaded its model by then is killed
    worker_restart_wait_s   how long a request waits for a restarting worker before a 503
                            (0: a 503 at once); scheduling/restarts.py

Default: a thread for ONNX Runtime on the CPU and for a remote model (which only waits
on the network), a worker process for everything else; a Python model (a user's own
code) always gets a process.
ONNX Runtime keeps no process-wide state that models fight over and releases the GIL,
and a thread saves the hand-off to another process on every batch (measured in
benchmarks/workers.py); every framework with process-wide settings or allocators
(PyTorch threads, TensorFlow, JAX, TVM's and tinygrad's pools) and every GPU instance
gets a process of its own.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_base import call_wire
from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from backends import backend_class, platform_info
from backends.base import Device
from backends.parameters import string_parameter
from workers.client import LoadedModel, WorkerProcess
from workers.environment import worker_environment

log = logging.getLogger(__name__)

EXECUTION_MODES = ("process", "thread")


def process_only(platform: str) -> bool:
    """A user's own code: its crash, exit or leak must end only its own process."""
    return platform_info(platform).execution == "process only"


def thread_by_default(platform: str) -> bool:
    return platform_info(platform).execution == "thread"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    run_timeout_s: float = 120.0  # a batch that takes longer is a hung worker
    max_restarts: int = 5  # crashes in a row (no successful batch between) before giving up
    load_timeout_s: float = 600.0  # compiling backends (TVM, torch.compile) load slowly
    first_backoff_s: float = 0.1
    # Under half of a common 10 s client timeout: a restart that takes longer is answered
    # with a 503 and Retry-After that the client has time to act on.
    restart_wait_s: float = 5.0
    nice: int = 0  # steps below the gateway's priority (--backend-nice; accel_base/cpu.py)
    spares: Any = None  # scheduling.spares.SpareWorkers, on demand
    model_calls: str | None = None  # the socket a Python model calls other models on


def _parameter(config: mc.ModelConfig, key: str) -> str | None:
    value = string_parameter(config, key)
    return value.strip() if value is not None else None


def execution_mode(config: mc.ModelConfig, platform: str, device: Device) -> str:
    chosen = _parameter(config, "execution")
    if process_only(platform):
        if chosen not in (None, "process"):
            raise InvalidArgument(
                f"model '{config.name}': a {platform} model runs its own code and always "
                "runs in a worker process; remove the parameter execution"
            )
        return "process"
    if chosen is not None:
        if chosen not in EXECUTION_MODES:
            raise InvalidArgument(
                f"model '{config.name}': parameter execution is '{chosen}', expected "
                f"one of {', '.join(EXECUTION_MODES)}"
            )
        return chosen
    if device.kind == "cpu" and thread_by_default(platform):
        return "thread"
    return "process"


def _number(
    config: mc.ModelConfig, key: str, default: float, integer: bool, zero: bool = False
) -> float:
    text = _parameter(config, key)
    if text is None:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = -1
    if value < 0 or (not integer and ((value == 0 and not zero) or not math.isfinite(value))):
        if integer:
            kind = "a non-negative integer"
        else:
            kind = "a number of seconds, 0 or more" if zero else "a positive number of seconds"
        raise InvalidArgument(
            f"model '{config.name}': parameter {key} must be {kind}, not {text!r}"
        )
    return value


def worker_settings(config: mc.ModelConfig) -> WorkerSettings:
    defaults = WorkerSettings()
    return WorkerSettings(
        run_timeout_s=_number(config, "worker_run_timeout_s", defaults.run_timeout_s, False),
        max_restarts=int(_number(config, "worker_max_restarts", defaults.max_restarts, True)),
        load_timeout_s=_number(config, "worker_load_timeout_s", defaults.load_timeout_s, False),
        restart_wait_s=_number(
            config, "worker_restart_wait_s", defaults.restart_wait_s, False, zero=True
        ),
    )


def spawn_worker(
    name: str,
    platform: str,
    artifact: Path,
    config: mc.ModelConfig,
    device: Device,
    settings: WorkerSettings,
    parent_pid: int,
    started: Callable[[WorkerProcess], None],
) -> tuple[WorkerProcess, LoadedModel]:
    """Start a worker and load the model into it (blocking); `started` learns of the
    worker before its load, so that an unload meanwhile can kill it."""
    env, worker_device = worker_environment(config, device, parent_pid)
    if settings.model_calls is not None:  # backends/python/model_calls.py
        env[call_wire.PATH_VARIABLE] = settings.model_calls
    if settings.spares is not None:
        worker = settings.spares.take(name, env, settings.nice, platform, device)
        worker.name = name
    else:
        worker = WorkerProcess(name, env, settings.nice)
    started(worker)
    try:
        return worker, worker.load(
            platform, artifact, config, worker_device, settings.load_timeout_s
        )
    except BaseException:
        worker.kill()
        worker.close()
        raise


def gpu_capable(config: mc.ModelConfig, platform: str, gpus: int) -> bool:
    """Whether the platform's framework, as installed, can use this machine's GPUs.

    Asked without importing the framework into the gateway where its instances will
    run in workers (JAX, for one, takes most of a GPU's memory when it first looks).
    """
    if gpus == 0:
        return False
    if _parameter(config, "execution") != "process" and thread_by_default(platform):
        return backend_class(platform).gpu_capable()
    return _probe_gpu(platform)


@functools.cache
def _probe_gpu(platform: str) -> bool:
    env, _ = worker_environment(mc.ModelConfig(), Device("gpu", 0), os.getpid())
    env.pop("CUDA_VISIBLE_DEVICES")  # the probe may look at every GPU
    code = (
        "import sys; from backends import backend_class as b; print(b(sys.argv[1]).gpu_capable())"
    )
    try:
        result = subprocess.run(
            [sys.executable, "-c", code, platform], env=env, capture_output=True, text=True,
            timeout=300, check=True,
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError) as exc:
        log.warning("could not tell whether %s can use the GPUs (%s); using the CPU", platform, exc)
        return False
    return result.stdout.strip().endswith("True")
