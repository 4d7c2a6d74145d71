"""`--ssl_config_file`: TF Serving's gRPC port over TLS with client certificates, its
REST port plain, as TF Serving serves them; the unmodified tensorflow-serving-api stubs
over a secure channel. The same server batches (`--enable_batching`), and its V2 ports
are ones the system chose."""

from __future__ import annotations

import re

import grpc
import httpx
import pytest
import trustme

pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_serving.apis.model_service_pb2_grpc")

from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc  # noqa: E402

from models.tfserving.savedmodels import build_strings  # noqa: E402
from tests.integration.tfserving_server import start_tfserving  # noqa: E402


def _status(port: int, ca: trustme.CA, client: trustme.LeafCert | None):
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(),
        private_key=client.private_key_pem.bytes() if client else None,
        certificate_chain=b"".join(p.bytes() for p in client.cert_chain_pems) if client else None,
    )
    with grpc.secure_channel(f"localhost:{port}", credentials) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        request = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "m"})
        return stub.GetModelStatus(request, timeout=30)


def test_grpc_serves_tls_from_an_ssl_config_and_rest_stays_plain(tmp_path) -> None:
    ca, client_ca = trustme.CA(), trustme.CA()
    server_cert = ca.issue_cert("localhost", "127.0.0.1")
    chain = "".join(p.bytes().decode() for p in server_cert.cert_chain_pems)
    config = tmp_path / "ssl.config"
    config.write_text(
        f"server_key: {server_cert.private_key_pem.bytes().decode()!r}\n"
        f"server_cert: {chain!r}\n"
        f"custom_ca: {client_ca.cert_pem.bytes().decode()!r}\nclient_verify: true\n"
    )
    base = build_strings(tmp_path / "models" / "m", 1)
    # (start_tfserving waits on the REST port, in plain HTTP)
    batching = tmp_path / "batching.config"
    batching.write_text("max_batch_size { value: 4 } batch_timeout_micros { value: 1000 } "
                        "max_enqueued_batches { value: 3 }")  # fmt: skip
    flags = ("--model_name=m", f"--model_base_path={base}", f"--ssl_config_file={config}",
             "--enable_batching", f"--batching_parameters_file={batching}")  # fmt: skip
    server, rest, port = start_tfserving(tmp_path, "m", *flags, v2_ports=False)
    try:
        answer = _status(port, ca, client_ca.issue_cert("client.example"))
        assert [s.version for s in answer.model_version_status] == [1]
        for stranger in (None, ca.issue_cert("stranger.example")):  # none, or not the CA's
            with pytest.raises(grpc.RpcError) as refused:
                _status(port, ca, stranger)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        # V2's ports, not given: free ones the system chose (never a fixed default that
        # a second server on the machine would clash on), named in the start's line.
        log = (tmp_path / "server.log").read_text()
        started = re.search(r"HTTP [\d.]+:(\d+), gRPC [\d.]+:(\d+), metrics [\d.]+:(\d+)", log)
        assert started and all(int(p) not in (0, 8000, 8001, 8002) for p in started.groups())
        # The batching parameters, as the batcher's bounds (seen over V2).
        v2_config = httpx.get(f"http://127.0.0.1:{started[1]}/v2/models/m/config").json()
        assert v2_config["max_batch_size"] == 4
        assert v2_config["dynamic_batching"]["max_queue_delay_microseconds"] == 1000
        assert v2_config["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 12
        answer = httpx.post(f"{rest}/v1/models/m:predict", json={"instances": ["ab", "c"]})
        assert answer.json()["predictions"][0] == {"upper": "AB", "length": 2}
    finally:
        server.terminate()
        server.wait(60)
