"""Starting `accel-gateway tensorflow-model-server` on free ports for the integration
tests, and waiting until a model of it is AVAILABLE."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from gateway.launch import free_ports
from tests.conftest import wait_until


def start_tfserving(
    tmp: Path, model: str, *flags: str, v2_ports: bool = True
) -> tuple[subprocess.Popen, str, int]:
    """The server, its REST URL and its gRPC port, once `model` has a version AVAILABLE;
    without `v2_ports`, the server chooses its V2 ports."""
    grpc_port, rest, http, v2_grpc, metrics = free_ports(5)
    v2 = [f"--v2_http_port={http}", f"--v2_grpc_port={v2_grpc}", f"--v2_metrics_port={metrics}"]
    with open(tmp / "server.log", "wb") as log:  # (the child keeps its own descriptor)
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway", "tensorflow-model-server", f"--port={grpc_port}",
             f"--rest_api_port={rest}", *(v2 if v2_ports else []), *flags],
            cwd=tmp, env={**os.environ, "TMPDIR": str(tmp)}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{rest}"

    def available() -> bool:
        assert server.poll() is None, (tmp / "server.log").read_text()
        try:
            states = httpx.get(f"{url}/v1/models/{model}", timeout=2).json()
        except httpx.HTTPError:
            return False
        return any(s["state"] == "AVAILABLE" for s in states.get("model_version_status", []))

    wait_until(available, timeout_s=180)
    return server, url, grpc_port
