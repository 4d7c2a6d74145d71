"""What the server checks before it listens: its TLS files, and who may manage it.

Both checks run before any port is bound or any model loaded, so a mistake costs the
operator one clear line, not a half-started server.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc


class ConfigError(ValueError):
    """Server options that cannot work together; the message says what to change."""


@dataclass(frozen=True)
class TLSFiles:
    """A server certificate (chain first) and its key, PEM; optionally the CA that client
    certificates must chain to, which makes them required."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """The context of the HTTP listeners (V2 and metrics)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            # A password callback, so an encrypted key fails here instead of prompting.
            context.load_cert_chain(self.cert, self.key, password=_no_password)
        except _EncryptedKey:
            raise ConfigError(
                f"--tls-key {self.key} is encrypted; give the server an unencrypted key "
                f"(openssl pkey -in {self.key} -out server.key)"
            ) from None
        except ssl.SSLError as exc:
            raise ConfigError(
                f"--tls-cert {self.cert} and --tls-key {self.key} are not a PEM certificate "
                f"and the private key that belongs to it ({_reason(exc)})"
            ) from None
        if self.client_ca is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca)
            except ssl.SSLError as exc:
                raise ConfigError(
                    f"--tls-client-ca {self.client_ca} holds no PEM CA certificate ({_reason(exc)})"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """The same files for the gRPC listener."""
        client_ca = _read(self.client_ca, "--tls-client-ca") if self.client_ca else None
        return grpc.ssl_server_credentials(
            [(_read(self.key, "--tls-key"), _read(self.cert, "--tls-cert"))],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    raise _EncryptedKey


def _reason(exc: ssl.SSLError) -> str:
    return exc.reason or str(exc)


def _read(path: Path, option: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {option} {path}: {exc.strerror}") from None


def tls_files(cert: Path | None, key: Path | None, client_ca: Path | None) -> TLSFiles | None:
    """Check the TLS options as given on the command line; None when TLS is off."""
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigError(
                "--tls-client-ca needs --tls-cert and --tls-key: client certificates are "
                "checked only on a TLS server"
            )
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise ConfigError(f"{given} needs {missing}: give both the certificate and its key")
    for path, option in ((cert, "--tls-cert"), (key, "--tls-key"), (client_ca, "--tls-client-ca")):
        if path is not None:
            _read(path, option)
    files = TLSFiles(cert, key, client_ca)
    files.ssl_context()  # a key that does not match or a file that is not PEM fails here
    return files


def is_loopback(host: str) -> bool:
    """True when only this machine can reach `host`; a name other than localhost may
    resolve anywhere, so it counts as exposed."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def management_enabled(model_control_mode: str, allow_shared_memory: bool) -> bool:
    """Whether any management call can change the server: load and unload only in explicit
    and on-demand modes, shared-memory registration only when allowed. Otherwise they are
    refused anyway, and a token would guard nothing."""
    return model_control_mode in ("explicit", "on-demand") or allow_shared_memory


def check_management_exposure(
    host: str, admin_token: str | None, enabled: bool, allow_unauthenticated: bool,
    where: str = "--host",
) -> None:  # fmt: skip
    """Refuse to offer management calls without the admin token beyond this machine."""
    if admin_token or allow_unauthenticated or not enabled or is_loopback(host):
        return
    raise ConfigError(
        f"{where} {host} is reachable from other machines, and management calls (model load "
        "and unload, shared-memory registration) would need no token: give --admin-token "
        "TOKEN, listen on 127.0.0.1, or pass --allow-unauthenticated-management if every "
        "client that can reach this address may manage the server"
    )
