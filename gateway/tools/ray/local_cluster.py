"""A one-node Ray cluster on loopback, for trying `accel-gateway ray serve` on one
machine, for the tests and for the benchmark: started with `ray start --head --block`
in a session of its own, and stopped with everything it started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.launch import free_ports

RAY = Path(sys.executable).with_name("ray")


@contextmanager
def local_cluster(
    cpus: int = 16, start_timeout_s: float = 90.0, cpu_cores: set[int] | None = None
) -> Iterator[str]:
    """Yields the cluster's address (127.0.0.1:PORT); `cpus` is what Ray may schedule,
    `cpu_cores` the cores its processes run on (all when None)."""
    port, client_port = free_ports(2)
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    pin = (lambda: os.sched_setaffinity(0, cpu_cores)) if cpu_cores else None
    head = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
         "--port", str(port), "--num-cpus", str(cpus), "--include-dashboard", "false",
         "--ray-client-server-port", str(client_port), "--disable-usage-stats",
         "--temp-dir", temp],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=pin,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        status = [str(RAY), "status", "--address", address]
        while subprocess.run(status, env=env, capture_output=True, timeout=30).returncode:
            if head.poll() is not None:
                raise RuntimeError(f"ray start exited with {head.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster did not start in {start_timeout_s:g} s")
            time.sleep(1)
        yield address
    finally:
        _stop_group(head)
        shutil.rmtree(temp, ignore_errors=True)


def _stop_group(head: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to every process of the cluster (its own session), SIGKILL to those left
    after `grace_s`: the raylet and the GCS outlive `ray start` by a few seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        head.poll()
        try:
            os.killpg(head.pid, 0)  # anyone left in the group?
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
    head.wait()
