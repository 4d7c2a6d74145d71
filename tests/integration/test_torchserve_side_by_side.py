"""The same archives and requests on TorchServe itself and on `accel-gateway torchserve`:
the same status, body and content type. Runs where TorchServe can (Java on the PATH,
`pip install torchserve`, both in the test extras but Java from Debian's
openjdk-17-jre-headless); elsewhere the module is skipped and says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ts")
if shutil.which("java") is None:
    pytest.skip("TorchServe needs Java (openjdk-17-jre-headless)", allow_module_level=True)

from gateway.launch import free_ports  # noqa: E402
from models.digits import held_out  # noqa: E402
from models.torchserve.archives import build_archive  # noqa: E402

TORCHSERVE = str(Path(sys.executable).parent / "torchserve")


def wait_until_answering(
    client: httpx.Client, path: str, body: bytes = b"warm", timeout_s: float = 240
) -> None:
    """Until `path` answers 200 (TorchServe answers /ping before its workers load)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if client.post(path, content=body).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{path} did not answer within {timeout_s:g} s")


def config(directory: Path) -> Path:
    inference, management, metrics, http, grpc, ts_grpc, ts_grpc_management = free_ports(7)
    path = directory / "config.properties"
    path.write_text(
        f"inference_address=http://127.0.0.1:{inference}\n"
        f"management_address=http://127.0.0.1:{management}\n"
        f"metrics_address=http://127.0.0.1:{metrics}\n"
        f"grpc_inference_port={ts_grpc}\ngrpc_management_port={ts_grpc_management}\n"
        f"v2_http_port={http}\nv2_grpc_port={grpc}\ndisable_token_authorization=true\n"
    )
    return path


def address(config_path: Path, key: str) -> str:
    """The http://host:port of `key` in a config.properties."""
    for line in config_path.read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
    raise KeyError(key)


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, tuple[httpx.Client, httpx.Client]]]:
    """Per API ("inference", "management"): (TorchServe's client, ours)."""
    store = tmp_path_factory.mktemp("store")
    build_archive("digits", store)
    build_archive("function", store)
    build_archive("failing", store)
    build_archive("streaming", store)
    models = ["digits=digits.mar", "function=function.mar", "failing=failing.mar",
              "streaming=streaming.mar"]  # fmt: skip
    theirs_dir, ours_dir = tmp_path_factory.mktemp("torchserve"), tmp_path_factory.mktemp("ours")
    theirs_config, ours_config = config(theirs_dir), config(ours_dir)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with open(theirs_dir / "out.log", "wb") as out:  # Java keeps it: a file, not a pipe
        subprocess.run(
            [TORCHSERVE, "--start", "--ncs", "--model-store", str(store), "--models", *models,
             "--ts-config", str(theirs_config)],
            cwd=theirs_dir, env=env, stdout=out, stderr=subprocess.STDOUT, check=True,
        )  # fmt: skip
    ours = subprocess.Popen(
        [sys.executable, "-m", "gateway", "torchserve", "--start", "--foreground",
         "--model-store", str(store), "--models", *models, "--ts-config", str(ours_config)],
        cwd=ours_dir, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        clients = {
            api: tuple(httpx.Client(base_url=address(path, key), timeout=60)
                       for path in (theirs_config, ours_config))
            for api, key in (("inference", "inference_address"),
                             ("management", "management_address"))
        }  # fmt: skip
        for client in clients["inference"]:  # every model answers: the start is done
            for model in ("function", "failing", "streaming"):
                wait_until_answering(client, f"/predictions/{model}")
            pixels = json.dumps({"pixels": [0.0] * 64}).encode()
            wait_until_answering(client, "/predictions/digits", pixels)
        yield clients
    finally:
        ours.terminate()
        ours.wait(60)
        subprocess.run([TORCHSERVE, "--stop"], cwd=theirs_dir, env=env, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def request_cases() -> list[tuple[str, str, dict]]:
    """(method, path, httpx arguments): the inference API's, then the management API's
    (a path under /models) that answer alike whatever the servers' own worker ids."""
    pixels = held_out()[0][0].tolist()
    return [
        ("GET", "/ping", {}),
        ("POST", "/predictions/digits", {"json": {"pixels": pixels}}),
        ("POST", "/predictions/function", {"data": {"body": "hello", "shout": "1"},
                                           "headers": {"x-echo": "hi"}}),
        ("POST", "/predictions/function", {"content": b"raw",
                                           "headers": {"content-type": "text/plain"}}),
        ("POST", "/predictions/function", {"files": {"body": ("f.bin", b"\x00file")}}),
        ("GET", "/predictions/function", {}),
        ("PUT", "/predictions/function/1.0", {"content": b"put"}),
        ("POST", "/predictions/function/9.9", {"content": b"x"}),
        ("POST", "/predictions/nothing", {"content": b"x"}),
        ("POST", "/predictions/failing", {"content": b"refuse"}),
        ("POST", "/predictions/failing", {"content": b"crash"}),
        ("POST", "/predictions/streaming", {"content": b"one two three"}),
        ("POST", "/predictions/streaming", {"content": b"alone"}),
        ("GET", "/models", {}),
        ("GET", "/models", {"params": {"limit": 1}}),
        ("GET", "/models", {"params": {"limit": 1, "next_page_token": 2}}),
        ("GET", "/models/nope", {}),
        ("GET", "/models/function/9.9", {}),
        ("PUT", "/models/function", {"params": {"min_worker": 3, "max_worker": 1}}),
        ("PUT", "/models/function/9.9/set-default", {}),
        ("DELETE", "/models/nope", {}),
        ("PATCH", "/models", {}),
        ("GET", "/nothing/here", {}),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(len(request_cases())))
def test_the_same_answer_as_torchserve(servers, case):
    method, path, kwargs = request_cases()[case]
    api = "management" if path.startswith("/models") else "inference"
    theirs_client, ours_client = servers[api]
    theirs = theirs_client.request(method, path, **kwargs)
    ours = ours_client.request(method, path, **kwargs)
    assert ours.status_code == theirs.status_code, (theirs.text, ours.text)
    assert ours.content == theirs.content
    assert ours.headers.get("content-type") == theirs.headers.get("content-type")
    # Intermediate responses: both send the answer in chunks, else both in one piece.
    assert ours.headers.get("transfer-encoding") == theirs.headers.get("transfer-encoding")
