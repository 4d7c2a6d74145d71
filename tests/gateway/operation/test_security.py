"""What `accel-gateway serve` refuses before it listens: unusable TLS files, and
management without a token on an address other machines can reach."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from gateway.operation.security import is_loopback

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tls-files")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    other = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(root / "server.pem")
    server.private_key_pem.write_to_path(root / "server.key")
    other.private_key_pem.write_to_path(root / "other.key")
    ca.cert_pem.write_to_path(root / "ca.pem")
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    (root / "encrypted.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    (root / "garbage.pem").write_text("not a certificate\n")
    (root / "a-directory").mkdir()
    return {p.name: p for p in root.iterdir()}


def refused(tmp_path: Path, *args: str) -> str:
    """Run `serve` with an empty repository and free ports; it must exit 2 at once, with
    one line on stderr and no traceback. Returns that line."""
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--model-repository", str(tmp_path)]
        + ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,  # a server that starts instead of refusing fails here, not hangs
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("accel-gateway: ")
    return result.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--tls-cert", "server.pem"], "--tls-cert needs --tls-key"),
        (["--tls-key", "server.key"], "--tls-key needs --tls-cert"),
        (["--tls-client-ca", "ca.pem"], "--tls-client-ca needs --tls-cert and --tls-key"),
        (["--tls-cert", "missing.pem", "--tls-key", "server.key"], "cannot read --tls-cert"),
        (["--tls-cert", "server.pem", "--tls-key", "a-directory"], "cannot read --tls-key"),
        (["--tls-cert", "server.pem", "--tls-key", "other.key"], "the private key that belongs"),
        (["--tls-cert", "garbage.pem", "--tls-key", "server.key"], "are not a PEM certificate"),
        (["--tls-cert", "server.pem", "--tls-key", "encrypted.key"], "is encrypted"),
        (
            [
                "--tls-cert",
                "server.pem",
                "--tls-key",
                "server.key",
                "--tls-client-ca",
                "garbage.pem",
            ],
            "holds no PEM CA certificate",
        ),
    ],
)
def test_unusable_tls_files_are_a_clear_error(files, tmp_path, options, message):
    args = [arg if arg.startswith("--") else str(files.get(arg, tmp_path / arg)) for arg in options]
    assert message in refused(tmp_path, *args)


@pytest.mark.parametrize(
    ("host", "management"),
    [
        ("0.0.0.0", ["--model-control-mode", "explicit"]),
        ("::", ["--allow-shared-memory"]),
        ("gateway.example", ["--model-control-mode", "explicit"]),
    ],
)
def test_exposed_management_needs_a_token(tmp_path, host, management):
    err = refused(tmp_path, "--host", host, *management)
    assert f"--host {host} is reachable from other machines" in err
    assert "--admin-token" in err and "--allow-unauthenticated-management" in err


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "localhost", "LOCALHOST"])
def test_loopback_addresses(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "192.0.2.1", "example.com"])
def test_addresses_other_machines_reach(host):
    assert not is_loopback(host)


def test_torchserves_exposed_management_needs_a_token_or_its_keys(tmp_path):
    """TorchServe's management address manages the same models: beyond loopback it needs
    TorchServe's keys or the admin token, whatever --host is."""
    from gateway.operation.security import ConfigError
    from gateway.protocols.torchserve.keys import Keys
    from gateway.protocols.torchserve.options import TorchServeOptions
    from gateway.server import ServerOptions

    exposed = TorchServeOptions(management_port=18081, management_host="0.0.0.0")
    with pytest.raises(ConfigError, match="TorchServe's management address 0.0.0.0"):
        ServerOptions(model_repository=tmp_path, torchserve=exposed).check()
    ServerOptions(model_repository=tmp_path, torchserve=exposed, admin_token="t").check()
    keyed = TorchServeOptions(management_port=18081, management_host="0.0.0.0", keys=Keys(tmp_path))
    ServerOptions(model_repository=tmp_path, torchserve=keyed).check()
    local = TorchServeOptions(management_port=18081, management_host="127.0.0.1")
    ServerOptions(model_repository=tmp_path, torchserve=local).check()
