"""TorchServe's description of a model's versions (`GET /models/{name}[/{version}|/all]`):
its settings from the model's config, and its workers as the core reports its instances
(a worker process's pid and resident memory). With `customized=true`, the handler's own
`describe_handle()` answer, asked as TorchServe asks it: a request whose `describe`
header is set."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from accel_base.errors import NotFound, Unavailable
from accel_base.proto import model_config_pb2 as mc
from backends.torchserve.store import read_config, workers_of
from gateway.core.interface import Core
from gateway.protocols.torchserve.inference import predict
from gateway.protocols.torchserve.models import TorchServeModels, version_not_found

PAGE = os.sysconf("SC_PAGE_SIZE")


def _resident_bytes(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        with open(f"/proc/{pid}/statm") as file:
            return int(file.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0  # it ended meanwhile


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return ""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{stamp}.{int(seconds * 1000) % 1000:03d}Z"


def _metadata(body: bytes) -> Any:
    """describe_handle()'s answer: JSON as TorchServe shows it, else its text."""
    text = body.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


async def _instances(core: Core, name: str, version: str) -> list[dict[str, Any]]:
    try:
        return await core.model_instances(name, version)
    except (NotFound, Unavailable):  # still loading, or failed to: no worker of it serves
        return []


async def describe_versions(
    core: Core, models: TorchServeModels, name: str, version: str, customized: bool
) -> list[dict[str, Any]]:
    versions = models.versions(name)
    if version == "all":
        chosen = list(versions)
    else:
        chosen = [version or models.default_version(name, versions)]
        if chosen[0] not in versions:
            raise version_not_found(name, chosen[0])
    config = read_config(models.repository / name)
    loaded = name in await core.loaded_models()
    workers = workers_of(config) if loaded else 0
    batching = config.dynamic_batching
    timeout = config.parameters.get("worker_run_timeout_s")
    gpu = config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    described = []
    for each in chosen:
        instances = await _instances(core, name, versions[each]) if loaded else []
        entry: dict[str, Any] = {
            "modelName": name,
            "modelVersion": each,
            "modelUrl": models.url(name, each),
            "runtime": "python",
            "minWorkers": workers,
            "maxWorkers": workers,
            "batchSize": max(config.max_batch_size, 1),
            "maxBatchDelay": batching.max_queue_delay_microseconds // 1000,
            "jobQueueSize": batching.default_queue_policy.max_queue_size,
            "responseTimeout": int(timeout.string_value) if timeout is not None else 120,
            "deviceType": "gpu" if gpu else "cpu",
            "continuousBatching": False,
            "useVenv": False,
            "stateful": False,
            "loadedAtStartup": name in models.startup,
            "workers": [
                {
                    "id": instance["name"],
                    "startTime": _iso(models.started.get(name)),
                    "status": "READY" if instance["state"] in ("READY", "BUSY") else "UNLOADING",
                    "memoryUsage": _resident_bytes(instance["pid"]),
                    "pid": instance["pid"] if instance["pid"] is not None else -1,
                    "gpu": gpu,
                    "gpuUsage": "N/A",
                }
                for instance in instances
            ],
        }
        if customized and loaded:
            answer = await predict(core, models, name, each, b"", "", [("describe", "True")])
            entry["customizedMetadata"] = _metadata(answer.body)
        described.append(entry)
    return described
