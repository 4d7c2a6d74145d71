"""What each raw HTTP/2 attack (benchmarks/h2_floods.py) costs a well-behaved gRPC client
of a real gateway, and what the attacker gets.

A gateway pinned to one core serves `simple`; on the other core a victim calls ModelInfer
200 times a second (5 s deadline each) while, in turn, each attack runs on a connection
of its own. Printed per attack: the victim's p99 as a ratio to its p99 alone (measured in
the same run; goal: under 2), deadlines missed (goal 0), the GOAWAY code the attacker got
and how long the server took to close on it (goal: the right code, under 1 s), and the
server's resident memory during the attack and 1 s after it closed, as a ratio to before
(goal: back within 10%). The last row holds a window's worth of unfinished messages on
16 streams (64 MiB by default, --max-request-bytes) for a second before closing.

    .venv/bin/python -m benchmarks.h2_attacks [--seconds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from accel_base.proto import grpc_service_pb2 as pb
from benchmarks.h2_floods import ATTACKS, opening, send_attack, unfinished_messages
from benchmarks.perf import pin_to
from benchmarks.soak import rss_mib
from gateway.launch import start_gateway
from gateway.protocols.grpc.h2 import frames as f
from models import simple

INFER = "/inference.GRPCInferenceService/ModelInfer"
CODES = {getattr(f, n): n for n in ("NO_ERROR", "PROTOCOL_ERROR", "FLOW_CONTROL_ERROR",
                                     "ENHANCE_YOUR_CALM", "STREAM_CLOSED")}  # fmt: skip


def _request() -> bytes:
    request = pb.ModelInferRequest(model_name=simple.NAME)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    return request.SerializeToString()


class Victim:
    """Calls at a fixed rate on a thread; latencies and missed deadlines since `start`."""

    def __init__(self, url: str, per_s: float = 200.0) -> None:
        self.channel = grpc.insecure_channel(url)
        self.call = self.channel.unary_unary(INFER)
        self.request = _request()
        self.interval = 1.0 / per_s

    def run(self, seconds: float) -> tuple[list[float], int]:
        latencies, missed = [], 0
        next_at = time.perf_counter()
        end = next_at + seconds
        while next_at < end:
            started = time.perf_counter()
            try:
                self.call(self.request, timeout=5.0)
                latencies.append(time.perf_counter() - started)
            except grpc.RpcError as exc:
                missed += 1
                if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise
            next_at += self.interval
            time.sleep(max(next_at - time.perf_counter(), 0.0))
        return latencies, missed


def _attacker(pipe, port: int, index: int, window: int, core: int) -> None:
    """In a process of its own (the victim's timing must not share its interpreter):
    builds the attack, says ready, waits for the word, attacks, sends back the outcome.
    `index` past the list: a window's worth of unfinished messages held 1 s."""
    pin_to(core)
    if index < len(ATTACKS):
        attack = ATTACKS[index]
        payload = opening() + attack.build(INFER, window)
    else:
        payload = opening() + unfinished_messages(INFER, window)
    pipe.send("ready")
    pipe.recv()
    if index < len(ATTACKS):
        pipe.send(send_attack(port, payload, attack.reads))
        return
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(payload)
        time.sleep(1.0)
    pipe.send((None, 0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="the victim's run a row")
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--max-request-bytes", type=int, default=64 * 1024 * 1024)
    args = parser.parse_args()
    window = args.max_request_bytes + 16 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        simple.build(repository)
        pin_to(args.client_core)
        server = start_gateway(
            repository, "--log-level", "warning",
            "--max-request-bytes", str(args.max_request_bytes),
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core},
        )  # fmt: skip
        try:
            victim = Victim(server.grpc_url)
            victim.run(1.0)  # warm
            alone, _ = victim.run(args.seconds)
            p99_alone = float(np.percentile(alone, 99))
            print(f"victim alone: p99 {p99_alone * 1e3:.2f} ms over {len(alone)} calls")
            print(f"{'attack':34} {'p99/alone':>9} {'missed':>6} {'GOAWAY':>18} {'closed s':>8} "
                  f"{'RSS during':>10} {'RSS after':>9}")  # fmt: skip
            names = [a.name for a in ATTACKS] + ["unfinished messages, one window"]
            for index, name in enumerate(names):
                _row(server, victim, index, name, window, args, p99_alone)
        finally:
            server.stop()


def _row(server, victim: Victim, index: int, name: str, window: int, args, p99_alone: float):
    pid = server.process.pid
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_attacker, args=(theirs, server.grpc_port, index, window, args.client_core)
    )
    process.start()
    ours.recv()  # built
    before = rss_mib(pid)
    peak = [before]
    timer = threading.Timer(0.3, ours.send, ("go",))
    timer.start()

    def sampler() -> None:
        while process.is_alive():
            peak.append(rss_mib(pid))
            time.sleep(0.05)

    threading.Thread(target=sampler, daemon=True).start()
    latencies, missed = victim.run(args.seconds)
    code, closed_s = ours.recv()
    process.join()
    time.sleep(1.0)
    after = rss_mib(pid)
    p99 = float(np.percentile(latencies, 99)) if latencies else float("nan")
    held = index >= len(ATTACKS)
    got = "(held, then closed)" if held else CODES.get(code, str(code))
    closed = "-" if held else f"{closed_s:.3f}"
    print(f"{name:34} {p99 / p99_alone:9.2f} {missed:6d} {got:>18} {closed:>8} "
          f"{max(peak) / before:10.2f} {after / before:9.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
