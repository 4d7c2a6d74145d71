"""TLS on every port, judged by the unmodified tritonclient over HTTPS and gRPC with TLS.

A throwaway CA (trustme) issues the server's certificate for 127.0.0.1 and localhost; a
second CA issues the client certificates that --tls-client-ca trusts.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import gevent.ssl
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import trustme
from geventhttpclient.response import HTTPConnectionClosed
from tritonclient.utils import InferenceServerException

from gateway.cli import main
from gateway.launch import GatewayProcess, free_ports, start_gateway
from models import simple


class Files(NamedTuple):
    ca: Path  # trusted by clients: it issued the server's certificate
    server_cert: Path
    server_key: Path
    client_ca: Path  # trusted by the server for client certificates
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate from the server's CA, not the client CA
    stranger_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Files:
    root = tmp_path_factory.mktemp("pki")
    ca, client_ca = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = client_ca.issue_cert("client.example")
    stranger = ca.issue_cert("stranger.example")
    ca.cert_pem.write_to_path(root / "ca.pem")
    client_ca.cert_pem.write_to_path(root / "client-ca.pem")
    for name, issued in (("server", server), ("client", client), ("stranger", stranger)):
        for pem in issued.cert_chain_pems:
            pem.write_to_path(root / f"{name}.pem", append=True)
        issued.private_key_pem.write_to_path(root / f"{name}.key")
    return Files(
        *(root / n for n in ("ca.pem", "server.pem", "server.key", "client-ca.pem")),
        *(root / n for n in ("client.pem", "client.key", "stranger.pem", "stranger.key")),
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("tls-repo")
    simple.build(repo)
    return repo


def client_context(files: Files, cert: Path | None = None, key: Path | None = None):
    context = ssl.create_default_context(cafile=files.ca)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


@pytest.fixture(scope="module")
def tls_ports() -> list[int]:
    """HTTP, gRPC, metrics, SageMaker's and TorchServe's port: five that differ."""
    return free_ports(5)


@pytest.fixture(scope="module")
def sagemaker_port(tls_ports) -> int:
    return tls_ports[3]


@pytest.fixture(scope="module")
def tls_server(
    pki, repository, tls_ports, sagemaker_port, tmp_path_factory
) -> Iterator[GatewayProcess]:
    """TLS without client certificates, and SageMaker's port beside it. Readiness is
    polled by start_gateway over HTTPS without checking the certificate."""
    server = start_gateway(
        repository,
        *("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)),
        *("--sagemaker", "--sagemaker-port", str(sagemaker_port)),
        *("--torchserve-port", str(tls_ports[4])),
        log_path=tmp_path_factory.mktemp("tls-logs") / "gateway.log",
        ports=tuple(tls_ports[:3]),
    )
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def mtls_server(pki, repository, tmp_path_factory) -> Iterator[GatewayProcess]:
    """TLS that requires client certificates issued by the client CA."""
    server = start_gateway(
        repository,
        *("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)),
        *("--tls-client-ca", str(pki.client_ca)),
        log_path=tmp_path_factory.mktemp("mtls-logs") / "gateway.log",
        ssl_context=client_context(pki, pki.client_cert, pki.client_key),
    )
    yield server
    assert server.stop() == 0, server.log()


def http_client(server: GatewayProcess, files: Files, cert: Path | None = None, key=None):
    options = {"ca_certs": str(files.ca)}
    if cert is not None:
        options |= {"certfile": str(cert), "keyfile": str(key)}
    return httpclient.InferenceServerClient(
        server.http_url,
        ssl=True,
        ssl_options=options,
        ssl_context_factory=gevent.ssl.create_default_context,
        connection_timeout=5,
        network_timeout=5,
    )


def grpc_client(server: GatewayProcess, files: Files, cert: Path | None = None, key=None):
    return grpcclient.InferenceServerClient(
        server.grpc_url,
        ssl=True,
        root_certificates=str(files.ca),
        private_key=str(key) if key else None,
        certificate_chain=str(cert) if cert else None,
    )


def infer_simple(client, module) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [module.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_http_infer_over_tls(tls_server, pki):
    client = http_client(tls_server, pki)
    assert client.is_server_ready()
    infer_simple(client, httpclient)
    client.close()


def test_grpc_infer_over_tls(tls_server, pki):
    client = grpc_client(tls_server, pki)
    assert client.is_server_ready()
    infer_simple(client, grpcclient)
    client.close()


def assert_grpc_refused(client: grpcclient.InferenceServerClient) -> None:
    """The connection fails (UNAVAILABLE) before any call gets through; the client closes."""
    with pytest.raises(InferenceServerException) as info:
        client.is_server_live(client_timeout=5)
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    client.close()


def test_plaintext_clients_are_refused(tls_server):
    plain_http = httpclient.InferenceServerClient(
        tls_server.http_url, connection_timeout=5, network_timeout=5
    )
    # The TLS listener reads the plaintext request as a broken handshake and hangs up.
    with pytest.raises(HTTPConnectionClosed):
        plain_http.is_server_live()
    plain_http.close()
    assert_grpc_refused(grpcclient.InferenceServerClient(tls_server.grpc_url))


def test_metrics_over_tls(tls_server, pki):
    url = f"https://127.0.0.1:{tls_server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5, context=client_context(pki)) as reply:
        assert "nv_inference_request_success" in reply.read().decode()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{tls_server.metrics_port}/metrics", timeout=5)


def test_sagemaker_port_stays_plain_http(tls_server, sagemaker_port):
    # SageMaker's platform calls the container over plain HTTP; the log says so.
    url = f"http://127.0.0.1:{sagemaker_port}/ping"
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.status == 200
    assert "serves plain HTTP" in tls_server.log()


def test_client_certificate_is_required_over_http(mtls_server, pki):
    client = http_client(mtls_server, pki, pki.client_cert, pki.client_key)
    infer_simple(client, httpclient)
    client.close()
    for cert, key in ((None, None), (pki.stranger_cert, pki.stranger_key)):
        refused = http_client(mtls_server, pki, cert, key)
        # Under TLS 1.3 the server checks the client's certificate after the client has
        # finished its handshake: the client reads either the alert or the hang-up.
        with pytest.raises((ssl.SSLError, HTTPConnectionClosed)):
            refused.is_server_live()
        refused.close()


def test_client_certificate_is_required_over_grpc(mtls_server, pki):
    client = grpc_client(mtls_server, pki, pki.client_cert, pki.client_key)
    infer_simple(client, grpcclient)
    client.close()
    for cert, key in ((None, None), (pki.stranger_cert, pki.stranger_key)):
        assert_grpc_refused(grpc_client(mtls_server, pki, cert, key))


def test_metrics_need_a_client_certificate_too(mtls_server, pki):
    url = f"https://127.0.0.1:{mtls_server.metrics_port}/metrics"
    context = client_context(pki, pki.client_cert, pki.client_key)
    with urllib.request.urlopen(url, timeout=5, context=context) as reply:
        assert reply.status == 200
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(url, timeout=5, context=client_context(pki))


def test_launch_needs_a_client_certificate_to_poll(pki, repository, tmp_path):
    with pytest.raises(ValueError, match="client certificates"):
        start_gateway(
            repository,
            *("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)),
            *("--tls-client-ca", str(pki.client_ca)),
            log_path=tmp_path / "gateway.log",
        )


def test_the_health_command_reads_the_servers_own_tls_options(tls_server, mtls_server, pki,
                                                              capsys):  # fmt: skip
    assert main(["health", "--pid", str(tls_server.process.pid)]) == 0  # HTTPS, unverified
    pid = str(mtls_server.process.pid)
    assert main(["health", "--pid", pid]) == 1
    assert "requires a client certificate" in capsys.readouterr().err
    own = ["--client-cert", str(pki.client_cert), "--client-key", str(pki.client_key)]
    assert main(["health", "--pid", pid, *own]) == 0
    stranger = ["--client-cert", str(pki.stranger_cert), "--client-key", str(pki.stranger_key)]
    assert main(["health", "--pid", pid, *stranger]) == 1
    assert "did not answer" in capsys.readouterr().err


def test_torchserves_fronts_take_the_servers_tls(pki, tls_server, tls_ports):
    """TorchServe's fronts carry keys and model control: with --tls-cert they serve TLS
    as V2 does (SageMaker's port stays plain: its platform terminates TLS)."""
    import httpx

    url = f"https://127.0.0.1:{tls_ports[4]}/ping"
    answer = httpx.get(url, verify=client_context(pki), timeout=30)
    assert answer.status_code == 200 and answer.json() == {"status": "Healthy"}
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{tls_ports[4]}/ping", timeout=30)
