"""GET /v2/openapi.json: the document lists exactly the routes the HTTP front serves."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.routing import APIRoute

from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore
from gateway.launch import start_gateway
from gateway.protocols.http.app import create_app
from gateway.protocols.http.generate import GENERATE_PATH
from gateway.protocols.http.infer_route import _INFER_PATH
from gateway.protocols.http.openapi import OPENAPI_PATH, openapi_document
from models import simple

INFER = {
    ("POST", "/v2/models/{name}/infer"),
    ("POST", "/v2/models/{name}/versions/{version}/infer"),
}
GENERATE = {
    ("POST", f"/v2/models/{{name}}{version}/{route}")
    for version in ("", "/versions/{version}")
    for route in ("generate", "generate_stream")
}


def documented() -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in openapi_document()["paths"].items()
        for method in item
    }


def test_every_served_route_is_documented_and_nothing_else(tmp_path):
    app = create_app(InferenceCore(ModelRepository(tmp_path)))
    served = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    assert documented() == served | INFER | GENERATE
    # The infer and generate routes are served in front of FastAPI, by a pattern each: every
    # form matches its own.
    for _, path in INFER:
        assert _INFER_PATH.fullmatch(path.format(name="m", version="1"))
    for _, path in GENERATE:
        assert GENERATE_PATH.fullmatch(path.format(name="m", version="1"))
    # FastAPI's own document and pages, which would describe only part of the API, are off.
    assert app.openapi_url is None and app.docs_url is None and app.redoc_url is None


def test_every_schema_reference_resolves():
    document = openapi_document()
    text = str(document)
    for name in re.findall(r"#/components/schemas/(\w+)", text):
        assert name in document["components"]["schemas"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = tmp_path_factory.mktemp("openapi") / "repository"
    repository.mkdir()
    simple.build(repository)
    log = tmp_path_factory.mktemp("openapi-logs") / "gateway.log"
    gateway = start_gateway(repository, log_path=log, timeout_s=120.0)
    yield gateway
    assert gateway.stop() == 0, gateway.log()


def test_the_served_document_answers_every_operation_as_documented(server):
    base = f"http://{server.http_url}"
    document = httpx.get(f"{base}{OPENAPI_PATH}").json()
    assert document == openapi_document()
    for path, item in document["paths"].items():
        url = base + path.format(name="simple", version="1")
        for method, operation in item.items():
            response = httpx.request(method, url, content=b"{}", timeout=10)
            assert str(response.status_code) in operation["responses"], (
                f"{method} {path}: {response.status_code} {response.text}"
            )
    for undocumented in ("/openapi.json", "/docs", "/redoc"):
        assert httpx.get(base + undocumented).status_code == 404
