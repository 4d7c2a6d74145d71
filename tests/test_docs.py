"""The docs site builds with no warning (mkdocs --strict), every command-line flag is in
its generated reference, and the README stays a front door whose links all resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from gateway.cli import build_parser
from gateway.tools.cli_reference import option_strings, render

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_build_with_no_warnings(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "reference" / "cli" / "index.html").is_file()


def test_every_flag_of_every_command_is_in_the_reference():
    parser = build_parser()
    rows = [line for line in render(parser).splitlines() if line.startswith("| `")]
    flags = option_strings(parser)
    assert len(flags) > 60  # serve alone has dozens
    missing = [f for f in flags if not any(re.search(rf"`{re.escape(f)}[ `]", r) for r in rows)]
    assert not missing, f"flags without a row in the reference: {missing}"


def test_the_readme_is_a_front_door_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 260
    assert "scripts/serve" in text and "scripts/test" in text
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links to the docs"
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"README links to {link}, which is not there"
