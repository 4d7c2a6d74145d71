"""A remote model's settings, read from its config's `parameters` (string values, as
Triton's parameters are):

    endpoints            comma-separated host:port of the V2 servers (required); an
                         http:// or https:// prefix selects HTTP, grpc:// or grpcs://
                         gRPC, for that endpoint alone
    protocol             grpc (default) or http, for endpoints without a prefix
    remote_model         the model's name there (default: this model's name)
    remote_version       the version there (default: the remote's own choice)
    timeout_ms           one call's deadline (default 30000)
    connect_timeout_ms   a connection's deadline (default 2000)
    retries              further endpoints tried when a call was never sent (default 2)
    health_interval_ms   how often each endpoint's readiness is asked (default 1000)
    binary_data          HTTP: tensors in the binary extension (default true); false
                         sends JSON, for servers without it
    max_message_mb       the largest response accepted (default 256)
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable
from backends.parameters import bool_parameter, choice_parameter, int_parameter, string_parameter

PROTOCOLS = ("grpc", "http")
_SCHEMES = {"grpc": ("grpc", False), "grpcs": ("grpc", True), "http": ("http", False),
            "https": ("http", True)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One remote server: where it is and how to speak to it."""

    address: str  # host:port
    protocol: str  # "grpc" or "http"
    tls: bool

    def __str__(self) -> str:
        scheme = {("grpc", False): "grpc", ("grpc", True): "grpcs", ("http", False): "http",
                  ("http", True): "https"}[self.protocol, self.tls]  # fmt: skip
        return f"{scheme}://{self.address}"


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    endpoints: tuple[Endpoint, ...]
    model: str
    version: str
    timeout_s: float
    connect_timeout_s: float
    retries: int
    health_interval_s: float
    binary_data: bool
    max_message_bytes: int


def parse_endpoint(text: str, default_protocol: str, model: str) -> Endpoint:
    scheme, separator, address = text.strip().partition("://")
    if not separator:
        scheme, address = default_protocol, text.strip()
    if scheme not in _SCHEMES:
        raise BackendUnavailable(
            f"model '{model}': endpoint '{text}' has scheme '{scheme}'; use one of "
            f"{', '.join(s + '://' for s in _SCHEMES)} or none"
        )
    address = address.rstrip("/")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BackendUnavailable(
            f"model '{model}': endpoint '{text}' must be host:port (e.g. 127.0.0.1:8001)"
        )
    protocol, tls = _SCHEMES[scheme]
    return Endpoint(address, protocol, tls)


def _positive_ms(config: mc.ModelConfig, key: str, default_ms: int) -> float:
    value = int_parameter(config, key)
    if value is None:
        return default_ms / 1000
    if value <= 0:
        raise BackendUnavailable(f"model '{config.name}': parameter {key} must be above 0")
    return value / 1000


def read_settings(config: mc.ModelConfig) -> RemoteSettings:
    text = string_parameter(config, "endpoints") or ""
    protocol = choice_parameter(config, "protocol", PROTOCOLS)
    endpoints = tuple(
        parse_endpoint(part, protocol, config.name) for part in text.split(",") if part.strip()
    )
    if not endpoints:
        raise BackendUnavailable(
            f"model '{config.name}': a remote model needs the parameter endpoints, e.g. "
            'parameters { key: "endpoints" value { string_value: "127.0.0.1:8001" } }'
        )
    if len(set(endpoints)) != len(endpoints):
        raise BackendUnavailable(f"model '{config.name}': parameter endpoints names one twice")
    retries = int_parameter(config, "retries")
    if retries is not None and retries < 0:
        raise BackendUnavailable(f"model '{config.name}': parameter retries must be 0 or more")
    max_mb = int_parameter(config, "max_message_mb")
    if max_mb is not None and max_mb <= 0:
        raise BackendUnavailable(f"model '{config.name}': parameter max_message_mb must be above 0")
    return RemoteSettings(
        endpoints=endpoints,
        model=string_parameter(config, "remote_model") or config.name,
        version=string_parameter(config, "remote_version") or "",
        timeout_s=_positive_ms(config, "timeout_ms", 30_000),
        connect_timeout_s=_positive_ms(config, "connect_timeout_ms", 2_000),
        retries=2 if retries is None else retries,
        health_interval_s=_positive_ms(config, "health_interval_ms", 1_000),
        binary_data=bool_parameter(config, "binary_data", True),
        max_message_bytes=(max_mb or 256) << 20,
    )
