"""GPU readings for the metrics endpoint, through NVML when the driver and pynvml are there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    uuid: str
    utilization: float  # 0..1, as Triton's nv_gpu_utilization
    memory_total_bytes: int
    memory_used_bytes: int


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
