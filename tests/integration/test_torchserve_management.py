"""TorchServe's management API (--torchserve-management-port) on a real gateway, driven by a
plain HTTP client as TorchServe's users drive it: register archives made by the real
torch-model-archiver from the model store, describe, list, scale, set the default
version, unregister; what it refuses, and what it never reads or fetches."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.http as httpclient

pytest.importorskip("ts")

from gateway.launch import GatewayProcess, free_ports, start_gateway  # noqa: E402
from models.torchserve.archives import build_archive  # noqa: E402
from tests.conftest import wait_until  # noqa: E402


class Gateway:
    def __init__(self, server: GatewayProcess, inference: int, management: int) -> None:
        self.server = server
        self.inference = httpx.Client(base_url=f"http://127.0.0.1:{inference}", timeout=120)
        self.management = httpx.Client(base_url=f"http://127.0.0.1:{management}", timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("model-store")
    build_archive("function", store)
    build_archive("function", store / "v2", version="2.0")
    build_archive("digits", store, model_config={"batchSize": 4, "maxBatchDelay": 50})
    build_archive("failing", store)
    (store.parent / "outside.mar").write_bytes((store / "function.mar").read_bytes())
    return store


@pytest.fixture(scope="module")
def gateway(store, tmp_path_factory) -> Iterator[Gateway]:
    repository = tmp_path_factory.mktemp("repository")
    *ports, inference, management = free_ports(5)
    server = start_gateway(
        repository, "--model-control-mode", "explicit",
        "--torchserve-port", str(inference), "--torchserve-management-port", str(management),
        "--torchserve-model-store", str(store),
        log_path=tmp_path_factory.mktemp("logs") / "gateway.log", ports=tuple(ports),
        timeout_s=180,
    )  # fmt: skip
    yield Gateway(server, inference, management)
    assert server.stop() == 0, server.log()


def test_register_describe_predict_and_unregister(gateway):
    m = gateway.management
    reply = m.post("/models", params={"url": "function.mar", "initial_workers": 1,
                                      "synchronous": "true"})  # fmt: skip
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "status": 'Model "function" Version: 1.0 registered with 1 initial workers'
    }
    assert {"modelName": "function", "modelUrl": "function.mar"} in m.get("/models").json()[
        "models"
    ]
    [described] = m.get("/models/function").json()
    assert described["modelVersion"] == "1.0" and described["minWorkers"] == 1
    [worker] = described["workers"]
    assert worker["status"] == "READY" and worker["pid"] > 0 and worker["memoryUsage"] > 0
    answer = gateway.inference.post("/predictions/function", content=b"hi")
    assert answer.status_code == 200 and answer.text == "hi||1"
    # The same model over V2, as the repository serves it.
    v2 = httpclient.InferenceServerClient(gateway.server.http_url)
    assert v2.is_model_ready("function")

    reply = m.delete("/models/function")
    assert reply.status_code == 200 and reply.json() == {"status": 'Model "function" unregistered'}
    assert m.get("/models/function").json()["code"] == 404
    assert not v2.is_model_ready("function")
    assert gateway.inference.post("/predictions/function", content=b"x").status_code == 404


def test_explanations_and_openapi(gateway):
    m, i = gateway.management, gateway.inference
    assert m.post("/models", params={"url": "function.mar", "initial_workers": 1,
                                     "synchronous": "true"}).status_code == 200  # fmt: skip
    # TorchServe marks an explanation with the request header its handlers read.
    assert i.post("/explanations/function", content=b"x").text == "why x||1"
    assert i.post("/explanations/function/1.0", content=b"y").text == "why y||1"
    assert i.post("/predictions/function", content=b"x").text == "x||1"
    for client, paths in (
        (i, {"/ping", "/predictions/{model_name}"}),
        (m, {"/models", "/models/{model_name}/{model_version}/set-default"}),
    ):
        described = client.options("/")
        assert described.status_code == 200
        assert paths <= set(described.json()["paths"])  # fmt: skip
    assert m.delete("/models/function").status_code == 200


def test_versions_default_and_set_default(gateway):
    m, i = gateway.management, gateway.inference
    assert m.post("/models", params={"url": "function.mar", "initial_workers": 1,
                                     "synchronous": "true"}).status_code == 200  # fmt: skip
    # Asynchronous: 202 at once, the workers come later.
    reply = m.post("/models", params={"url": "v2/function.mar", "initial_workers": 1,
                                      "synchronous": "false"})  # fmt: skip
    assert reply.status_code == 202 and reply.json() == {"status": "Processing worker updates..."}

    def both_ready() -> bool:
        described = m.get("/models/function/all").json()
        return [d["modelVersion"] for d in described] == ["1.0", "2.0"] and all(
            d["workers"] and d["workers"][0]["status"] == "READY" for d in described
        )

    wait_until(both_ready, 240, "version 2.0's workers")

    def version_of(path: str) -> str:
        reply = i.post(path, content=b"v")
        assert reply.status_code == 200, reply.text
        return reply.headers["x-model-version"]

    assert version_of("/predictions/function") == "1.0"  # the first registered
    assert version_of("/predictions/function/2.0") == "2.0"
    assert m.get("/models/function/2.0").json()[0]["modelVersion"] == "2.0"
    reply = m.put("/models/function/2.0/set-default")
    assert reply.status_code == 200, reply.text
    assert version_of("/predictions/function") == "2.0"
    assert m.get("/models/function").json()[0]["modelVersion"] == "2.0"
    # The default version goes last; another one at any time.
    refused = m.delete("/models/function/2.0")
    assert refused.status_code == 403
    assert refused.json()["message"] == "Cannot remove default version for model function"
    assert m.delete("/models/function/1.0").status_code == 200
    assert version_of("/predictions/function") == "2.0"
    missing = i.post("/predictions/function/1.0", content=b"v")
    assert missing.status_code == 404
    assert missing.json()["type"] == "ModelVersionNotFoundException"
    assert m.put("/models/function/9.9/set-default").status_code == 404
    assert m.delete("/models/function").status_code == 200


def test_scale_up_down_and_to_zero(gateway):
    m, i = gateway.management, gateway.inference
    reply = m.post("/models", params={"url": "digits.mar"})  # no workers asked for
    assert reply.status_code == 200 and "0 initial workers" in reply.json()["status"]
    [described] = m.get("/models/digits").json()
    assert described["workers"] == [] and described["batchSize"] == 4
    assert described["maxBatchDelay"] == 50
    refused = i.post("/predictions/digits", content=b"0")
    assert refused.status_code == 503 and "scale workers API" in refused.json()["message"]

    reply = m.put("/models/digits", params={"min_worker": 2, "synchronous": "true"})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"status": "Workers scaled to 2 for model: digits"}
    workers = m.get("/models/digits").json()[0]["workers"]
    assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2
    # The handler's describe_handle(), asked as TorchServe asks it.
    [customized] = m.get("/models/digits", params={"customized": "true"}).json()
    assert customized["customizedMetadata"] == {"classes": 10, "model": "digits", "device": "cpu"}
    reply = m.put("/models/digits", params={"min_worker": 1})  # asynchronous by default
    assert reply.status_code == 202
    wait_until(lambda: len(m.get("/models/digits").json()[0]["workers"]) == 1, 240)
    bad = m.put("/models/digits", params={"min_worker": 3, "max_worker": 1})
    assert bad.status_code == 400 and bad.json()["message"] == (
        "max_worker cannot be less than min_worker."
    )
    assert m.put("/models/digits", params={"min_worker": 0, "synchronous": "true"}).is_success
    assert m.get("/models/digits").json()[0]["workers"] == []
    assert m.delete("/models/digits").status_code == 200


def test_list_pages(gateway):
    m = gateway.management
    for url in ("function.mar", "digits.mar", "failing.mar"):
        assert m.post("/models", params={"url": url}).status_code == 200
    first = m.get("/models", params={"limit": 2}).json()
    assert [e["modelName"] for e in first["models"]] == ["digits", "failing"]
    second = m.get("/models", params={"limit": 2, "next_page_token": first["nextPageToken"]})
    assert second.json() == {"models": [{"modelName": "function", "modelUrl": "function.mar"}]}
    for name in ("function", "digits", "failing"):
        assert m.delete(f"/models/{name}").status_code == 200


def test_registration_refusals(gateway, store):
    m = gateway.management

    def error(reply: httpx.Response) -> tuple[int, str]:
        return reply.status_code, reply.json()["type"]

    assert error(m.post("/models")) == (400, "BadRequestException")
    # Nothing outside the model store, whatever the path says.
    for url in ("../outside.mar", str(store.parent / "outside.mar"), "file:///etc/passwd",
                "nope.mar"):  # fmt: skip
        assert error(m.post("/models", params={"url": url})) == (404, "ModelNotFoundException")
    # No URL is fetched unless allowed_urls lists it (this server lists none).
    never = m.post("/models", params={"url": "http://127.0.0.1:9/a.mar"})
    assert error(never) == (400, "ModelException") and "allowed" in never.json()["message"]
    unknown = m.post("/models", params={"url": "function.mar", "colour": "red"})
    assert unknown.status_code == 400 and "colour" in unknown.json()["message"]
    assert m.post("/models", params={"url": "function.mar"}).status_code == 200
    again = m.post("/models", params={"url": "function.mar"})
    assert error(again) == (409, "ConflictStatusException")
    assert m.delete("/models/function").status_code == 200
    assert error(m.delete("/models/nope")) == (404, "ModelNotFoundException")
    assert error(m.get("/models/nope")) == (404, "ModelNotFoundException")
    assert m.patch("/models").status_code == 405
    assert m.get("/nothing").status_code == 404


def test_a_handler_that_cannot_load_is_not_left_registered(gateway, store, tmp_path):
    m = gateway.management
    reply = m.post("/models", params={"url": "function.mar", "model_name": "broken",
                                      "handler": "no_such_module", "initial_workers": 1,
                                      "synchronous": "true"})  # fmt: skip
    assert reply.status_code >= 500 and "no_such_module" in reply.json()["message"]
    assert "broken" not in [e["modelName"] for e in m.get("/models").json()["models"]]


class _ArchiveHandler(http.server.BaseHTTPRequestHandler):
    archive = b""
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.asked.append(self.path)
        if self.path.endswith("/moved.mar"):  # to a URL the list does not allow
            self.send_response(302)
            self.send_header("location", "/elsewhere/function.mar")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-length", str(len(self.archive)))
        self.end_headers()
        self.wfile.write(self.archive)

    def log_message(self, *args: object) -> None:
        pass


def test_allowed_urls_are_fetched(store, tmp_path):
    """An archive at an http URL that allowed_urls matches is fetched and served; one the
    list does not match is never asked for."""
    _ArchiveHandler.archive = (store / "function.mar").read_bytes()
    _ArchiveHandler.asked = []
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ArchiveHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{web.server_address[1]}"
    inference, management, *others = free_ports(7)
    config = tmp_path / "config.properties"
    config.write_text(
        f"inference_address=http://127.0.0.1:{inference}\n"
        f"management_address=http://127.0.0.1:{management}\n"
        f"metrics_address=http://127.0.0.1:{others[0]}\n"
        f"grpc_inference_port={others[1]}\ngrpc_management_port={others[2]}\n"
        f"v2_http_port={others[3]}\nv2_grpc_port={others[4]}\n"
        "disable_token_authorization=true\nenable_model_api=true\n"
        f"allowed_urls={base}/archives/.*\n"
    )
    with open(tmp_path / "log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "torchserve", "--start", "--foreground",
             "--ts-config", str(config), "--model-store", str(store)],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        m = httpx.Client(base_url=f"http://127.0.0.1:{management}", timeout=300)

        def answering() -> bool:
            try:
                return m.get("/models").status_code == 200
            except httpx.TransportError:
                return process.poll() is not None

        wait_until(answering, 180, "the management API")
        assert process.poll() is None, (tmp_path / "log").read_text()
        refused = m.post("/models", params={"url": f"{base}/elsewhere/function.mar"})
        assert refused.status_code == 400 and "allowed" in refused.json()["message"]
        moved = m.post("/models", params={"url": f"{base}/archives/moved.mar"})
        assert moved.status_code == 400 and "redirects" in moved.json()["message"]
        assert _ArchiveHandler.asked == ["/archives/moved.mar"]  # never where it led
        _ArchiveHandler.asked.clear()
        reply = m.post("/models", params={"url": f"{base}/archives/function.mar",
                                          "initial_workers": 1, "synchronous": "true"})  # fmt: skip
        assert reply.status_code == 200, reply.text
        assert _ArchiveHandler.asked == ["/archives/function.mar"]
        [described] = m.get("/models/function").json()
        assert described["modelUrl"] == f"{base}/archives/function.mar"
        answer = httpx.post(f"http://127.0.0.1:{inference}/predictions/function", content=b"a")
        assert answer.status_code == 200 and answer.text == "a||1"
    finally:
        process.terminate()
        process.wait(60)
        web.shutdown()


def test_with_an_admin_token_the_management_port_needs_it(store, tmp_path):
    """`serve --admin-token` guards model control on every front: TorchServe's management
    port takes the token as its key; inference needs none, as V2's."""
    repository = tmp_path / "repository"
    repository.mkdir()
    *ports, inference, management = free_ports(5)
    server = start_gateway(
        repository, "--model-control-mode", "explicit", "--admin-token", "s3cret",
        "--torchserve-port", str(inference), "--torchserve-management-port", str(management),
        "--torchserve-model-store", str(store), log_path=tmp_path / "gateway.log",
        ports=tuple(ports), timeout_s=180,
    )  # fmt: skip
    try:
        m = httpx.Client(base_url=f"http://127.0.0.1:{management}", timeout=300)
        params = {"url": "function.mar", "initial_workers": 1, "synchronous": "true"}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            refused = m.post("/models", params=params, headers=headers)
            assert refused.status_code == 400, refused.text
            assert refused.json()["type"] == "InvalidKeyException"
        token = {"Authorization": "Bearer s3cret"}
        assert m.post("/models", params=params, headers=token).status_code == 200
        answer = httpx.post(f"http://127.0.0.1:{inference}/predictions/function", content=b"a")
        assert answer.text == "a||1"
    finally:
        assert server.stop() == 0, server.log()
