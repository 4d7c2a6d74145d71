"""The example repository on a local Ray cluster (`ray start --head` on 127.0.0.1,
started and stopped here), deployed by `accel-gateway ray serve`, answering the
unmodified tritonclient over HTTP and gRPC through the gateway's Ray ingress."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from gateway.launch import free_ports
from gateway.tools.ray.local_cluster import local_cluster
from models.digits import held_out
from tests.conftest import wait_until
from tests.integration.route_suite import ROUTES, Endpoints

pytest.importorskip("ray.serve")

# Models copied from the example repository: ONNX, a Python model, BYTES, an ensemble
# of Python and ONNX steps (its replicas carry its members).
MODELS = ("simple", "digits", "identity_bytes", "py_identity", "digits_preprocess",
          "digits_postprocess", "digits_pipeline")  # fmt: skip


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    with local_cluster() as address:
        yield address


@pytest.fixture(scope="module")
def ingress(ray_cluster, example_repository, tmp_path_factory) -> Iterator[dict[str, str]]:
    repository = tmp_path_factory.mktemp("ray") / "repository"
    for name in MODELS:
        shutil.copytree(example_repository / name, repository / name)
    config = repository / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + "ray { num_replicas: 2 }\n")
    # A model that cannot load: its deployment answers 503 with the reason, and the
    # others serve.
    shutil.copytree(example_repository / "simple", repository / "broken")
    config = repository / "broken" / "config.pbtxt"
    config.write_text(config.read_text().replace('"simple"', '"broken"'))
    (repository / "broken" / "1" / "model.onnx").unlink()
    ports = dict(zip(("http", "grpc", "metrics"), free_ports(3), strict=True))
    command = [
        sys.executable, "-m", "gateway", "ray", "serve", "--model-repository", str(repository),
        "--address", ray_cluster, "--http-port", str(ports["http"]),
        "--grpc-port", str(ports["grpc"]), "--metrics-port", str(ports["metrics"]),
        "--ingress-replicas", "2", "--timeout", "300",
    ]  # fmt: skip
    deployed = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    yield {key: f"127.0.0.1:{port}" for key, port in ports.items()}
    subprocess.run(
        [sys.executable, "-m", "gateway", "ray", "shutdown", "--address", ray_cluster],
        capture_output=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(params=["http", "grpc"])
def client(request, ingress):
    module = httpclient if request.param == "http" else grpcclient
    client = module.InferenceServerClient(ingress[request.param])
    client.module = module
    yield client
    client.close()


def infer_simple(client, batch: int = 1):
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    inputs = [client.module.InferInput(n, [batch, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)


def test_health_metadata_and_inference(client):
    assert client.is_server_live() and client.is_server_ready()
    for name in MODELS:
        assert client.is_model_ready(name), name  # "broken" aside
    metadata = client.get_model_metadata("digits")
    platform = metadata["platform"] if isinstance(metadata, dict) else metadata.platform
    assert platform == "onnxruntime_onnx"
    infer_simple(client, batch=3)


def test_the_digits_classifier_and_its_pipeline(client):
    images, labels = held_out()
    pixels = client.module.InferInput("pixels", [32, 64], "FP32")
    pixels.set_data_from_numpy(images[:32])
    probabilities = client.infer("digits", [pixels]).as_numpy("probabilities")
    assert (probabilities.argmax(axis=1) == labels[:32]).mean() > 0.85
    image = client.module.InferInput("IMAGE", [4, 8, 8], "UINT8")
    image.set_data_from_numpy(images[:4].reshape(4, 8, 8).astype(np.uint8))
    label = client.infer("digits_pipeline", [image]).as_numpy("LABEL")
    assert label.shape == (4, 1)


def test_bytes_and_a_python_model(client):
    data = np.array([[b"ray", b"", "grüße".encode()]], dtype=np.object_)
    tensor = client.module.InferInput("INPUT0", [1, 3], "BYTES")
    tensor.set_data_from_numpy(data)
    assert client.infer("identity_bytes", [tensor]).as_numpy("OUTPUT0").tolist() == data.tolist()
    values = np.arange(6, dtype=np.float32).reshape(1, 6)
    tensor = client.module.InferInput("INPUT0", [1, 6], "FP32")
    tensor.set_data_from_numpy(values)
    np.testing.assert_array_equal(client.infer("py_identity", [tensor]).as_numpy("OUTPUT0"), values)


def test_bad_input_is_the_replicas_400(client):
    tensor = client.module.InferInput("INPUT0", [1, 8], "INT32")
    tensor.set_data_from_numpy(np.zeros((1, 8), dtype=np.int32))
    other = client.module.InferInput("INPUT1", [1, 8], "INT32")
    other.set_data_from_numpy(np.zeros((1, 8), dtype=np.int32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("simple", [tensor, other])
    assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert "unexpected shape for input 'INPUT0'" in raised.value.message()


def test_a_model_that_failed_to_load_answers_503_with_the_reason(client):
    assert not client.is_model_ready("broken")
    inputs = [client.module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("broken", inputs)
    assert raised.value.status() in ("503", "StatusCode.UNAVAILABLE")
    assert "failed to load 'broken'" in raised.value.message()
    if client.module is httpclient:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["broken"]["state"] == "UNAVAILABLE"
        assert "failed to load" in index["broken"]["reason"]


def test_unknown_models_and_management_are_refused(client):
    with pytest.raises(InferenceServerException) as raised:
        client.get_model_metadata("nonexistent")
    assert "unknown model" in raised.value.message()
    with pytest.raises(InferenceServerException) as raised:
        client.load_model("simple")
    assert "ray serve" in raised.value.message()


def _replica_requests(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith('accel_gateway_ray_replica_requests{model="simple"'):
            found[line.split('replica="')[1].split('"')[0]] = int(line.rsplit(" ", 1)[1])
    return found


def test_two_replicas_share_the_traffic_and_statistics_add_up(ingress):
    clients = [httpclient.InferenceServerClient(ingress["http"]),
               grpcclient.InferenceServerClient(ingress["grpc"])]  # fmt: skip
    before = _replica_requests(ingress["metrics"])
    for client, module in zip(clients, (httpclient, grpcclient), strict=True):
        client.module = module
        for _ in range(40):
            infer_simple(client)

    def served() -> dict[str, int] | None:
        after = _replica_requests(ingress["metrics"])
        counts = {r: after[r] - before.get(r, 0) for r in after}
        return counts if len(counts) == 2 and sum(counts.values()) >= 80 else None

    # The replicas post their counters every half second when the machine lets them:
    # waited for, generously, until both have posted all 80.
    counts = wait_until(served, 120, lambda: str(_replica_requests(ingress["metrics"])))
    assert min(counts.values()) > 0, counts
    stats = clients[0].get_inference_statistics("simple")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] >= sum(counts.values())

    def simple_row() -> dict:
        return {m["name"]: m for m in clients[0].get_model_repository_index()}["simple"]

    def both_reporting() -> dict | None:
        row = simple_row()
        return row if "2 replica" in row["reason"] else None

    # A replica whose last post is over 5 s old (a busy machine can delay one) is not
    # counted at that moment: both must be seen reporting, not within one given glance.
    row = wait_until(both_reporting, 120, lambda: str(simple_row()))
    assert row["state"] == "READY", row


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.__name__)
def test_every_route_answers_as_in_the_other_deployments(ingress, route):
    """The route suite the in-process core and the front processes pass
    (tests/integration/route_suite.py), through the Ray ingress."""
    route(Endpoints(ingress["http"], ingress["grpc"]))
