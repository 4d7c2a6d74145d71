"""The seams are checked, not described: mypy reads the core interface
(gateway/core/interface.py), the three cores that implement it (tests/typecheck/) and the
fronts written against it, as pyproject.toml's [tool.mypy] lists them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_type_checker_passes_on_the_seams():
    done = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_a_core_that_lacks_a_call_fails_the_check(tmp_path):
    """The check can fail: a core whose unload takes fewer arguments is not a Core."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from gateway.front_processes.remote import RemoteCore\n"
        "from gateway.core.interface import Core\n\n\n"
        "class Broken(RemoteCore):\n"
        "    async def unload_model(self, name: str) -> None:  # type: ignore[override]\n"
        "        pass\n\n\n"
        "def front(core: Broken) -> Core:\n"
        "    return core\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", str(probe)], cwd=ROOT, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 1
    assert 'Incompatible return value type (got "Broken", expected "Core")' in done.stdout
    assert "unload_model" in done.stdout
