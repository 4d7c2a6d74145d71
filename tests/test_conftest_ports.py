"""The ports tests' servers take: under pytest-xdist, from a range of each process's own."""

from __future__ import annotations

import os

from gateway import launch
from gateway.launch import free_ports
from tests.conftest import LOWEST_PORT, PORTS_PER_PROCESS, RANGES


def test_ports_are_free_different_and_from_this_process_range():
    ports = launch.free_ports(5)
    assert len(set(ports)) == 5
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        low = LOWEST_PORT + int(worker[2:]) % RANGES * PORTS_PER_PROCESS
        assert all(low <= port < low + PORTS_PER_PROCESS for port in ports), ports
        # A test module's own `from gateway.launch import free_ports` gets the same.
        assert all(low <= port < low + PORTS_PER_PROCESS for port in free_ports(3))
