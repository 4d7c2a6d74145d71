"""One loaded model version: its config, instances, scheduler and statistics."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from accel_base.datatypes import v2_datatype
from accel_base.proto import model_config_pb2 as mc
from backends import Backend, BackendUnavailable, Device, backend_class
from gateway.inference import InferRequest, InferResponse
from gateway.model_config import complete_config, platform_of
from gateway.scheduling import DirectScheduler, DynamicBatcher, Instance, InstancePool
from gateway.statistics import ModelStatistics
from gateway.validation import RequestRules

log = logging.getLogger(__name__)


def gpu_count() -> int:
    """NVIDIA GPUs this process may use: the driver's, narrowed by CUDA_VISIBLE_DEVICES
    (which the frameworks obey, renumbering the visible GPUs from 0)."""
    try:
        present = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    entries = [entry for entry in visible.split(",") if entry.strip()]
    # CUDA stops at the first invalid entry, e.g. "-1" hides every GPU.
    count = 0
    for entry in entries:
        if entry.strip().lstrip("-").isdigit() and int(entry) < 0:
            break
        count += 1
    return min(count, present)


def instance_devices(config: mc.ModelConfig, gpu_capable: bool) -> list[Device]:
    """One Device per instance, following Triton's instance_group rules.

    KIND_AUTO (and no instance_group at all) means the GPUs when there are any and
    the backend can use them here, else one CPU instance.
    """
    groups = list(config.instance_group) or [mc.ModelInstanceGroup()]
    devices: list[Device] = []
    for group in groups:
        count = group.count or 1
        kind = group.kind
        if kind == mc.ModelInstanceGroup.KIND_AUTO:
            use_gpu = gpu_capable and gpu_count() > 0
            kind = mc.ModelInstanceGroup.KIND_GPU if use_gpu else mc.ModelInstanceGroup.KIND_CPU
        if kind == mc.ModelInstanceGroup.KIND_GPU:
            available = gpu_count()
            gpus = list(group.gpus) or list(range(available))
            if not gpus or any(gpu >= available for gpu in gpus):
                raise BackendUnavailable(
                    f"model '{config.name}' asks for KIND_GPU instances on GPUs {gpus or 'any'} "
                    f"but this machine has {available} GPU(s); use KIND_CPU or KIND_AUTO"
                )
            devices += [Device("gpu", gpu) for gpu in gpus for _ in range(count)]
        elif kind == mc.ModelInstanceGroup.KIND_CPU:
            devices += [Device("cpu")] * count
        else:
            raise BackendUnavailable(
                f"model '{config.name}': instance_group kind "
                f"{mc.ModelInstanceGroup.Kind.Name(kind)} is not supported"
            )
    return devices


def artifact_path(
    model_dir: Path, version: int, config: mc.ModelConfig, backend_type: type[Backend]
) -> Path:
    """`<model_dir>/<version>/<default_model_filename or the backend's default>`, checked."""
    filename = config.default_model_filename or backend_type.default_filename
    artifact = model_dir / str(version) / filename
    if not artifact.exists():
        raise BackendUnavailable(f"model '{config.name}' version {version}: {artifact} is missing")
    return artifact


class ModelVersion:
    def __init__(
        self,
        config: mc.ModelConfig,
        version: int,
        backends: list[Backend],
        max_queue_size: int,
    ) -> None:
        self.config = config
        self.name = config.name
        self.version = version
        self.stats = ModelStatistics(config.name, str(version))
        self.pool = InstancePool(
            [Instance(b, f"{config.name}-{version}-{i}") for i, b in enumerate(backends)]
        )
        rules = RequestRules.from_config(config)
        output_datatypes = {t.name: v2_datatype(t.data_type) for t in config.output}
        self.scheduler: DirectScheduler | DynamicBatcher
        if config.HasField("dynamic_batching") and config.max_batch_size > 0:
            self.scheduler = DynamicBatcher(
                self.pool, rules, output_datatypes, self.stats, config.dynamic_batching,
                config.max_batch_size, max_queue_size, backends[0].allowed_batch_sizes(),
            )  # fmt: skip
        else:
            self.scheduler = DirectScheduler(
                self.pool, rules, output_datatypes, self.stats, max_queue_size
            )

    @classmethod
    def load(
        cls, model_dir: Path, version: int, config: mc.ModelConfig, max_queue_size: int
    ) -> ModelVersion:
        """Load every instance (blocking: call from a worker thread)."""
        config = mc.ModelConfig.FromString(config.SerializeToString())  # ours to complete
        backend_type = backend_class(platform_of(config))
        artifact = artifact_path(model_dir, version, config, backend_type)
        optional = [t.name for t in config.input if t.optional]
        if optional and not backend_type.optional_inputs:
            raise BackendUnavailable(
                f"model '{config.name}': platform {platform_of(config)} needs every input, "
                f"but the config marks {', '.join(optional)} optional"
            )
        backends: list[Backend] = []
        try:
            for device in instance_devices(config, backend_type.gpu_capable()):
                backends.append(backend_type(artifact, config, device))
                if len(backends) == 1:
                    complete_config(config, backends[0].inputs(), backends[0].outputs())
        except BaseException:
            for backend in backends:
                backend.unload()
            raise
        log.info(
            "loaded model '%s' version %d (%d instance(s))", config.name, version, len(backends)
        )
        return cls(config, version, backends, max_queue_size)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.scheduler.infer(request)

    def metadata(self, versions: list[int]) -> dict[str, Any]:
        batch = [-1] if self.config.max_batch_size > 0 else []

        def tensors(declared) -> list[dict[str, Any]]:
            return [
                {
                    "name": t.name,
                    "datatype": v2_datatype(t.data_type),
                    "shape": batch + list(t.dims),
                }
                for t in declared
            ]

        return {
            "name": self.name,
            "versions": [str(v) for v in versions],
            "platform": platform_of(self.config),
            "inputs": tensors(self.config.input),
            "outputs": tensors(self.config.output),
        }

    async def close(self) -> None:
        """Stop the scheduler, then free the instances (on a worker thread)."""
        if isinstance(self.scheduler, DynamicBatcher):
            await self.scheduler.close()
        await asyncio.to_thread(self.pool.close)
