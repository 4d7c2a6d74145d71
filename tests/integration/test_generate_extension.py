"""Triton's generate extension through a real gateway and plain HTTP (httpx, and curl -N
for the events): a decoupled Python model's responses as Server-Sent Events, one answer
from a plain model, and errors as Triton sends them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest

from models import python_models
from tests.conftest import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp("generate") / "repository"
    python_models.build(repo, ("py_repeat", "py_identity"))
    shutil.copytree(Path(__file__).parent / "python_models" / "py_cancel_stream",
                    repo / "py_cancel_stream")  # fmt: skip
    process = start_server(repo, log_dir=tmp_path_factory.mktemp("generate-logs"))
    yield process
    assert process.stop() == 0, process.log()


def _events(text: str) -> list[dict]:
    """The `data:` events of an SSE body, each parsed."""
    assert text.endswith("\n\n"), text
    return [orjson.loads(block[len("data: ") :]) for block in text.strip().split("\n\n")]


def test_generate_stream_sends_each_response_as_an_event(server):
    url = f"http://{server.http_url}/v2/models/py_repeat/generate_stream"
    with httpx.stream("POST", url, json={"TEXT": "tok", "COUNT": 3}, timeout=30) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
        body = "".join(reply.iter_text())
    assert _events(body) == [
        {"model_name": "py_repeat", "model_version": "1", "PART": f"tok {i}", "INDEX": i}
        for i in range(3)
    ]


def test_curl_reads_the_events_as_they_come(server):
    url = f"http://{server.http_url}/v2/models/py_repeat/versions/1/generate_stream"
    done = subprocess.run(
        ["curl", "-sN", "-X", "POST", url, "-H", "content-type: application/json",
         "-d", '{"TEXT": "x", "COUNT": 2}'],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert [event["PART"] for event in _events(done.stdout)] == ["x 0", "x 1"]


def test_generate_answers_once(server):
    reply = httpx.post(
        f"http://{server.http_url}/v2/models/py_identity/generate",
        json={"INPUT0": [1.5, 2.5], "parameters": {"note": "any"}}, timeout=30,
    )  # fmt: skip
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {"model_name": "py_identity", "model_version": "1",
                            "OUTPUT0": [[1.5, 2.5]]}  # fmt: skip
    one = httpx.post(
        f"http://{server.http_url}/v2/models/py_repeat/generate", json={"TEXT": "a", "COUNT": 1}
    )
    assert one.json()["PART"] == "a 0"


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("py_repeat/generate", {"TEXT": "a", "COUNT": 2}, 400, "use generate_stream"),
        ("py_repeat/generate_stream", {"TEXT": "a", "COUNT": -1}, 400, "COUNT must be >= 0"),
        ("py_repeat/generate_stream", {"TEXT": "a"}, 400, "COUNT"),
        ("py_identity/generate", {"INPUT0": "text"}, 400, "FP32 data must be numbers"),
        ("nobody/generate", {}, 404, "nobody"),
    ],
)
def test_failures_before_the_first_event_are_json_errors(server, path, body, status, fragment):
    reply = httpx.post(f"http://{server.http_url}/v2/models/{path}", json=body, timeout=30)
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert fragment in reply.json()["error"]


def test_only_post_and_advertised(server):
    reply = httpx.get(f"http://{server.http_url}/v2/models/py_repeat/generate")
    assert reply.status_code == 405 and reply.headers["allow"] == "POST"
    assert "generate" in httpx.get(f"http://{server.http_url}/v2").json()["extensions"]


def test_a_client_that_leaves_the_stream_cancels_the_generation(server):
    """py_cancel_stream sends an event every 20 ms until its sender says cancelled (10 s
    at most); asked again, it says how many it saw cancelled."""
    base = f"http://{server.http_url}/v2/models/py_cancel_stream"
    with httpx.stream("POST", f"{base}/generate_stream", json={"INPUT": 1}, timeout=30) as reply:
        first = next(reply.iter_text())
        assert first.startswith("data: ")
    # the connection is closed: the gateway sees it at the next event and cancels

    def seen() -> int:
        return httpx.post(f"{base}/generate", json={"INPUT": 0}, timeout=30).json()["SEEN"]

    wait_until(lambda: seen() == 1, 8, "the model to see its request cancelled")
