"""GPU readings for the metrics endpoint, through NVML when the driver and pynvml are there."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    uuid: str
    utilization: float  # 0..1, as Triton's nv_gpu_utilization
    memory_total_bytes: int
    memory_used_bytes: int


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


def read_gpus() -> list[GpuReading]:
    """One reading per GPU; empty where there is no NVIDIA driver or no pynvml."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    readings = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            readings.append(
                GpuReading(
                    index,
                    uuid.decode() if isinstance(uuid, bytes) else uuid,
                    pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
                    int(memory.total),
                    int(memory.used),
                )
            )
    finally:
        pynvml.nvmlShutdown()
    return readings


def process_gpu_bytes(pid: int) -> int | None:
    """GPU memory NVML counts for one process, over every GPU; None without NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        used = 0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == pid and process.usedGpuMemory is not None:
                    used += int(process.usedGpuMemory)
        return used
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
