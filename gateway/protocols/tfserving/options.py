"""What turns TF Serving's fronts on: `accel-gateway tensorflow-model-server` makes it
from TF Serving's flags and model config file; `serve --tfserving-port` for the models
of a repository."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.protocols.tfserving.reload import Polling
from gateway.protocols.tfserving.served import TfServing


@dataclass(frozen=True)
class TfServingOptions:
    serving: TfServing
    grpc_port: int | None = 8500  # None: that front is off
    rest_port: int | None = None
    rest_timeout_s: float = 30.0  # --rest_api_timeout_in_ms
    polling: Polling = Polling(versions_s=0)  # what to look at again while serving
    prometheus_path: str | None = None  # where REST serves the metrics page (None: not)
    # The gRPC port's own TLS files (--ssl_config_file; gateway/operation/security.py's
    # TLSFiles, which this layer does not import).
    grpc_tls: Any = None

    @classmethod
    def for_repository(
        cls, grpc_port: int | None, rest_port: int | None
    ) -> TfServingOptions | None:
        """`serve --tfserving-port / --tfserving-rest-port`: every model of the repository
        through TF Serving's APIs (None: neither port asked for)."""
        if grpc_port is None and rest_port is None:
            return None
        return cls(TfServing({}, repository_models=True), grpc_port, rest_port)

    def ports(self) -> dict[str, int]:
        named = {"TF Serving gRPC": self.grpc_port, "TF Serving REST": self.rest_port}
        return {name: port for name, port in named.items() if port is not None}
