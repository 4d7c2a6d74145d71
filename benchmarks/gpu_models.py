"""Many ResNet-50s on one GPU: placement by measured bytes, load on demand, LRU eviction.

    python -m benchmarks.gpu_models [--copies 8] [--clients 16] [--seconds 20]

`--copies` ResNet-50s (models/resnet.py, each its own seed), TorchScript on the GPU in
worker processes, batched dynamically. Closed-loop clients (threads, one kept-alive HTTP
connection each, binary tensors) run three phases against three servers:
1. one resident: resnet50_00 alone, every client calling it: the floor. Its measured
   footprint (the repository index) sizes the budget of phase 3.
2. all resident: every copy loaded, each request for a copy drawn uniformly.
3. on demand, with a GPU budget that holds half the copies:
   a. cold loads: one client calls the copies round robin, so that every request waits
      for a load (LRU evicts the copy needed next): cold-load p50/p99;
   b. clients (4, then 16) draw copies from a Zipf distribution (s = 1, seeded):
      throughput, hit rate, loads and evictions.
   NVML is sampled every 20 ms throughout phase 3: the device memory of the server's
   processes, whose peak must stay within the budget.
Throughputs are ratios to phase 1, from the same run. Needs a CUDA GPU, torch with CUDA
and the `gpu` extra (nvidia-ml-py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.model_cache import Client, fetch, metric, zipf_sequence
from benchmarks.open_loop import binary_infer_request
from gateway.launch import start_gateway
from gateway.operation.gpu import read_gpus

IMAGE = (3, 224, 224)


def infer_bytes(port: int, model: str) -> bytes:
    return binary_infer_request(port, model, (1, *IMAGE), "INPUT__0", "OUTPUT__0")


class GpuSampler(threading.Thread):
    """The most device memory NVML counted for the server's processes (every process on
    the GPU but this one), and for the whole device less what was used before."""

    def __init__(self, baseline_used: int) -> None:
        super().__init__(daemon=True)
        self.baseline_used = baseline_used
        self.peak_processes = 0
        self.peak_device = 0
        self.samples = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        import os

        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        try:
            while not self.stopped.wait(0.02):
                used = sum(
                    p.usedGpuMemory or 0
                    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    if p.pid != os.getpid()
                )
                device = pynvml.nvmlDeviceGetMemoryInfo(handle).used - self.baseline_used
                self.peak_processes = max(self.peak_processes, used)
                self.peak_device = max(self.peak_device, device)
                self.samples += 1
        finally:
            pynvml.nvmlShutdown()


def closed_loop(port: int, sequences: list[list[str]], seconds: float):
    """Each client thread walks its own sequence of model names (cycling) for `seconds`.
    Returns the latencies of the 200s and the other answers' statuses and bodies."""
    requests = {name: infer_bytes(port, name) for seq in sequences for name in set(seq)}
    latencies: list[float] = []
    failures: list[str] = []
    deadline = time.monotonic() + seconds

    def client(sequence: list[str]) -> None:
        connection = Client(port)
        try:
            i = 0
            while time.monotonic() < deadline:
                began = time.perf_counter()
                status, body = connection.call(requests[sequence[i % len(sequence)]])
                if status == 200:
                    latencies.append(time.perf_counter() - began)
                else:
                    failures.append(f"{status} {body[:200]!r}")
                i += 1
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(seq,)) for seq in sequences]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return np.array(latencies), failures, time.monotonic() - began


