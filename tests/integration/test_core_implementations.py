"""The route suite (tests/integration/route_suite.py) against two of the core interface's
implementations: the in-process core (`serve`) and the front-process proxy (`serve
--workers 2`, whose fronts forward model calls to the host). The third, the Ray ingress,
runs the same suite in tests/integration/test_ray_serve.py, beside its Ray cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.route_suite import ROUTES, Endpoints


@pytest.fixture(scope="module")
def front_processes(example_repository, tmp_path_factory) -> Iterator[Endpoints]:
    from tests.conftest import start_server

    server = start_server(
        example_repository, "--workers", "2", "--load-model", "simple",
        "--model-control-mode", "explicit", log_dir=tmp_path_factory.mktemp("fronts"),
    )  # fmt: skip
    yield Endpoints(server.http_url, server.grpc_url)
    assert server.stop() == 0, server.log()


@pytest.fixture(params=["in_process", "front_processes"])
def endpoints(request, gateway) -> Endpoints:
    if request.param == "in_process":
        return Endpoints(gateway.http_url, gateway.grpc_url)
    return request.getfixturevalue("front_processes")


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.__name__)
def test_every_route_answers_the_same_in_every_deployment(endpoints, route):
    route(endpoints)
