"""Clients that hold connections: slow or truncated requests get 408, connections are capped."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from tests.conftest import wait_until


@pytest.fixture
def gateway_factory_one_second(repository_copy, server_factory):
    return server_factory(
        repository_copy("simple"), "--read-timeout", "1", "--max-connections", "4"
    )


def pending(server, model: str) -> int:
    """Requests the model has accepted and not yet answered."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    prefix = f'nv_inference_pending_request_count{{model="{model}",version="1"}} '
    return int(float(next(x for x in text.splitlines() if x.startswith(prefix))[len(prefix) :]))


def read_reply(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except TimeoutError:
        pass
    return b"".join(chunks)


def test_truncated_slow_and_silent_requests_time_out(gateway_factory_one_second):
    server = gateway_factory_one_second
    cases = {
        # A body shorter than its Content-Length, then nothing.
        "truncated": b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
        b'Content-Length: 100\r\nContent-Type: application/json\r\n\r\n{"inputs": [',
        "slow headers": b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n",  # never ends
        "silent": b"",
    }
    for what, sent in cases.items():
        # The clock starts before the connection, so the server's 1 s deadline (from the
        # connection opening or the first byte) cannot start before it: the lower bound
        # holds however slow the machine. The upper one is generous; a server that left
        # the connection open would read 10 s more.
        began = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
            sock.sendall(sent)
            reply = read_reply(sock, 10.0)
            elapsed = time.monotonic() - began
        assert reply.startswith(b"HTTP/1.1 408"), (what, reply)
        assert b"read timeout" in reply and 0.9 < elapsed < 5.0, (what, elapsed)
    # The server goes on serving.
    assert httpx.get(f"http://{server.http_url}/v2/health/ready").status_code == 200


def test_requests_past_the_connection_cap_get_503(repository_copy, server_factory):
    # A read timeout far past the test's length: the server must not close the held
    # connections (silent ones, 408 after the timeout) before the next request comes.
    server = server_factory(
        repository_copy("simple"), "--read-timeout", "600", "--max-connections", "4"
    )
    held = [socket.create_connection(("127.0.0.1", server.http_port)) for _ in range(4)]
    try:
        reply = httpx.get(f"http://{server.http_url}/v2/health/live")
        assert reply.status_code == 503
    finally:
        for sock in held:
            sock.close()
    # Served again once the server has seen the held connections close.
    wait_until(lambda: httpx.get(f"http://{server.http_url}/v2/health/live").status_code == 200)


def test_a_second_request_on_a_kept_alive_connection_is_timed_too(gateway_factory_one_second):
    server = gateway_factory_one_second
    with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(30.0)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")  # never ends
        reply = read_reply(sock, 10.0)
    assert reply.startswith(b"HTTP/1.1 408"), reply


def test_an_early_answer_does_not_leave_the_connection_open(gateway_factory_one_second):
    """Answered before its body ended (413 here), then the rest of the body: the
    connection is idle from then on, and closes after the timeout."""
    server = gateway_factory_one_second
    with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
        sock.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 999999999999\r\n\r\n")  # fmt: skip
        sock.settimeout(30.0)
        assert sock.recv(65536).startswith(b"HTTP/1.1 413")
        sock.sendall(b"x" * 100)
        began = time.monotonic()
        rest = read_reply(sock, 10.0)
        # Closed 1 s on (the read timeout), with room for a slow machine; a connection
        # left open would read as 10 s of silence.
        assert time.monotonic() - began < 5.0 and b"HTTP/1.1 200" not in rest


def test_grpc_calls_past_the_limit_are_refused_however_grpc_accepted_them(tmp_path, server_factory):
    import asyncio

    import grpc
    import numpy as np

    from accel_base.proto import grpc_service_pb2 as pb
    from accel_base.proto import grpc_service_pb2_grpc as pb_grpc
    from models.mlp import write_mlp

    # Each admitted call waits out a ten-second batch window, so the first two stay open
    # while the rest arrive (however slowly); the gateway accepts calls both through grpc's
    # own loop and its acceptors, and the limit must count them together.
    write_mlp(tmp_path / "repository", "held", 16, dynamic_batching=True,
              max_queue_delay_us=10_000_000, adaptive_window=False)  # fmt: skip
    server = server_factory(tmp_path / "repository", "--max-connections", "2")
    data = np.zeros((1, 784), dtype=np.float32).tobytes()
    request = pb.ModelInferRequest(
        model_name="held",
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 784])
        ],
        raw_input_contents=[data],
    )

    async def calls() -> list[grpc.StatusCode]:
        async with grpc.aio.insecure_channel(server.grpc_url) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            first = [asyncio.ensure_future(stub.ModelInfer(request, timeout=60)) for _ in range(2)]
            deadline = time.monotonic() + 30
            while await asyncio.to_thread(pending, server, "held") < 2:  # held in the window
                assert time.monotonic() < deadline, "the first two calls never arrived"
                await asyncio.sleep(0.05)
            rest = [stub.ModelInfer(request, timeout=60) for _ in range(6)]
            results = await asyncio.gather(*first, *rest, return_exceptions=True)
        return [
            r.code() if isinstance(r, grpc.aio.AioRpcError) else grpc.StatusCode.OK for r in results
        ]

    codes = asyncio.run(calls())
    assert codes[:2] == [grpc.StatusCode.OK] * 2
    assert codes[2:] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 6
