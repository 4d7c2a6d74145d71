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


def test_model_control_goes_through_a_front_process_with_its_parameters(front_processes):
    """Load and unload (not in the suite: the in-process gateway there and the Ray ingress
    refuse them by their control modes) through a front, `unload_dependents` included."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    http = httpclient.InferenceServerClient(front_processes.http_url, network_timeout=120)
    grpc = grpcclient.InferenceServerClient(front_processes.grpc_url)
    members = {"digits_preprocess", "digits", "digits_postprocess"}

    def ready() -> set[str]:
        return {r["name"] for r in http.get_model_repository_index() if r.get("state") == "READY"}

    http.load_model("digits_pipeline")  # and its members with it
    assert {"digits_pipeline", *members} <= ready()
    grpc.unload_model("digits_pipeline", unload_dependents=True)
    assert not {"digits_pipeline", *members} & ready()
    assert "simple" in ready()
