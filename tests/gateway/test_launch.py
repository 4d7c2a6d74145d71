"""gateway/launch.py: the one way tests and benchmarks start a gateway."""

from __future__ import annotations

import socket

import pytest

from gateway import launch


def test_free_ports_differ():
    # The system may hand a just-closed port out again: each socket is held until all
    # are chosen (two equal ports once gave a gateway HTTP and gRPC on one port).
    for _ in range(50):
        ports = launch.free_ports(4)
        assert len(set(ports)) == 4
        for port in ports:  # and each is free now
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_a_failed_start_leaves_no_gateway_running(tmp_path, monkeypatch):
    started = []

    def ready(server):
        started.append(server)
        raise RuntimeError("not what was expected on the port")

    monkeypatch.setattr(launch, "_ready", ready)
    with pytest.raises(RuntimeError, match="not what was expected"):
        launch.start_gateway(tmp_path, log_path=tmp_path / "gateway.log", timeout_s=60)
    (server,) = started
    assert server.process.poll() is not None  # stopped, not left behind with its workers


def test_free_ports_drawn_from_a_range_are_free_and_different():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    with taken:
        ports = launch.free_ports(3, within=range(port, port + 40))
        assert len(set(ports)) == 3 and port not in ports
        assert all(port < p < port + 40 for p in ports)
        with pytest.raises(RuntimeError, match="no 1 free ports"):
            launch.free_ports(1, within=range(port, port + 1))  # its one port is taken