def index_memory(port: int) -> dict[str, dict]:
    index = json.loads(fetch(port, "POST", "/v2/repository/index", b"{}"))
    return {row["name"]: row["memory"] for row in index if "memory" in row}


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def report(label: str, latencies: np.ndarray, failures: list[str], wall: float,
           floor: float | None) -> float:  # fmt: skip
    rate = len(latencies) / wall
    ratio = f" = {rate / floor:.2f}x one resident" if floor else ""
    print(f"{label}: {rate:,.0f} infer/s{ratio}; p50 {ms(np.percentile(latencies, 50))}, "
          f"p99 {ms(np.percentile(latencies, 99))}; {len(failures)} failed"
          + (f" (first: {failures[0]})" if failures else ""), flush=True)  # fmt: skip
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cold-requests", type=int, default=24)
    parser.add_argument(
        "--zipf-clients", type=lambda t: [int(c) for c in t.split(",")], default=[4, 16],
        help="client counts of the Zipf runs (default 4,16)",
    )  # fmt: skip
    parser.add_argument("--log-dir", type=Path, help="keep the servers' logs here")
    args = parser.parse_args()
    from models.resnet import write_resnet50

    names = [f"resnet50_{i:02}" for i in range(args.copies)]
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        began = time.monotonic()
        for seed, name in enumerate(names):
            write_resnet50(repository, name, seed)
        print(f"{args.copies} ResNet-50s written in {time.monotonic() - began:.0f} s", flush=True)
        baseline = read_gpus()[0].memory_used_bytes
        logs = args.log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        common = dict(timeout_s=300)

        # 1. One resident.
        server = start_gateway(
            repository, "--model-control-mode", "explicit", "--load-model", names[0],
            log_path=logs / "one.log", **common,
        )  # fmt: skip
        try:
            footprint = index_memory(server.http_port)[names[0]]
            closed_loop(server.http_port, [[names[0]]] * args.clients, 3)  # warm up
            one = closed_loop(server.http_port, [[names[0]]] * args.clients, args.seconds)
        finally:
            server.stop()
        measured = footprint["measured_bytes"] or 0
        booked = max(footprint["predicted_bytes"], measured)
        print(f"footprint of one copy: predicted {footprint['predicted_bytes'] / 2**20:,.0f} "
              f"MiB, measured {measured / 2**20:,.0f} MiB", flush=True)  # fmt: skip
        floor = report("one resident", *one, None)

        # 2. All resident.
        server = start_gateway(
            repository, "--model-control-mode", "explicit", "--load-model", "*",
            log_path=logs / "all.log", **common,
        )  # fmt: skip
        try:
            uniform = [list(rng.choice(names, 1000)) for _ in range(args.clients)]
            closed_loop(server.http_port, uniform, 3)
            report(f"all {args.copies} resident, uniform",
                   *closed_loop(server.http_port, uniform, args.seconds), floor)  # fmt: skip
        finally:
            server.stop()

        # 3. On demand, half of them fit.
        budget = booked * args.copies // 2 + booked // 4
        sampler = GpuSampler(baseline)
        server = start_gateway(
            repository, "--model-control-mode", "on-demand", "--gpu-memory-budget",
            str(budget), "--memory-reserve", "0", log_path=logs / "on_demand.log", **common,
        )  # fmt: skip
        sampler.start()
        zipf_runs = []
        try:
            rounds = [names[i % args.copies] for i in range(args.cold_requests)]
            cold, cold_failures = sequential(server.http_port, rounds)
            for clients in args.zipf_clients:
                before = cache_counters(server.metrics_port)
                zipf = [zipf_sequence(names, 1000, seed=s) for s in range(clients)]
                result = closed_loop(server.http_port, zipf, args.seconds)
                zipf_runs.append((clients, result, before, cache_counters(server.metrics_port)))
        finally:
            server.stop()
            sampler.stopped.set()
            sampler.join()
        print(f"on demand, budget {budget / 2**20:,.0f} MiB (holds {args.copies // 2} of "
              f"{args.copies}):", flush=True)  # fmt: skip
        print(
            f"  cold loads, round robin: {len(cold)} answered, {len(cold_failures)} failed; "
            f"p50 {ms(np.percentile(cold, 50))}, p99 {ms(np.percentile(cold, 99))}"
        )
        for clients, result, before, after in zipf_runs:
            report(f"  Zipf (s=1), {clients} clients", *result, floor)
            hits, misses, loads, evictions = (b - a for a, b in zip(before, after, strict=True))
            print(f"    hit rate {hits / max(hits + misses, 1):.1%}; {loads:.0f} loads, "
                  f"{evictions:.0f} evictions")  # fmt: skip
        print(
            f"  device memory sampled {sampler.samples} times: server's processes peak "
            f"{sampler.peak_processes / 2**20:,.0f} MiB, device less baseline peak "
            f"{sampler.peak_device / 2**20:,.0f} MiB; budget {budget / 2**20:,.0f} MiB "
            f"({'within' if sampler.peak_processes <= budget else 'PAST'} it)"
        )


def cache_counters(metrics_port: int) -> tuple[float, ...]:
    text = fetch(metrics_port, "GET", "/metrics").decode()
    names = ("cache_hits", "cache_misses", "loads", "evictions")
    return tuple(metric(text, f"accel_gateway_model_{name}") for name in names)


def sequential(port: int, sequence: list[str]) -> tuple[np.ndarray, list[str]]:
    connection = Client(port)
    requests = {name: infer_bytes(port, name) for name in set(sequence)}
    latencies, failures = [], []
    try:
        for name in sequence:
            began = time.perf_counter()
            status, body = connection.call(requests[name])
            if status == 200:
                latencies.append(time.perf_counter() - began)
            else:
                failures.append(f"{status} {body[:200]!r}")
    finally:
        connection.close()
    return np.array(latencies), failures


if __name__ == "__main__":
    main()
