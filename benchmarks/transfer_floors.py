"""What this machine moves without a server: the floors a large tensor's path is held to.

- **Loopback TCP between two processes:** an echo server on the server's core reads
  each message whole into a buffer it made once and sends it back; a client process on
  the client's core keeps `concurrency` connections busy (a thread each), sending a
  message and reading the echo whole. A round trip carries the bytes in and out, as an
  inference request with a tensor of that size does.
- **One copy in and one out of a /dev/shm object through a mapping**, on the server's
  core: what system shared memory must do at the least (the client's tensor into the
  region, the region into the backend's array).

Both report round trips (copies in and out) per second; a figure in bytes per second
is that times the message's size.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import socket
import tempfile
import threading
import time

import numpy as np


def _recv_whole(sock: socket.socket, view: memoryview) -> bool:
    """Fill `view` from `sock`; False if the peer closed first."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def _echo_connection(sock: socket.socket, size: int) -> None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    with sock:
        while _recv_whole(sock, view):
            sock.sendall(view)


def _echo_server(core: int, size: int, ready: mp.connection.Connection) -> None:
    os.sched_setaffinity(0, {core})
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ready.send(listener.getsockname()[1])
        while True:
            sock, _ = listener.accept()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_echo_connection, args=(sock, size), daemon=True).start()


def _client(
    core: int,
    port: int,
    size: int,
    concurrency: int,
    seconds: float,
    result: mp.connection.Connection,
) -> None:
    os.sched_setaffinity(0, {core})
    payload = np.random.default_rng(0).bytes(size)
    counts = [0] * concurrency
    stop = time.perf_counter() + seconds + 0.5  # the first half second warms up

    def run(index: int) -> None:
        view = memoryview(bytearray(size))
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            warm_until = stop - seconds
            while (now := time.perf_counter()) < stop:
                sock.sendall(payload)
                if not _recv_whole(sock, view):
                    return
                if now >= warm_until:
                    counts[index] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.send(sum(counts) / seconds)


def tcp_round_trips(
    size: int, concurrency: int, server_core: int, client_core: int, seconds: float = 2.0
) -> float:
    """Round trips per second of `size`-byte messages over loopback TCP (see the module)."""
    context = mp.get_context("spawn")  # nothing of this process's state in either
    ready_parent, ready_child = context.Pipe()
    server = context.Process(target=_echo_server, args=(server_core, size, ready_child))
    server.start()
    ready_child.close()  # ours closed: a child that dies ends our wait, never hangs it
    try:
        port = ready_parent.recv()
        result_parent, result_child = context.Pipe()
        client = context.Process(
            target=_client, args=(client_core, port, size, concurrency, seconds, result_child)
        )
        client.start()
        result_child.close()
        figure = result_parent.recv()
        client.join()
        return figure
    finally:
        server.kill()
        server.join()


def mapped_copies(size: int, core: int, seconds: float = 2.0) -> float:
    """Copies in and out of a /dev/shm object through a mapping, per second, on `core`."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    source = np.frombuffer(np.random.default_rng(0).bytes(size), dtype=np.uint8)
    target = np.empty(size, dtype=np.uint8)
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    try:
        with tempfile.TemporaryFile(dir=directory) as handle:
            handle.truncate(size)
            with mmap.mmap(handle.fileno(), size) as mapping:
                region = np.frombuffer(mapping, dtype=np.uint8)
                try:
                    count, start = 0, time.perf_counter()
                    while (elapsed := time.perf_counter() - start) < seconds:
                        region[:] = source  # the client's tensor in
                        target[:] = region  # and out, into the backend's array
                        count += 1
                finally:
                    del region  # the mapping cannot close while a view holds it
        return count / elapsed
    finally:
        os.sched_setaffinity(0, before)
