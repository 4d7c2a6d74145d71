"""Sizes as operators write them, and the inventory's budgets from the host and the GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.base import Device
from gateway.core.placement.inventory import host_memory, read_inventory
from gateway.core.placement.sizes import Budget, format_bytes, parse_budget, parse_bytes
from gateway.operation.gpu import GpuReading

GiB = 2**30


def test_sizes_with_and_without_units():
    assert parse_bytes("4096") == 4096
    assert parse_bytes("1.5GiB") == 3 * 2**29
    assert parse_bytes("200 MB") == 200_000_000
    assert parse_bytes("2k") == 2000
    for bad in ("", "GiB", "-1", "12 parsecs", "1e999"):
        with pytest.raises(ValueError):
            parse_bytes(bad)
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(3 * GiB) == "3.0 GiB"
    assert format_bytes(12) == "12 B"


def test_a_budget_is_a_fraction_up_to_one_else_bytes():
    assert parse_budget("0.8") == Budget(fraction=0.8)
    assert parse_budget("1") == Budget(fraction=1.0)
    assert parse_budget("16GiB") == Budget(bytes=16 * GiB)
    assert parse_budget("0.5").of(10 * GiB) == 5 * GiB
    assert parse_budget("2GiB").of(10 * GiB) == 2 * GiB
    with pytest.raises(ValueError):
        parse_budget("0")


def test_host_memory_is_capped_by_the_cgroup_limit(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16777216 kB\nMemAvailable:    8388608 kB\n")
    proc_cgroup = tmp_path / "cgroup"
    proc_cgroup.write_text("0::/box\n")
    box = tmp_path / "fs" / "box"
    box.mkdir(parents=True)
    (box / "memory.max").write_text(f"{4 * GiB}\n")
    (box / "memory.current").write_text(f"{1 * GiB}\n")
    assert host_memory(meminfo, tmp_path / "fs", proc_cgroup) == (4 * GiB, 3 * GiB)
    (box / "memory.max").write_text("max\n")  # no limit: the host's figures
    assert host_memory(meminfo, tmp_path / "fs", proc_cgroup) == (16 * GiB, 8 * GiB)


def test_the_inventory_has_the_cpu_and_each_gpu_with_budgets_less_the_reserve():
    gpus = [
        GpuReading(0, "GPU-a", 0.0, 80 * GiB, 0),
        GpuReading(1, "GPU-b", 0.0, 80 * GiB, 20 * GiB),
    ]
    devices = read_inventory(
        Budget(bytes=8 * GiB), Budget(fraction=0.5), reserve=0.25,
        host=lambda: (32 * GiB, 16 * GiB), gpus=lambda: gpus, visible_gpus=lambda: 2,
    )  # fmt: skip
    assert [d.device for d in devices] == [Device("cpu"), Device("gpu", 0), Device("gpu", 1)]
    assert devices[0].budget_bytes == 6 * GiB  # 8 GiB less a quarter
    assert devices[1].budget_bytes == 30 * GiB  # half of 80 free, less a quarter
    assert devices[2].budget_bytes == int(22.5 * GiB)  # half of 60 free, less a quarter


def test_gpus_are_numbered_as_the_frameworks_see_them(monkeypatch):
    gpus = [GpuReading(i, f"GPU-{i}", 0.0, (i + 1) * 10 * GiB, 0) for i in range(4)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-1")
    whole = Budget(fraction=1.0)
    devices = read_inventory(
        whole, whole, reserve=0.0, host=lambda: (GiB, GiB), gpus=lambda: gpus,
        visible_gpus=lambda: 2,
    )  # fmt: skip
    assert [(d.device, d.total_bytes) for d in devices[1:]] == [
        (Device("gpu", 0), 40 * GiB),  # physical GPU 3
        (Device("gpu", 1), 20 * GiB),  # GPU-1 by its UUID
    ]
    # Without NVML: a budget in bytes holds; a fraction of unknown memory does not limit.
    no_nvml = read_inventory(
        whole, Budget(bytes=5 * GiB), reserve=0.0, host=lambda: (GiB, GiB), gpus=list,
        visible_gpus=lambda: 1,
    )  # fmt: skip
    assert no_nvml[1].budget_bytes == 5 * GiB


def test_page_cache_the_kernel_can_drop_is_not_counted_as_used(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16777216 kB\nMemAvailable:    8388608 kB\n")
    (tmp_path / "cgroup").write_text("0::/box\n")
    box = tmp_path / "fs" / "box"
    box.mkdir(parents=True)
    (box / "memory.max").write_text(f"{4 * GiB}\n")
    (box / "memory.current").write_text(f"{3 * GiB}\n")
    (box / "memory.stat").write_text(f"anon {GiB}\ninactive_file {2 * GiB}\n")
    assert host_memory(meminfo, tmp_path / "fs", tmp_path / "cgroup") == (4 * GiB, 3 * GiB)
