"""A model instance's footprint: predicted before it loads, measured once it has run.

Prediction: the config's `memory_bytes` parameter when given (per instance), else the
size of the version's files times what the framework makes of them (weights unpacked,
arenas, compiled code), plus, for an instance in a worker process, that interpreter with
its framework imported; on a GPU, plus a CUDA context. Crude by design: placement books
the larger of prediction and measurement, so a prediction only has to hold until the
model has loaded and run once.

Measurement, after a warm-up batch of the largest size: a worker's own peak resident
memory on the CPU (its whole process, which ending frees); on a GPU, what NVML counts
for that worker. A thread instance lives in the gateway's process: its footprint is the
growth of the gateway's resident memory over the load and the warm-up, which the
manager measures with no other thread-instance load under way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from backends.parameters import string_parameter
from backends.platforms import UNKNOWN
from backends.registry import platforms
from gateway.core.placement.sizes import parse_bytes
from gateway.operation.gpu import process_gpu_bytes

log = logging.getLogger(__name__)

MiB = 2**20
# (Bytes per byte of artifact, and a worker process's own, are each backend's:
# Platform.expansion and Platform.worker_base_bytes in backends/platforms.py.)
CUDA_CONTEXT = 500 * MiB


def memory_hint(config: mc.ModelConfig) -> int | None:
    """The config's `memory_bytes` parameter (bytes an instance needs), if it has one."""
    text = string_parameter(config, "memory_bytes")
    if text is None:
        return None
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise InvalidArgument(f"model '{config.name}': parameter memory_bytes: {exc}") from None


def files_bytes(directory: Path) -> int:
    """Bytes of the regular files under a version's directory (links are refused at load)."""
    if directory.is_file():
        return directory.stat().st_size
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def predict(
    config: mc.ModelConfig, platform: str, version_dir: Path, device: Device, in_worker: bool
) -> int:
    """Bytes one instance of this model version should take on `device`."""
    hint = memory_hint(config)
    if hint is not None:
        return hint
    size = files_bytes(version_dir) if version_dir.exists() else 0
    info = platforms().get(platform, UNKNOWN)
    bytes_ = int(size * info.expansion)
    if device.kind == "gpu":
        return bytes_ + CUDA_CONTEXT
    if in_worker:
        bytes_ += info.worker_base_bytes
    return bytes_


def resident_bytes(pid: int | str = "self", peak: bool = False) -> int:
    """A process's resident memory now (VmRSS) or at its peak (VmHWM); 0 if it is gone."""
    key = "VmHWM:" if peak else "VmRSS:"
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass(slots=True)
class Footprint:
    """One instance's place and bytes, as the index and the metrics show them."""

    key: str  # the ledger's booking
    device: Device
    predicted: int
    measured: int | None = None


def memory_summary(footprints: list[Footprint]) -> dict[str, Any]:
    """A loaded version's bytes as the repository index shows them: predicted and
    measured side by side, so that the prediction's error is visible."""
    measured = [f.measured for f in footprints]
    return {
        "devices": [str(f.device) for f in footprints],
        "predicted_bytes": sum(f.predicted for f in footprints),
        "measured_bytes": None if None in measured else sum(m or 0 for m in measured),
    }


def worker_bytes(instance: Any, device: Device) -> int | None:
    """A worker's own footprint: its peak resident memory, or on a GPU what NVML counts
    for it; None if it cannot be read."""
    worker = getattr(instance, "worker", None)
    if worker is None:
        return None
    if device.kind == "gpu":
        used = process_gpu_bytes(worker.pid)
        return used if used else instance.loaded.memory_bytes or None
    return resident_bytes(worker.pid, peak=True) or None
