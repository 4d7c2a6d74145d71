"""`accel-gateway torchserve`: a TorchServe start script with one word changed, a real
model store of torch-model-archiver archives, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ts")

from gateway.launch import free_ports  # noqa: E402
from models.torchserve.archives import build_archive  # noqa: E402
from tests.conftest import wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def torchserve(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    # TMPDIR: the pid file and the background server's log stay this test's own.
    env = {**os.environ, "TMPDIR": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "gateway", "torchserve", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("model-store")
    build_archive("function", store)
    build_archive("function", store, name="other")
    return store


def write_config(directory: Path) -> tuple[int, int, int]:
    inference, management, metrics, http, grpc, ts_grpc, ts_grpc_management = free_ports(7)
    (directory / "config.properties").write_text(
        f"inference_address=http://127.0.0.1:{inference}\n"
        f"management_address=http://127.0.0.1:{management}\n"
        f"metrics_address=http://127.0.0.1:{metrics}\n"
        f"grpc_inference_port={ts_grpc}\ngrpc_management_port={ts_grpc_management}\n"
        f"v2_http_port={http}\nv2_grpc_port={grpc}\n"
    )
    return inference, http, management


def test_start_serves_the_store_with_token_authorization_then_stop_ends_it(store, tmp_path):
    inference, http, management = write_config(tmp_path)
    started = torchserve(
        "--start", "--ncs", "--model-store", str(store), "--models", "fn=function.mar",
        "--ts-config", "config.properties", cwd=tmp_path,
    )  # fmt: skip
    assert started.returncode == 0, (
        started.stderr + (tmp_path / "accel-gateway-torchserve.log").read_text()
    )
    try:
        keys = json.loads((tmp_path / "key_file.json").read_text())
        client = httpx.Client(base_url=f"http://127.0.0.1:{inference}", timeout=60)
        bearer = {"Authorization": f"Bearer {keys['inference']['key']}"}
        assert client.get("/ping").status_code == 400  # as TorchServe 0.12: a key for it too
        assert client.get("/ping", headers=bearer).json() == {"status": "Healthy"}
        refused = client.post("/predictions/fn", content=b"hi")
        assert refused.status_code == 400 and refused.json()["type"] == "InvalidKeyException"
        odd = client.post(
            "/predictions/fn", content=b"hi", headers={"Authorization": b"Bearer \xe9"}
        )
        assert odd.status_code == 400 and odd.json()["type"] == "InvalidKeyException"
        assert (tmp_path / "key_file.json").stat().st_mode & 0o077 == 0  # its owner's only
        answered = client.post("/predictions/fn", content=b"hi", headers=bearer)
        assert (answered.status_code, answered.text) == (200, "hi||1")
        # Only the model named was served, under the name given; V2 sees it too.
        assert client.post("/predictions/other", content=b"x", headers=bearer).status_code == 404
        v2 = httpx.get(f"http://127.0.0.1:{http}/v2/models/fn/ready", timeout=10)
        assert v2.status_code == 200
        # Management takes its own key, and only it; the API key renews a key.
        m = httpx.Client(base_url=f"http://127.0.0.1:{management}", timeout=60)
        for key in (None, keys["inference"]["key"], keys["API"]["key"]):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            assert m.get("/models", headers=headers).status_code == 400
        own = {"Authorization": f"Bearer {keys['management']['key']}"}
        assert m.get("/models", headers=own).json()["models"][0]["modelName"] == "fn"
        assert m.post("/token", params={"type": "inference"}, headers=own).status_code == 400
        api = {"Authorization": f"Bearer {keys['API']['key']}"}
        assert m.post("/token", params={"type": "inference"}, headers=api).status_code == 200
        renewed = json.loads((tmp_path / "key_file.json").read_text())
        assert renewed["inference"]["key"] != keys["inference"]["key"]
        assert renewed["management"] == keys["management"]
        assert client.post("/predictions/fn", content=b"hi", headers=bearer).status_code == 400
        fresh = {"Authorization": f"Bearer {renewed['inference']['key']}"}
        assert client.post("/predictions/fn", content=b"hi", headers=fresh).status_code == 200
    finally:
        stopped = torchserve("--stop", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert not (tmp_path / ".accel-gateway-torchserve.pid").exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{inference}/ping", timeout=5)


def foreground(directory: Path, *args: str) -> subprocess.Popen:
    """`accel-gateway torchserve --start --foreground` with the config in `directory`,
    without token authorization; its output in directory/out.log."""
    with open(directory / "out.log", "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gateway", "torchserve", "--start", "--foreground",
             "--ts-config", "config.properties", "--disable-token-auth", *args],
            cwd=directory, env={**os.environ, "TMPDIR": str(directory)},
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def answering(port: int, process: subprocess.Popen) -> httpx.Client:
    """A client of the inference API once /ping says Healthy (every model loaded)."""
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)

    def healthy() -> bool:
        assert process.poll() is None, "the server exited"
        try:
            return client.get("/ping").status_code == 200
        except httpx.TransportError:
            return False

    wait_until(healthy, 300, "/ping")
    return client


@pytest.mark.parametrize("models", [["--models", "all"], []])
def test_foreground_with_token_auth_disabled_serves_all_or_none(store, tmp_path, models):
    inference, _, _ = write_config(tmp_path)
    process = foreground(tmp_path, "--model-store", str(store), *models)
    try:
        client = answering(inference, process)
        for model in ("function", "other"):  # all, or none until one is registered
            status = client.post(f"/predictions/{model}", content=b"a").status_code
            assert status == (200 if models else 404)
        assert not (tmp_path / "key_file.json").exists()
    finally:
        process.terminate()
        assert process.wait(60) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--start", "--workflow-store", "wf"], "--workflow-store: TorchServe workflows"),
        (["--start", "--model-store", "{store}", "--models", "x=../../etc/passwd"],
         "no archive ../../etc/passwd"),
        (["--start", "--model-store", "{store}", "--models", "https://example.com/m.mar"],
         "not fetched by URL"),
        (["--start", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        ([], "give --start"),
    ],
)  # fmt: skip
def test_what_it_cannot_do_is_refused_by_name(store, tmp_path, args, message):
    args = [a.replace("{store}", str(store)) for a in args]
    result = torchserve(*args, "--foreground", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_requirements_file_installs_into_the_models_own_environment(tmp_path):
    """An archive's requirementsFile (here a wheel it carries) is installed into that
    model's own directory with install_py_dep_per_model=true, its handler imports it, and
    the server's environment never sees it; without the key the start says what to set."""
    store = tmp_path / "store"
    build_archive("deps", store)
    inference, _, _ = write_config(tmp_path)
    refused = torchserve("--start", "--foreground", "--model-store", str(store), "--models",
                         "deps.mar", "--ts-config", "config.properties",
                         "--disable-token-auth", cwd=tmp_path, timeout=120)  # fmt: skip
    assert refused.returncode == 2 and "install_py_dep_per_model=true" in refused.stderr
    with open(tmp_path / "config.properties", "a") as config:
        config.write("install_py_dep_per_model=true\n")
    process = foreground(tmp_path, "--model-store", str(store), "--models", "deps.mar")
    try:
        client = answering(inference, process)
        answer = client.post("/predictions/deps", content=b"x")
        assert (answer.status_code, answer.text) == (200, "tinydep 42")
        import importlib.util

        assert importlib.util.find_spec("tinydep") is None  # not in the server's own
    finally:
        process.terminate()
        assert process.wait(60) == 0


def test_a_service_envelope_splits_and_joins_requests_as_ts_does(tmp_path):
    """service_envelope=json: a request's `instances` are the handler's rows, and its
    answer their `predictions` (ts's own JSON envelope)."""
    store = tmp_path / "store"
    build_archive("rows", store)
    inference, _, _ = write_config(tmp_path)
    with open(tmp_path / "config.properties", "a") as config:
        config.write("service_envelope=json\n")
    process = foreground(tmp_path, "--model-store", str(store), "--models", "rows.mar")
    try:
        client = answering(inference, process)
        answer = client.post("/predictions/rows", json={"instances": [1, {"a": 2}]})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"predictions": [{"row": 1}, {"row": {"a": 2}}]}
    finally:
        process.terminate()
        assert process.wait(60) == 0
