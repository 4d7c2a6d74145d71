"""A worker process imports the base, the backends and workers/, never the server."""

from __future__ import annotations

import subprocess
import sys

SERVER_MODULES = ("gateway", "grpc", "fastapi", "uvicorn", "starlette", "orjson")


def test_a_worker_imports_no_server_module():
    code = (
        "import sys, workers.main, workers.client, backends.onnx_runtime, backends.buckets, "
        "backends.parameters, accel_base.batch\n"
        f"leaked = sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_MODULES!r})\n"
        "print(','.join(leaked))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "", f"a worker would import: {result.stdout.strip()}"
