"""The same TorchServe archive on TorchServe and on `accel-gateway torchserve`, one run.

    .venv/bin/python -m benchmarks.torchserve_vs [--seconds 10] [--concurrency 1 8 64]

The archive is the digits classifier with its BaseHandler subclass (models/torchserve),
`batchSize` 16 and `maxBatchDelay` 5 ms in its model-config.yaml, one worker. Each
server in turn is started with the same config.properties, pinned with its worker
processes to one core (`--server-core`); the load generator (closed loops of JSON
requests on kept-alive connections, benchmarks/open_loop.py) runs on another. TorchServe
needs Java (Debian's openjdk-17-jre-headless) and `pip install torchserve`.
Goal (issue 39): at least 2x TorchServe's throughput at 8 and 64, 1.5x at 1, p99 no worse.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.open_loop import closed_loop_latencies, http_request, run_generator, wait_for_model
from benchmarks.perf import pin_to
from gateway.launch import free_ports
from models.digits import held_out
from models.torchserve.archives import build_archive


def wait_for_ping(port: int, process: subprocess.Popen | None, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"nothing answered /ping on port {port} in {timeout_s:g} s")


def measure(port: int, request: bytes, args: argparse.Namespace) -> dict[int, tuple[float, float]]:
    wait_for_model(port, request)
    results = {}
    for concurrency in args.concurrency:
        run_generator(closed_loop_latencies("127.0.0.1", port, request, concurrency, 1.0))
        rate, latencies = run_generator(
            closed_loop_latencies("127.0.0.1", port, request, concurrency, args.seconds)
        )
        p99 = float(np.percentile(latencies, 99) * 1e3) if latencies else float("nan")
        results[concurrency] = (rate, p99)
        print(f"  concurrency {concurrency:>3}: {rate:>8,.0f}/s, p99 {p99:.2f} ms", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    args = parser.parse_args()
    torchserve = shutil.which("torchserve") or str(Path(sys.executable).parent / "torchserve")
    pin = lambda: os.sched_setaffinity(0, {args.server_core})  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = work / "store"
        build_archive("digits", store, model_config={"batchSize": 16, "maxBatchDelay": 5})
        inference, management, metrics, http, grpc, grpc_ts, grpc_tsm = free_ports(7)
        (work / "config.properties").write_text(
            f"inference_address=http://127.0.0.1:{inference}\n"
            f"management_address=http://127.0.0.1:{management}\n"
            f"metrics_address=http://127.0.0.1:{metrics}\n"
            f"grpc_inference_port={grpc_ts}\ngrpc_management_port={grpc_tsm}\n"
            f"v2_http_port={http}\nv2_grpc_port={grpc}\n"
            "default_workers_per_model=1\ndisable_token_authorization=true\n"
        )
        body = json.dumps({"pixels": held_out()[0][0].tolist()}).encode()
        request = http_request("127.0.0.1", inference, "/predictions/digits", body,
                               {"Content-Type": "application/json"})  # fmt: skip
        pin_to(args.client_core)
        common = ["--model-store", str(store), "--models", "digits=digits.mar",
                  "--ts-config", str(work / "config.properties")]  # fmt: skip
        results = {}
        print("TorchServe:", flush=True)
        # Its Java process stays behind with whatever output it is given: a file, not a pipe.
        with open(work / "torchserve.out", "wb") as out:
            subprocess.run([torchserve, "--start", "--ncs", *common], cwd=work, check=True,
                           preexec_fn=pin, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_for_ping(inference, None)
            results["torchserve"] = measure(inference, request, args)
        finally:
            subprocess.run([torchserve, "--stop"], cwd=work, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)  # fmt: skip
            time.sleep(3)  # its ports go free
        print("accel-gateway torchserve:", flush=True)
        gateway = subprocess.Popen(
            [sys.executable, "-m", "gateway", "torchserve", "--start", "--foreground", *common],
            cwd=work, preexec_fn=pin, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for_ping(inference, gateway)
            results["gateway"] = measure(inference, request, args)
        finally:
            gateway.terminate()
            gateway.wait(60)
    print("\nconcurrency  TorchServe/s  p99 ms  gateway/s  p99 ms  throughput x  p99 x")
    for c in args.concurrency:
        (ts_rate, ts_p99), (gw_rate, gw_p99) = results["torchserve"][c], results["gateway"][c]
        print(f"{c:>11}  {ts_rate:>12,.0f}  {ts_p99:>6.2f}  {gw_rate:>9,.0f}  {gw_p99:>6.2f}"
              f"  {gw_rate / ts_rate:>12.2f}  {gw_p99 / ts_p99:>5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
