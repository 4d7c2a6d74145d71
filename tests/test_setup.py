"""The set-up needs nothing outside the repository: no script, test, benchmark or
image file reaches beside it, and perf_analyzer's installer (scripts/) is idempotent."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import MODEL_ANALYZER, PERF_ANALYZER, installed_tool

ROOT = Path(__file__).resolve().parents[1]
# Places a fresh clone does not have: the directory beside the repository, and the
# machines this project was first built on.
OUTSIDE = re.compile(r"\.\./shared|\.\./\.library|/work/")
CHECKED = ("scripts/*", ".ci/*", "docker/*", "Dockerfile", "pyproject.toml",
           "tests/**/*.py", "benchmarks/*.py", "loadtests/*.py", "deploy/**/*.yaml")  # fmt: skip


def test_nothing_reaches_outside_the_repository():
    reaching = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for pattern in CHECKED
        for path in ROOT.glob(pattern)
        if path.is_file() and path != Path(__file__)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert reaching == []


@pytest.mark.parametrize(
    ("tool", "installer"),
    [(PERF_ANALYZER, "install-perf-analyzer"), (MODEL_ANALYZER, "install-model-analyzer")],
)
def test_the_tool_installers_are_idempotent(tool: Path, installer: str):
    installed_tool(tool, installer)
    before = tool.stat().st_mtime_ns
    start = time.monotonic()
    subprocess.run([str(ROOT / "scripts" / installer)], check=True, timeout=120)
    assert time.monotonic() - start < 30  # found working: nothing downloaded again
    assert tool.stat().st_mtime_ns == before
    version = subprocess.run([str(tool), "--version"], capture_output=True, text=True)
    assert version.returncode == 0
