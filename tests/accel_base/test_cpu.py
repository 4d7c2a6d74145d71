"""Usable cores: the affinity, capped by a cgroup v1 or v2 CPU quota read from real files."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from accel_base.cpu import MAX_NICE, cgroup_cpu_limit, lower_priority, usable_cores


def hierarchy(tmp_path: Path, proc_line: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup mount under tmp_path with `files` written, and a /proc/self/cgroup copy."""
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(proc_line + "\n")
    return root, proc


@pytest.mark.parametrize(
    ("cpu_max", "cores"),
    [("150000 100000", 2), ("100000 100000", 1), ("20000 100000", 1), ("max 100000", None)],
)
def test_v2_quota_is_rounded_up_to_whole_cores(tmp_path, cpu_max, cores):
    root, proc = hierarchy(tmp_path, "0::/pod/app", {"pod/app/cpu.max": cpu_max + "\n"})
    assert cgroup_cpu_limit(root, proc) == cores


def test_the_strictest_quota_among_ancestors_applies(tmp_path):
    files = {"pod/cpu.max": "300000 100000", "pod/app/cpu.max": "max 100000"}
    root, proc = hierarchy(tmp_path, "0::/pod/app", files)
    assert cgroup_cpu_limit(root, proc) == 3
    (root / "pod/app/cpu.max").write_text("250000 100000")
    (root / "cpu.max").write_text("800000 100000")
    assert cgroup_cpu_limit(root, proc) == 3


def test_v1_quota_under_a_combined_cpu_cpuacct_mount(tmp_path):
    files = {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "250000\n",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
    }
    lines = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/"
    root, proc = hierarchy(tmp_path, lines, files)
    assert cgroup_cpu_limit(root, proc) == 3
    (root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(root, proc) is None


def test_a_container_without_its_own_namespace_finds_the_quota_at_the_mount(tmp_path):
    # /proc names the host's path, which does not exist under the container's mount.
    root, proc = hierarchy(tmp_path, "0::/system.slice/docker-abc.scope", {"cpu.max": "50000"})
    assert cgroup_cpu_limit(root, proc) is None  # malformed: no period
    (root / "cpu.max").write_text("50000 100000\n")
    assert cgroup_cpu_limit(root, proc) == 1


def test_hybrid_systems_are_read_at_unified(tmp_path):
    root, proc = hierarchy(tmp_path, "1:cpu:/\n0::/svc", {"unified/svc/cpu.max": "200000 100000"})
    assert cgroup_cpu_limit(root, proc) == 2


def test_no_cgroup_information_means_no_quota(tmp_path):
    assert cgroup_cpu_limit(tmp_path, tmp_path / "missing") is None
    root, proc = hierarchy(tmp_path, "0::/", {})
    assert cgroup_cpu_limit(root, proc) is None


def test_usable_cores_is_the_affinity_capped_by_the_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    root, proc = hierarchy(tmp_path, "0::/app", {"app/cpu.max": "100000 100000"})
    assert usable_cores(root, proc) == 1
    (root / "app/cpu.max").write_text(f"{(affinity + 8) * 100000} 100000")
    assert usable_cores(root, proc) == affinity
    (root / "app/cpu.max").write_text("max 100000")
    assert usable_cores(root, proc) == affinity


def test_a_process_pinned_to_one_core_has_one_usable_core():
    code = "from accel_base.cpu import usable_cores; print(usable_cores())"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),  # what `taskset -c 0` does
    )
    assert result.stdout.strip() == "1"


def _thread_priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_lower_priority_lowers_only_the_calling_thread_and_what_it_starts():
    base = _thread_priority()
    seen: dict[str, int] = {}

    def lowered() -> None:
        lower_priority(4)
        seen["own"] = _thread_priority()
        child = threading.Thread(target=lambda: seen.update(child=_thread_priority()))
        child.start()
        child.join()
        lower_priority(0)  # no steps: unchanged
        lower_priority(100)  # capped at the lowest priority there is
        seen["capped"] = _thread_priority()

    thread = threading.Thread(target=lowered)
    thread.start()
    thread.join()
    assert seen == {"own": min(base + 4, MAX_NICE), "child": min(base + 4, MAX_NICE),
                    "capped": MAX_NICE}  # fmt: skip
    assert _thread_priority() == base  # the caller's own thread is left alone
