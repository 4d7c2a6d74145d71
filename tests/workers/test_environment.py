"""A worker's environment: its device, threads and allocator settings, set before start."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from accel_base.cpu import usable_cores
from accel_base.logs import FORMAT_VARIABLE, JsonFormatter
from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from workers.environment import worker_environment

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def config(**parameters: str) -> mc.ModelConfig:
    result = mc.ModelConfig(name="m")
    for key, value in parameters.items():
        result.parameters[key].string_value = value
    return result


def test_a_gpu_instance_sees_only_its_gpu_as_gpu_0():
    env, device = worker_environment(config(), Device("gpu", 1), 1, base={})
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert device == Device("gpu", 0)
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


def test_gpu_indexes_follow_the_gateways_own_visible_devices():
    base = {"CUDA_VISIBLE_DEVICES": "2,3"}
    env, _ = worker_environment(config(), Device("gpu", 1), 1, base=base)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"


def test_a_cpu_instance_sees_no_gpu_and_keeps_user_allocator_settings():
    base = {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}
    env, device = worker_environment(config(), Device("cpu"), 42, base=base)
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert device == Device("cpu")
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    assert env["ACCEL_GATEWAY_PARENT_PID"] == "42"


def test_thread_counts_come_from_the_config():
    env, _ = worker_environment(config(intra_op_thread_count="3"), Device("cpu"), 1, base={})
    assert env["OMP_NUM_THREADS"] == "3"


def test_thread_counts_default_to_the_usable_cores_and_keep_the_users_own():
    cores = str(usable_cores())
    env, _ = worker_environment(config(), Device("cpu"), 1, base={})
    assert [env[key] for key in THREAD_VARIABLES] == [cores] * 3
    env, _ = worker_environment(config(intra_op_thread_count="0"), Device("cpu"), 1, base={})
    assert env["OMP_NUM_THREADS"] == cores
    env, _ = worker_environment(config(), Device("cpu"), 1, base={"OMP_NUM_THREADS": "7"})
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("7", cores)
    torch_count = config(INTRA_OP_THREAD_COUNT="2")
    env, _ = worker_environment(torch_count, Device("cpu"), 1, base={"OMP_NUM_THREADS": "7"})
    assert [env[key] for key in THREAD_VARIABLES] == ["2"] * 3


def test_a_worker_logs_json_lines_where_its_parent_does():
    root = logging.getLogger()
    handler = logging.StreamHandler()
    root.addHandler(handler)
    try:
        env, _ = worker_environment(config(), Device("cpu"), 1, base={FORMAT_VARIABLE: "x"})
        assert FORMAT_VARIABLE not in env  # the parent logs text: so does the worker
        handler.setFormatter(JsonFormatter())
        env, _ = worker_environment(config(), Device("cpu"), 1, base={})
        assert env[FORMAT_VARIABLE] == "json"
    finally:
        root.removeHandler(handler)
    # The worker's own start, in a process of its own: every line JSON, naming it.
    code = (
        "import logging; from workers.main import _name_in_logs; "
        "logging.basicConfig(level=logging.INFO); _name_in_logs('w1'); "
        "logging.getLogger('accel_gateway.worker').warning('loaded')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert [(e["worker"], e["level"], e["message"]) for e in lines] == [("w1", "WARNING", "loaded")]
