"""What loading a model version takes, before anything loads: where each instance may go
(Triton's instance_group rules), its artifact's path, and the V2 metadata a config
gives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_base.datatypes import v2_datatype
from accel_base.proto import model_config_pb2 as mc
from accel_base.version_dirs import version_dir
from backends import BackendUnavailable, Device
from gateway.core.model_config import platform_of
from gateway.core.sealing import check_artifact
from gateway.operation.gpu import gpu_count


@dataclass(frozen=True, slots=True)
class Slot:
    """One instance to place: the devices it may go on, whether it runs in a worker
    process, and the bytes it is predicted to take there."""

    allowed: tuple[Device, ...]
    in_worker: bool
    predicted: int
    group: int = 0  # its instance_group's index (its rate_limiter: scheduling/rate_limiter.py)


def instance_devices(
    config: mc.ModelConfig, can_use_gpus: bool
) -> list[tuple[int, tuple[Device, ...]]]:
    """The devices each instance may go on, following Triton's instance_group rules, but
    for one: a KIND_GPU group that names no `gpus` places `count` instances in all, each
    on the GPU it fits best (Triton puts `count` on every GPU); `gpus` pins as in Triton.

    KIND_AUTO (and no instance_group at all) means the GPUs when there are any and
    the backend can use them here, else one CPU instance. Each comes with its group's
    index.
    """
    groups = list(config.instance_group) or [mc.ModelInstanceGroup()]
    slots: list[tuple[int, tuple[Device, ...]]] = []
    for index, group in enumerate(groups):
        count = group.count or 1
        kind = group.kind
        if kind == mc.ModelInstanceGroup.KIND_AUTO:
            use_gpu = can_use_gpus and gpu_count() > 0
            kind = mc.ModelInstanceGroup.KIND_GPU if use_gpu else mc.ModelInstanceGroup.KIND_CPU
        if kind == mc.ModelInstanceGroup.KIND_GPU:
            available = gpu_count()
            pinned = list(group.gpus)
            if available == 0 or any(gpu >= available for gpu in pinned):
                raise BackendUnavailable(
                    f"model '{config.name}' asks for KIND_GPU instances on GPUs "
                    f"{pinned or 'any'} but this machine has {available} GPU(s); use KIND_CPU "
                    "or KIND_AUTO"
                )
            if pinned:
                slots += [(index, (Device("gpu", gpu),)) for gpu in pinned for _ in range(count)]
            else:
                slots += [(index, tuple(Device("gpu", gpu) for gpu in range(available)))] * count
        elif kind == mc.ModelInstanceGroup.KIND_CPU:
            slots += [(index, (Device("cpu"),))] * count
        else:
            raise BackendUnavailable(
                f"model '{config.name}': instance_group kind "
                f"{mc.ModelInstanceGroup.Kind.Name(kind)} is not supported"
            )
    return slots


def artifact_path(model_dir: Path, version: int, config: mc.ModelConfig, default: str) -> Path:
    """`<model_dir>/<version>/<default_model_filename or the platform's default>`, checked."""
    filename = config.default_model_filename or default
    artifact = version_dir(model_dir, version) / filename
    check_artifact(artifact, model_dir, config.name)
    if not artifact.exists():
        raise BackendUnavailable(
            f"model '{config.name}' version {version}: {model_dir.name}/{version}/{filename} "
            "is missing"
        )
    return artifact


def model_metadata(config: mc.ModelConfig, versions: list[int]) -> dict[str, Any]:
    """The V2 model metadata of a model with this config and these ready versions."""
    batch = [-1] if config.max_batch_size > 0 else []

    def tensors(declared) -> list[dict[str, Any]]:
        return [
            {"name": t.name, "datatype": v2_datatype(t.data_type), "shape": batch + list(t.dims)}
            for t in declared
        ]

    return {
        "name": config.name,
        "versions": [str(v) for v in versions],
        "platform": platform_of(config),
        "inputs": tensors(config.input),
        "outputs": tensors(config.output),
    }


@dataclass(frozen=True, slots=True)
class LoadPlan:
    config: mc.ModelConfig  # a copy, completed from the artifact as the first instance loads
    platform: str
    model_dir: Path
    artifact: Path
    version: int
    slots: list[Slot]
