"""Model cache: a Zipf-distributed request stream over more models than the budget holds.

    .venv/bin/python -m benchmarks.model_cache [--models 12] [--requests 3000]

`--models` copies of `mlp` (784 -> 1024 -> 1024 -> 10, ONNX Runtime on the CPU), each a
different network. One client (one connection, one request at a time) picks each
request's model from a Zipf distribution (s = 1, seeded), with the server pinned to one
core and the client to the other, twice over the same sequence:
1. all resident: every model loaded at start (control mode none): the floor;
2. on demand with a host budget a third of the models' measured footprints: models load
   on their first request and the least recently used idle ones are evicted.
After each request the client reads the server's metrics (in both runs, so that the
server does the same work): in run 2 they tell a cold request (it waited for a load) from
a warm one, and give the booked bytes against the budget.
Reported: hit rate, cold p50/p99, warm p99 against the all-resident p99 (goal: within
10%), throughput against all resident, and the most bytes ever booked against the budget
(goal: never past it)."""

from __future__ import annotations

import argparse
import json
import re
import socket
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.overload import request_bytes
from benchmarks.perf import pin_to
from gateway.launch import start_gateway
from models.mlp import write_mlp

HIDDEN = 1024
_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


class Client:
    """One kept-alive HTTP/1.1 connection, one request at a time; bytes pre-encoded."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, request: bytes) -> tuple[int, bytes]:
        self.sock.sendall(request)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            buffer += self._recv()
        head, _, body = buffer.partition(b"\r\n\r\n")
        match = _LENGTH.search(head + b"\r\n")
        length = int(match[1]) if match else 0
        while len(body) < length:
            body += self._recv()
        return int(head[9:12]), body

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def fetch(port: int, method: str, path: str, body: bytes = b"") -> bytes:
    """The body of one answer on a connection of its own (metrics, the index)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
        chunks = []
        while chunk := sock.recv(1 << 20):
            chunks.append(chunk)
    return b"".join(chunks).partition(b"\r\n\r\n")[2]


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{name}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(match[1]) if match else 0.0


def zipf_sequence(models: list[str], count: int, seed: int = 1) -> list[str]:
    weights = np.array([1 / (rank + 1) for rank in range(len(models))])
    picks = np.random.default_rng(seed).choice(len(models), size=count, p=weights / weights.sum())
    return [models[i] for i in picks]


def run(port: int, sequence: list[str], metrics_port: int):
    """Latencies in order, whether each was cold, and the most bytes booked on the CPU
    meanwhile. The metrics are read after every request in both runs, so that the
    server does the same work around each request."""
    client = Client(port)
    requests = {name: request_bytes(port, name) for name in set(sequence)}
    latencies, cold, booked = [], [], 0.0
    misses = 0.0
    try:
        for model in sequence:
            began = time.perf_counter()
            status, body = client.call(requests[model])
            latencies.append(time.perf_counter() - began)
            if status != 200:
                raise RuntimeError(f"{model}: HTTP {status}: {body[:300]!r}")
            text = fetch(metrics_port, "GET", "/metrics").decode()
            now = metric(text, "accel_gateway_model_cache_misses")
            cold.append(now > misses)
            misses = now
            booked = max(booked, metric(text, "accel_gateway_memory_booked_bytes",
                                        '{device="cpu"}'))  # fmt: skip
    finally:
        client.close()
    return np.array(latencies), np.array(cold, dtype=bool), booked


def footprints(port: int) -> dict[str, int]:
    index = json.loads(fetch(port, "POST", "/v2/repository/index", b"{}"))
    return {
        row["name"]: max(row["memory"]["predicted_bytes"], row["memory"]["measured_bytes"] or 0)
        for row in index if "memory" in row
    }  # fmt: skip


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=12)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    args = parser.parse_args()
    names = [f"mlp{i:02}" for i in range(args.models)]
    sequence = zipf_sequence(names, args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        for seed, name in enumerate(names):
            write_mlp(repository, name, HIDDEN, dynamic_batching=False, intra_op_threads=1,
                      seed=seed)  # fmt: skip
        pin_to(args.client_core)
        common = dict(log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core},
                      timeout_s=300)  # fmt: skip
        server = start_gateway(repository, "--log-level", "warning", **common)
        try:
            sizes = footprints(server.http_port)
            run(server.http_port, sequence[:200], server.metrics_port)  # warm both sides
            resident, _, _ = run(server.http_port, sequence, server.metrics_port)
        finally:
            server.stop()
        budget = sum(sizes.values()) // 3
        server = start_gateway(
            repository, "--log-level", "warning", "--model-control-mode", "on-demand",
            "--host-memory-budget", str(budget), "--memory-reserve", "0", **common,
        )  # fmt: skip
        try:
            latencies, cold, booked = run(server.http_port, sequence, server.metrics_port)
        finally:
            server.stop()
    warm = latencies[~cold]
    floor_p99 = float(np.percentile(resident, 99))
    warm_p99 = float(np.percentile(warm, 99))
    print(f"{args.models} models, {args.requests} requests (Zipf, s=1); footprints "
          f"{min(sizes.values()) / 2**20:.1f}-{max(sizes.values()) / 2**20:.1f} MiB, "
          f"budget {budget / 2**20:.1f} MiB (a third of them all)")  # fmt: skip
    print(f"all resident: p99 {ms(floor_p99)}, {len(resident) / resident.sum():,.0f} requests/s")
    print(f"on demand: hit rate {len(warm) / len(latencies):.1%}; cold p50 "
          f"{ms(float(np.percentile(latencies[cold], 50)))}, p99 "
          f"{ms(float(np.percentile(latencies[cold], 99)))} ({cold.sum()} loads)")  # fmt: skip
    print(f"  warm p99 {ms(warm_p99)} = {warm_p99 / floor_p99:.2f}x all resident (goal <= 1.10)")
    print(f"  throughput {len(latencies) / latencies.sum():,.0f} requests/s = "
          f"{resident.sum() / latencies.sum():.2f}x all resident")  # fmt: skip
    print(f"  most booked {booked / 2**20:.1f} MiB of the {budget / 2**20:.1f} MiB budget "
          f"({'within' if booked <= budget else 'PAST'} it)")  # fmt: skip


if __name__ == "__main__":
    main()
