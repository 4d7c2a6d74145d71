"""The floors a large tensor's path is held to: each measures what it says, and ends."""

from __future__ import annotations

import socket
import threading

from benchmarks.shared_memory import options
from benchmarks.transfer_floors import _echo_connection, mapped_copies, tcp_round_trips


def test_the_echo_sends_each_message_back_whole():
    size = 300_000  # several reads and writes each way on loopback
    ours, theirs = socket.socketpair()
    echo = threading.Thread(target=_echo_connection, args=(theirs, size))
    echo.start()
    message = bytes(range(256)) * (size // 256) + bytes(size % 256)
    with ours:
        for _ in range(3):
            ours.sendall(message)
            back = bytearray()
            while len(back) < size:
                back += ours.recv(size - len(back))
            assert back == message
    echo.join(timeout=10)  # the peer's close ends it
    assert not echo.is_alive()


def test_the_floors_count_round_trips_between_two_processes_and_mapped_copies():
    assert tcp_round_trips(65536, 2, 0, 0, seconds=0.3) > 0
    assert mapped_copies(65536, 0, seconds=0.1) > 0


def test_perf_analyzer_is_given_the_row_and_the_regions_its_size_needs():
    assert options(4096, shared=False) == ("--shape", "INPUT0:1024")
    assert options(4096, shared=True)[2:] == (
        "--shared-memory", "system", "--output-shared-memory-size", "4096",
    )  # fmt: skip
