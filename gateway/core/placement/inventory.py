"""The devices models are placed on, with the memory each has and what models may book.

The CPU is a device too: its memory is the host's, available at start, no more than the
cgroup's memory limit leaves. Each GPU's comes from NVML (gateway/operation/gpu.py). A device's
budget is `--host-memory-budget` or `--gpu-memory-budget` of its free memory (a fraction,
or bytes), less `--memory-reserve` of that for what footprints do not show: activations
of batches larger than warm-up's, allocator fragmentation, the workers' own interpreters.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from accel_base.cpu import CGROUP_ROOT, PROC_CGROUP, cgroup_directories
from backends.base import Device
from gateway.core.placement.sizes import Budget, format_bytes
from gateway.operation.gpu import GpuReading, gpu_count, read_gpus

log = logging.getLogger(__name__)

CPU = Device("cpu")
DEFAULT_HOST_BUDGET = Budget(fraction=0.8)
DEFAULT_GPU_BUDGET = Budget(fraction=0.9)
DEFAULT_RESERVE = 0.1  # of each budget, kept free
UNLIMITED = 2**62  # a GPU whose memory cannot be read, with no budget in bytes


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    device: Device
    total_bytes: int
    free_bytes: int  # at start
    budget_bytes: int  # what model instances may book on it

    def describe(self) -> str:
        return (
            f"{self.device}: {format_bytes(self.total_bytes)} in all, "
            f"{format_bytes(self.free_bytes)} free, budget {format_bytes(self.budget_bytes)}"
        )


def host_memory(
    meminfo: Path = Path("/proc/meminfo"),
    cgroup_root: Path = CGROUP_ROOT,
    proc_cgroup: Path = PROC_CGROUP,
) -> tuple[int, int]:
    """(total, available) bytes of host memory for this process: /proc/meminfo's, capped
    by the strictest cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes) less
    what that cgroup already uses."""
    fields = {}
    for line in meminfo.read_text().splitlines():
        key, _, rest = line.partition(":")
        fields[key] = int(rest.split()[0]) * 1024
    total = fields["MemTotal"]
    available = fields.get("MemAvailable", fields.get("MemFree", 0))
    for limit, usage in _cgroup_limits(cgroup_root, proc_cgroup):
        total = min(total, limit)
        available = min(available, max(limit - usage, 0))
    return total, available


def _cgroup_limits(cgroup_root: Path, proc_cgroup: Path) -> list[tuple[int, int]]:
    """(limit, usage) of every cgroup memory limit on this process."""
    found = []
    for v2, directory in cgroup_directories("memory", cgroup_root, proc_cgroup):
        if v2:
            files = ("memory.max", "memory.current", "inactive_file")
        else:
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        try:
            limit_text = (directory / files[0]).read_text().strip()
            usage = int((directory / files[1]).read_text())
        except (OSError, ValueError):
            continue
        # v2 says "max"; v1 says a huge number, past any real memory.
        if limit_text.isdigit() and int(limit_text) < 2**60:
            # Page cache the kernel drops first is counted as used; it is not.
            found.append((int(limit_text), usage - _stat(directory, files[2])))
    return found


def _stat(directory: Path, key: str) -> int:
    try:
        for line in (directory / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def read_inventory(
    host_budget: Budget = DEFAULT_HOST_BUDGET,
    gpu_budget: Budget = DEFAULT_GPU_BUDGET,
    reserve: float = DEFAULT_RESERVE,
    host: Callable[[], tuple[int, int]] = host_memory,
    gpus: Callable[[], list[GpuReading]] = read_gpus,
    visible_gpus: Callable[[], int] = gpu_count,
) -> list[DeviceMemory]:
    """The CPU, then every GPU this process may use (numbered as the frameworks number
    them, after CUDA_VISIBLE_DEVICES), each with its budget."""
    total, available = host()
    devices = [_device(CPU, total, available, host_budget, reserve)]
    readings = gpus()
    for index in range(visible_gpus()):
        reading = _reading_of(index, readings)
        device = Device("gpu", index)
        if reading is None:  # no NVML (the gpu extra): a budget in bytes, or none
            log.warning("%s: no memory reading (install the gpu extra for NVML)", device)
            unknown = gpu_budget.bytes if gpu_budget.bytes is not None else UNLIMITED
            devices.append(DeviceMemory(device, unknown, unknown, unknown))
            continue
        free = reading.memory_total_bytes - reading.memory_used_bytes
        devices.append(_device(device, reading.memory_total_bytes, free, gpu_budget, reserve))
    return devices


def _reading_of(index: int, readings: list[GpuReading]) -> GpuReading | None:
    """NVML's reading of the index-th visible GPU: CUDA_VISIBLE_DEVICES names physical
    indexes or UUIDs, NVML numbers every GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",")] if visible is not None else None
    for reading in readings:
        if entries is None and reading.index == index:
            return reading
        if entries is not None and index < len(entries):
            entry = entries[index]
            if entry == str(reading.index) or (entry and reading.uuid.startswith(entry)):
                return reading
    return None


def _device(device: Device, total: int, free: int, budget: Budget, reserve: float) -> DeviceMemory:
    share = budget.of(free)
    if share > free:
        log.warning(
            "%s: the memory budget %s is more than the %s free now; models may not fit",
            device, format_bytes(share), format_bytes(free),
        )  # fmt: skip
    return DeviceMemory(device, total, free, int(share * (1 - reserve)))
