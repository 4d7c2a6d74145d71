"""`--ssl_config_file`: TF Serving's SSLConfig (text format) as the TLS of its gRPC port.

The config holds PEM text (`server_key`, `server_cert`, `custom_ca`), not paths; they
are written into a directory private to the server, as the TLS listeners read files.
`client_verify: true` requires client certificates that chain to `custom_ca`. As in TF
Serving, only the gRPC port serves TLS: the REST port stays plain HTTP.
"""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import text_format

from gateway.operation.security import ConfigError, TLSFiles
from gateway.tools.tfserving.model_config import ConfigFileError


def _write(path: Path, text: str) -> Path:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    return path


def read_ssl_config(path: Path, directory: Path) -> TLSFiles:
    """The gRPC port's TLS files, written into `directory` (made, private); ConfigFileError
    naming the file when it cannot serve."""
    from accel_base.proto.tfserving.tensorflow_serving.config import ssl_config_pb2

    config = ssl_config_pb2.SSLConfig()
    try:
        text_format.Parse(path.read_text(), config)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"--ssl_config_file: {exc}") from None
    except text_format.ParseError as exc:
        raise ConfigFileError(f"{path}: not an SSLConfig in text format: {exc}") from None
    if not config.server_key or not config.server_cert:
        raise ConfigFileError(f"{path}: give server_key and server_cert (their PEM text)")
    if config.client_verify and not config.custom_ca:
        raise ConfigFileError(f"{path}: client_verify needs custom_ca, the PEM text of the CA "
                              "that client certificates must chain to")  # fmt: skip
    try:
        directory.mkdir(mode=0o700)  # (new: nobody else can have put files there)
        files = TLSFiles(
            cert=_write(directory / "server.crt", config.server_cert),
            key=_write(directory / "server.key", config.server_key),
            client_ca=_write(directory / "ca.crt", config.custom_ca)
            if config.client_verify else None,
        )  # fmt: skip
    except OSError as exc:
        raise ConfigFileError(f"--ssl_config_file: cannot write its PEM text into "
                              f"{directory}: {exc.strerror or exc}") from None  # fmt: skip
    try:
        files.ssl_context()
    except ConfigError as exc:  # its words name our files: say which field instead
        field = "custom_ca" if "--tls-client-ca" in str(exc) else "server_key and server_cert"
        reason = str(exc).rsplit("(", 1)[-1].rstrip(")")
        raise ConfigFileError(f"{path}: {field} cannot serve TLS ({reason})") from None
    return files
