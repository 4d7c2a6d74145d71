"""How many cores this process may use: its CPU affinity, capped by its cgroup's CPU quota.

Frameworks size their thread pools from the machine (os.cpu_count, or its physical
cores), which ignores `taskset` and a container's CPU limit alike: more threads than
cores then fight over them, and some pools even pin threads to cores outside the
process's affinity. Every pool size we choose starts from `usable_cores()`.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

# How much lower than the event loop backends run (nice steps; --backend-nice). On a
# shared core the scheduler otherwise splits it evenly between the loop and a busy
# backend, and under overload the loop, which must read and refuse every request, falls
# behind: refusals then wait as long as admitted requests. With the loop first, the
# backend gets what the fronts leave, and admission (which measures the backend's wall
# time) admits correspondingly less. Work-conserving: an idle loop costs the backend
# nothing.
DEFAULT_BACKEND_NICE = 5
MAX_NICE = 19

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cores(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """Cores in the process's affinity (1 under `taskset -c 0`), no more than its cgroup's
    CPU quota allows (2 for a quota of 1.5 CPUs), and at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    if quota is not None:
        cores = min(cores, quota)
    return max(1, cores)


_sharers = 1  # processes that serve copies of the same models on these cores


def share_cores(processes: int) -> None:
    """This process is one of `processes` that each hold copies of the same models and
    serve them at once (front processes): each copy's thread pools take their share of
    the cores, so that together they do not ask for more threads than there are cores."""
    global _sharers
    _sharers = max(1, processes)


def pool_threads() -> int:
    """Threads for one model copy's compute pool: this process's share of the usable cores."""
    return max(1, usable_cores() // _sharers)


def cgroup_cpu_limit(
    cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP
) -> int | None:
    """ceil(quota / period) of the strictest CPU quota on the process's cgroup or one of
    its ancestors (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`); None when none is set."""
    limits = [
        _v2_limit(directory) if v2 else _v1_limit(directory)
        for v2, directory in cgroup_directories("cpu", cgroup_root, proc_cgroup)
    ]
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def cgroup_directories(
    controller: str, cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP
) -> list[tuple[bool, Path]]:
    """(whether cgroup v2, directory) of every cgroup whose `controller` limits apply to
    this process: its own and its ancestors', in v2 and in v1's hierarchy of that
    controller; empty where /proc says nothing."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":  # v2; hybrid systems mount it at unified/
            mounts, v2 = [cgroup_root, cgroup_root / "unified"], True
        elif controller in controllers.split(","):  # v1, mounted as cpu,cpuacct/ or cpu/
            mounts = list(dict.fromkeys([cgroup_root / controllers, cgroup_root / controller]))
            v2 = False
        else:
            continue
        found += [(v2, d) for mount in mounts for d in with_ancestors(mount, path)]
    return found


def with_ancestors(mount: Path, path: str) -> list[Path]:
    """The cgroup's directory and its parents up to the mount. A quota on any of them
    applies; and inside a container without its own cgroup namespace, /proc shows the
    host's path while the mount is the container's own cgroup, found as the last entry."""
    parts = [p for p in path.split("/") if p]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_limit(directory: Path) -> int | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()
        return _cores(int(quota), int(period)) if quota != "max" else None
    except (OSError, ValueError):
        return None


def _v1_limit(directory: Path) -> int | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return _cores(quota, period)


def _cores(quota: int, period: int) -> int | None:
    """A quota of -1 (v1) or non-positive values mean no limit."""
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def lower_priority(steps: int) -> None:
    """Lower the calling thread's scheduling priority by `steps` nice levels (worker
    processes start under nice(1) instead: workers/client.py). On Linux a thread's nice
    value is its own, and threads it starts later (a framework's pool) inherit it.
    Raising it back needs privileges, so only threads that do nothing else are lowered.
    Best effort: a system that refuses leaves the priority as it was."""
    if steps <= 0:
        return
    target = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, target)
        os.setpriority(os.PRIO_PROCESS, target, min(current + steps, MAX_NICE))
    except (OSError, AttributeError):  # not permitted, or not a POSIX system
        pass
