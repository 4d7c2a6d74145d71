"""SageMaker's multi-model routes (/models) against a real server: load from a directory
inside the repository under an opaque name, list with pages, describe, invoke, unload;
409 for a second load, 507 when the model does not fit, 400/404 for bad paths."""

from __future__ import annotations

import shutil

import httpx
import numpy as np
import pytest

from gateway.launch import free_ports
from models.digits import held_out


@pytest.fixture
def mme_repository(example_repository, tmp_path):
    """SageMaker's layout: /opt/ml/models/<hash>/model/<Triton model directory>."""
    root = tmp_path / "ml-models"
    for key, name in (("a1b2", "digits"), ("c3d4", "simple")):
        shutil.copytree(example_repository / name, root / key / "model" / name)
    return root


def endpoint_and_server(server_factory, repository, *args: str):
    *ports, port = free_ports(4)  # all four differ
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--sagemaker", "--sagemaker-port",
        str(port), *args, ports=tuple(ports),
    )  # fmt: skip
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60), server


def endpoint(server_factory, repository, *args: str) -> httpx.Client:
    return endpoint_and_server(server_factory, repository, *args)[0]


def digits_body(rows: int = 2) -> dict:
    images = held_out()[0][:rows]
    return {"inputs": [{"name": "pixels", "shape": list(images.shape), "datatype": "FP32",
                        "data": images.ravel().tolist()}]}  # fmt: skip


def test_load_list_describe_invoke_and_unload(mme_repository, server_factory):
    with endpoint(server_factory, mme_repository) as client:
        url = str(mme_repository / "a1b2" / "model")
        loaded = client.post("/models", json={"model_name": "a1b2", "url": url})
        assert loaded.status_code == 200, loaded.text
        again = client.post("/models", json={"model_name": "a1b2", "url": url})
        assert again.status_code == 409 and "already loaded" in again.json()["error"]
        assert client.get("/models").json() == {"models": [{"modelName": "a1b2", "modelUrl": url}]}
        assert client.get("/models/a1b2").json() == {"modelName": "a1b2", "modelUrl": url}
        reply = client.post("/models/a1b2/invoke", json=digits_body())
        assert reply.status_code == 200, reply.text
        [output] = reply.json()["outputs"]
        assert output["name"] == "probabilities" and output["shape"] == [2, 10]
        assert np.allclose(np.reshape(output["data"], (2, 10)).sum(axis=1), 1, atol=1e-5)
        assert client.delete("/models/a1b2").status_code == 200
        assert client.get("/models/a1b2").status_code == 404
        assert client.delete("/models/a1b2").status_code == 404
        assert client.post("/models/a1b2/invoke", json=digits_body()).status_code == 404


def test_pages_of_loaded_models(mme_repository, server_factory):
    with endpoint(server_factory, mme_repository) as client:
        for key in ("a1b2", "c3d4"):
            url = str(mme_repository / key / "model")
            assert client.post("/models", json={"model_name": key, "url": url}).status_code == 200
        first = client.get("/models", params={"max_results": 1}).json()
        assert [m["modelName"] for m in first["models"]] == ["a1b2"]
        second = client.get(
            "/models", params={"max_results": 1, "next_page_token": first["nextPageToken"]}
        ).json()
        assert [m["modelName"] for m in second["models"]] == ["c3d4"]
        assert "nextPageToken" not in second
        assert client.get("/models", params={"max_results": "x"}).status_code == 400


def test_a_model_that_does_not_fit_is_507_with_the_sizes(mme_repository, server_factory):
    with endpoint(server_factory, mme_repository, "--host-memory-budget", "1000") as client:
        url = str(mme_repository / "a1b2" / "model")
        reply = client.post("/models", json={"model_name": "a1b2", "url": url})
        assert reply.status_code == 507, reply.text
        assert "does not fit" in reply.json()["error"] and "budget" in reply.json()["error"]
        assert client.get("/models").json() == {"models": []}


def test_bad_loads_are_4xx(mme_repository, server_factory, tmp_path):
    outside = tmp_path / "elsewhere"
    shutil.copytree(mme_repository / "a1b2", outside)
    linked = mme_repository / "e5f6" / "model"
    linked.mkdir(parents=True)
    (linked / "digits").symlink_to(outside / "model" / "digits")  # a link in the archive
    inside = "inside the model repository"
    with endpoint(server_factory, mme_repository) as client:
        for body, status, words in (
            ({"model_name": "x", "url": str(outside / "model")}, 400, inside),
            ({"model_name": "x", "url": str(mme_repository / "nope")}, 404, "no directory"),
            ({"model_name": "x", "url": str(linked)}, 400, "leads outside"),
            ({"model_name": "x", "url": str(mme_repository)}, 400, "exactly one"),
            ({"model_name": "../x", "url": str(mme_repository / "a1b2")}, 400, "model_name"),
            ({"url": str(mme_repository / "a1b2")}, 400, "model_name"),
            ({"model_name": "x", "url": 3}, 400, "url"),
        ):
            reply = client.post("/models", json=body)
            assert reply.status_code == status, (body, reply.text)
            assert words in reply.json()["error"]
        assert client.post("/models", content=b"{").status_code == 400


def test_loads_and_unloads_need_the_admin_token_when_one_is_set(mme_repository, server_factory):
    url = str(mme_repository / "a1b2" / "model")
    client, server = endpoint_and_server(server_factory, mme_repository, "--admin-token", "s3cret")
    with client:
        refused = client.post("/models", json={"model_name": "m", "url": url})
        assert refused.status_code == 403 and "admin token" in refused.json()["error"]
        token = {"Authorization": "Bearer s3cret"}
        assert client.post("/models", json={"model_name": "m", "url": url}, headers=token)\
            .status_code == 200  # fmt: skip
        assert client.delete("/models/m").status_code == 403
        assert client.delete("/models/m", headers=token).status_code == 200
        index = httpx.post(f"http://{server.http_url}/v2/repository/index", json={}).json()
        assert "m" not in {row["name"] for row in index}  # the name is gone with it
        # The name is free again, for another model.
        other = str(mme_repository / "c3d4" / "model")
        again = client.post("/models", json={"model_name": "m", "url": other}, headers=token)
        assert again.status_code == 200, again.text


def test_a_name_of_a_repository_model_is_refused(
    mme_repository, server_factory, example_repository
):
    shutil.copytree(example_repository / "simple", mme_repository / "simple")
    with endpoint(server_factory, mme_repository) as client:  # simple is not loaded
        url = str(mme_repository / "a1b2" / "model")
        reply = client.post("/models", json={"model_name": "simple", "url": url})
        assert reply.status_code == 409 and "choose another" in reply.json()["error"]
