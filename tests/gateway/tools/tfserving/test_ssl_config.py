"""`--ssl_config_file` read into the gRPC port's TLS files (ssl_config.py)."""

from __future__ import annotations

import stat

import pytest
import trustme

from gateway.tools.tfserving.model_config import ConfigFileError
from gateway.tools.tfserving.ssl_config import read_ssl_config


def _config(tmp_path, **fields) -> object:
    path = tmp_path / "ssl.config"
    path.write_text("".join(f"{k}: {v!r}\n" if isinstance(v, str) else f"{k}: {str(v).lower()}\n"
                            for k, v in fields.items()))  # fmt: skip
    return path


def test_pem_text_becomes_private_files(tmp_path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    key = cert.private_key_pem.bytes().decode()
    chain = "".join(p.bytes().decode() for p in cert.cert_chain_pems)
    files = read_ssl_config(_config(tmp_path, server_key=key, server_cert=chain), tmp_path / "t")
    assert files.key.read_text() == key and files.client_ca is None  # not required
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "t").stat().st_mode) == 0o700
    verified = _config(tmp_path, server_key=key, server_cert=chain,
                       custom_ca=ca.cert_pem.bytes().decode(), client_verify=True)  # fmt: skip
    assert read_ssl_config(verified, tmp_path / "v").client_ca is not None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"server_key": "x"}, "give server_key and server_cert"),
        ({"server_key": "x", "server_cert": "y", "client_verify": True}, "client_verify needs"),
        ({"server_key": "x", "server_cert": "y"}, "server_key and server_cert cannot serve TLS"),
    ],
)
def test_what_cannot_serve_is_named(tmp_path, fields, words) -> None:
    with pytest.raises(ConfigFileError, match=words):
        read_ssl_config(_config(tmp_path, **fields), tmp_path / "t")
    (tmp_path / "bad.config").write_text("server_key: ")
    with pytest.raises(ConfigFileError, match="not an SSLConfig"):
        read_ssl_config(tmp_path / "bad.config", tmp_path / "u")


def test_a_directory_already_there_is_refused_not_used(tmp_path) -> None:
    cert = trustme.CA().issue_cert("localhost")
    key = cert.private_key_pem.bytes().decode()
    chain = "".join(p.bytes().decode() for p in cert.cert_chain_pems)
    (tmp_path / "t").mkdir()  # someone else's: its files are not trusted
    with pytest.raises(ConfigFileError, match="cannot write its PEM text"):
        read_ssl_config(_config(tmp_path, server_key=key, server_cert=chain), tmp_path / "t")
