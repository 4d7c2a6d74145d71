"""Imports point down the layers of docs/design.md, read from the source (no import
runs): the base imports nothing above it, a backend never the server, a worker never
the server, and the V2 fronts reach the server's internals only through the Core
interface (gateway/core/interface.py). tests/workers/test_layering.py checks what a worker
process really loads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What a protocol may import of the server: the Core interface and the transport-free
# pieces a front encodes and decodes with (the request and response, shared-memory
# regions, a routed answer's header name). Everything else of gateway.core is reached
# through gateway.core.interface, and the other rooms above the core not at all.
PROTOCOLS_MAY_USE = (
    "gateway.core.interface", "gateway.core.inference", "gateway.core.shared_memory",
    "gateway.core.routing.router",
)  # fmt: skip
SERVER_INTERNALS = (
    "gateway.core", "gateway.front_processes", "gateway.tools", "gateway.server",
    "gateway.listeners", "gateway.cli",
)  # fmt: skip

# (the files, what they must not import)
RULES = {
    "accel_base": ("gateway", "backends", "workers", "models", "benchmarks", "tests"),
    "backends": ("gateway", "workers", "models", "benchmarks", "tests"),
    "workers": ("gateway", "models", "benchmarks", "tests"),
    "gateway": ("models", "benchmarks", "tests", "loadtests"),
    "gateway/protocols": SERVER_INTERNALS,
    # The rooms point down too: the core never reaches up into the protocols or tools.
    "gateway/core": (
        "gateway.protocols",
        "gateway.tools",
        "gateway.front_processes",
        "gateway.server",
        "gateway.listeners",
        "gateway.cli",
    ),
    "gateway/operation": (
        "gateway.protocols",
        "gateway.tools",
        "gateway.front_processes",
        "gateway.server",
        "gateway.cli",
    ),
}
# File -> imports it may make that its layer may not: the command line sits above every
# layer and builds the example models.
EXCEPTIONS = {
    "gateway/cli.py": ("models",),
}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def below(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("layer", sorted(RULES))
def test_imports_point_down(layer):
    wrong = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        allowed = EXCEPTIONS.get(relative, ())
        if layer == "gateway/protocols":
            allowed = (*allowed, *PROTOCOLS_MAY_USE)
        for name in sorted(imported(path)):
            if any(below(name, p) for p in RULES[layer]) and not any(
                below(name, p) for p in allowed
            ):
                wrong.append(f"{relative} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_wrong_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from gateway.core.repository import ModelRepository\nimport backends.base\n")
    names = imported(probe)
    assert any(below(n, "gateway.core.repository") for n in names)
    assert "backends.base" in names
