"""Regenerate accel_base/proto/*_pb2*.py (and their type stubs) from protos/*.proto.

    python -m gateway.tools.proto.regenerate           # rewrite the committed modules
    python -m gateway.tools.proto.regenerate --check   # exit 1 if they are out of date

Both the model config and the inference service go to accel_base.proto, the
transport-free base: backends and worker processes import the config, the remote
backend (a client of other V2 servers) the service too. TorchServe's gRPC services
(protos/torchserve/) go to accel_base.proto.torchserve. protoc's output is
post-processed: its absolute imports (``import model_config_pb2``) become package
imports, and descriptors go to ``accel_base.proto.POOL`` instead of the default pool,
so these modules can be imported next to tritonclient's (and TorchServe's own stubs).
"""

from __future__ import annotations

import argparse
import importlib.resources
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[2]
PROTO_DIR = REPO_ROOT / "protos"
PROTOS = (
    "model_config.proto", "grpc_service.proto",
    "torchserve/status.proto", "torchserve/inference.proto", "torchserve/management.proto",
)  # fmt: skip
# The ones that declare a service.
SERVICE_PROTOS = ("grpc_service.proto", "torchserve/inference.proto", "torchserve/management.proto")
# Generated module -> the directory (relative to the repository) it is committed in.
OUTPUTS = {
    "grpc_service_pb2.py": "accel_base/proto",
    "grpc_service_pb2_grpc.py": "accel_base/proto",
    "model_config_pb2.py": "accel_base/proto",
    # Type stubs, so that the type checker knows the messages (tests/test_typecheck.py).
    "grpc_service_pb2.pyi": "accel_base/proto",
    "model_config_pb2.pyi": "accel_base/proto",
    # TorchServe's gRPC services (protos/torchserve/ -> accel_base/proto/torchserve/).
    "torchserve/status_pb2.py": "accel_base/proto",
    "torchserve/status_pb2.pyi": "accel_base/proto",
    "torchserve/inference_pb2.py": "accel_base/proto",
    "torchserve/inference_pb2.pyi": "accel_base/proto",
    "torchserve/inference_pb2_grpc.py": "accel_base/proto",
    "torchserve/management_pb2.py": "accel_base/proto",
    "torchserve/management_pb2.pyi": "accel_base/proto",
    "torchserve/management_pb2_grpc.py": "accel_base/proto",
}


def _torchserve_import(module: str, applies_to: str) -> tuple[str, str, str]:
    return (
        f"from torchserve import {module} as",
        f"from accel_base.proto.torchserve import {module} as",
        applies_to,
    )


def _well_known_first(kind: str, applies_to: str) -> tuple[str, str, str]:
    """TorchServe's protos import google.protobuf's well-known types (Empty, and Any
    through status.proto). POOL does not fall back on the default pool, so the file of
    the one imported is added to POOL, from the module protobuf ships, before the file
    that imports it (accel_base.proto.add_well_known)."""
    add = "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile("
    first = (
        "from accel_base.proto import add_well_known as _add_well_known\n"
        f"_add_well_known(google_dot_protobuf_dot_{kind}__pb2)\n"
    )
    return (add, first + add, applies_to)


# (old, new, applies to) substitutions made on protoc's output; each must match.
_REWRITES = (
    (
        "import model_config_pb2 as",
        "from accel_base.proto import model_config_pb2 as",
        "grpc_service_pb2.py",
    ),
    (
        "import model_config_pb2 as",
        "from accel_base.proto import model_config_pb2 as",
        "grpc_service_pb2.pyi",
    ),
    ("import grpc_service_pb2 as", "from . import grpc_service_pb2 as", "grpc_service_pb2_grpc.py"),
    _torchserve_import("status_pb2", "torchserve/inference_pb2.py"),
    _torchserve_import("status_pb2", "torchserve/inference_pb2.pyi"),
    _torchserve_import("inference_pb2", "torchserve/inference_pb2_grpc.py"),
    _torchserve_import("management_pb2", "torchserve/management_pb2_grpc.py"),
    _well_known_first("any", "torchserve/status_pb2.py"),
    _well_known_first("empty", "torchserve/inference_pb2.py"),
    ("_descriptor_pool.Default()", "_POOL", "_pb2.py"),
    (
        "from google.protobuf import descriptor_pool as _descriptor_pool\n",
        "from google.protobuf import descriptor_pool as _descriptor_pool\n"
        "from accel_base.proto import POOL as _POOL\n",
        "_pb2.py",
    ),
)


def _protoc(*args: str) -> None:
    include = importlib.resources.files("grpc_tools") / "_proto"
    if protoc.main(["grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}", *args]) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")


def generate(out_root: Path) -> list[Path]:
    """Generate the modules under ``out_root`` (a repository root); return the paths written."""
    with tempfile.TemporaryDirectory() as tmp:
        _protoc(f"--python_out={tmp}", f"--pyi_out={tmp}", *(str(PROTO_DIR / p) for p in PROTOS))
        _protoc(f"--grpc_python_out={tmp}", *(str(PROTO_DIR / p) for p in SERVICE_PROTOS))
        written = []
        for name in OUTPUTS:
            text = (Path(tmp) / name).read_text()
            for old, new, suffix in _REWRITES:
                if name.endswith(suffix):
                    if old not in text:
                        raise RuntimeError(f"{name}: expected {old!r} in protoc output")
                    text = text.replace(old, new)
            path = out_root / OUTPUTS[name] / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    return written


def stale_files() -> list[str]:
    """Repository-relative paths of committed modules that differ from fresh output."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = []
        for path in fresh:
            relative = path.relative_to(tmp)
            committed = REPO_ROOT / relative
            if not committed.is_file() or committed.read_bytes() != path.read_bytes():
                stale.append(str(relative))
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale modules")
    args = parser.parse_args(argv)
    if not args.check:
        for path in generate(REPO_ROOT):
            print(f"wrote {path.relative_to(REPO_ROOT)}")
        return 0
    stale = stale_files()
    for name in stale:
        print(f"stale: {name} (run: python -m gateway.tools.proto.regenerate)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
