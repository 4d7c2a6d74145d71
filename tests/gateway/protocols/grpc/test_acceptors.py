"""The extra call acceptors on a real grpc.aio server and client, over 127.0.0.1."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway.launch import free_port
from gateway.protocols.grpc import acceptors
from gateway.protocols.grpc.acceptors import Acceptors

METHOD = "/test.Echo/Call"
PER_METHOD = 16


def test_this_grpcio_has_what_the_acceptors_use():
    # A grpcio that moved its internals fails here, before the gateway silently falls back.
    assert acceptors.available()


def _server(handler) -> tuple[grpc.aio.Server, dict, int]:
    server = grpc.aio.server()
    handlers = {"Call": grpc.unary_unary_rpc_method_handler(handler)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    server.add_registered_method_handlers("test.Echo", handlers)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    return server, {METHOD: handlers["Call"]}, port


async def _echo(request: bytes, context) -> bytes:
    await asyncio.sleep(0.005)  # so that calls overlap
    return request


def test_many_calls_at_once_are_all_answered_most_through_the_acceptors():
    async def run() -> tuple[list[bytes], int, int]:
        server, hot, port = _server(_echo)
        await server.start()
        extra = Acceptors(server, hot, per_method=PER_METHOD)
        assert extra.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(METHOD)
            answers = await asyncio.gather(*(call(b"%d" % i) for i in range(500)))
        await server.stop(grace=1.0)
        await asyncio.sleep(0)  # the acceptors see the shutdown
        return answers, extra.accepted, extra.running

    answers, accepted, running = asyncio.run(run())
    assert answers == [b"%d" % i for i in range(500)]
    # 16 acceptors against the server's one outstanding request. How the other calls
    # split depends on the loop's turns; not these: grpc's core hands calls to the
    # requests in the order they were made, and a request made again goes behind the
    # others, so the first 17 calls meet the 17 first requests, 16 of them the acceptors'.
    assert PER_METHOD <= accepted <= 500
    assert running == 0  # a stopped server ends them


@pytest.mark.parametrize("change", ["no cython layer", "a changed signature"])
def test_without_the_internals_the_server_runs_as_grpc_ships_it(monkeypatch, change):
    if change == "no cython layer":
        monkeypatch.setattr(acceptors, "cygrpc", None)
    else:  # as if grpcio had renamed a parameter
        needs = {**acceptors._NEEDS, "_schedule_rpc_coro": ("coro", "state", "loop", "name")}
        monkeypatch.setattr(acceptors, "_NEEDS", needs)
    assert not acceptors.available()

    async def run() -> bytes:
        server, hot, port = _server(_echo)
        await server.start()
        assert not Acceptors(server, hot, per_method=4).start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = await channel.unary_unary(METHOD)(b"plain")
        await server.stop(grace=1.0)
        return answer

    assert asyncio.run(run()) == b"plain"
