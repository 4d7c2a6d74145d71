"""The endpoint pool's rules, with clients scripted by the test: least outstanding
first, a call never sent tried elsewhere, a call lost not retried, out and back in."""

from __future__ import annotations

import threading

import pytest

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from backends.remote.endpoints import EndpointPool
from backends.remote.failures import Lost, NotSent
from backends.remote.settings import read_settings


class Scripted:
    """A client whose ready() and calls do what the test says."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.failure: Exception | None = None
        self.calls = 0

    def ready(self) -> None:
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        pass


def pool(count: int, retries: int = 2) -> tuple[EndpointPool, list[Scripted]]:
    config = mc.ModelConfig(name="m")
    config.parameters["endpoints"].string_value = ",".join(f"h:{i + 1}" for i in range(count))
    config.parameters["retries"].string_value = str(retries)
    clients = [Scripted(f"grpc://h:{i + 1}") for i in range(count)]
    return EndpointPool("m", read_settings(config), clients), clients


def call(client: Scripted) -> str:
    client.calls += 1
    if client.failure is not None:
        raise client.failure
    return client.endpoint


def test_idle_endpoints_take_turns():
    endpoints, _ = pool(3)
    assert [endpoints.call(call) for _ in range(6)] == [
        "grpc://h:1",
        "grpc://h:2",
        "grpc://h:3",
    ] * 2


def test_the_endpoint_with_fewest_calls_out_takes_the_next():
    endpoints, clients = pool(2)
    inside, release = threading.Event(), threading.Event()

    def slow(client: Scripted) -> str:
        inside.set()
        release.wait(5)
        return client.endpoint

    worker = threading.Thread(target=endpoints.call, args=(slow,))
    worker.start()
    inside.wait(5)  # h:1 has a call out
    assert [endpoints.call(call) for _ in range(3)] == ["grpc://h:2"] * 3
    release.set()
    worker.join()


def test_a_call_never_sent_goes_to_the_next_endpoint_and_the_first_is_out():
    endpoints, clients = pool(2)
    clients[0].failure = NotSent("refused")
    assert endpoints.call(call) == "grpc://h:2"
    assert endpoints.endpoints[0].down_reason == "refused"
    assert endpoints.call(call) == "grpc://h:2"
    assert clients[0].calls == 1  # out: not asked again


def test_retries_are_bounded():
    endpoints, clients = pool(3, retries=1)
    for client in clients:
        client.failure = NotSent("refused")
    with pytest.raises(Unavailable):
        endpoints.call(call)
    assert sum(c.calls for c in clients) == 2


def test_a_lost_call_is_not_retried():
    endpoints, clients = pool(2)
    clients[0].failure = Lost("connection reset")
    with pytest.raises(Unavailable) as raised:
        endpoints.call(call)
    assert "may have run" in raised.value.message and clients[1].calls == 0
    assert endpoints.endpoints[0].down_reason == "connection reset"


def test_an_answered_error_keeps_the_endpoint_in():
    endpoints, clients = pool(1)
    clients[0].failure = InvalidArgument("bad shape")
    with pytest.raises(InvalidArgument):
        endpoints.call(call)
    assert endpoints.endpoints[0].down_reason is None


def test_with_every_endpoint_out_a_call_fails_at_once_naming_each():
    endpoints, clients = pool(2)
    for endpoint in endpoints.endpoints:
        endpoints.mark_down(endpoint, "refused")
    with pytest.raises(Unavailable) as raised:
        endpoints.call(call)
    assert "grpc://h:1: refused" in raised.value.message
    assert "grpc://h:2: refused" in raised.value.message
    assert sum(c.calls for c in clients) == 0


def test_a_health_check_takes_an_endpoint_out_and_back():
    endpoints, clients = pool(1)
    clients[0].failure = NotSent("refused")
    endpoints.check(endpoints.endpoints[0])
    assert endpoints.endpoints[0].down_reason == "refused"
    clients[0].failure = None
    endpoints.check(endpoints.endpoints[0])
    assert endpoints.endpoints[0].down_reason is None
    assert endpoints.call(call) == "grpc://h:1"
