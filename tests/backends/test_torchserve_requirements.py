"""backends/torchserve/requirements.py: what of a requirementsFile reaches pip."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.torchserve.archive import ArchiveError
from backends.torchserve.requirements import requirements_of


def version(tmp_path: Path, lines: str) -> Path:
    directory = tmp_path / "1"
    directory.mkdir()
    (directory / "requirements.txt").write_text(lines)
    (directory / "dep-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "outside.whl").write_bytes(b"not the archive's")
    return directory


def test_plain_requirements_and_the_archives_own_files_pass(tmp_path):
    directory = version(
        tmp_path,
        "# a comment\nnumpy>=1.20\nrequests[socks]==2.31 ; python_version>'3'\n"
        "./dep-1.0-py3-none-any.whl  # ours\n",
    )
    assert requirements_of(directory, "requirements.txt") == [
        "numpy>=1.20", "requests[socks]==2.31 ; python_version>'3'",
        str((directory / "dep-1.0-py3-none-any.whl").resolve()),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "line, said",
    [
        ("-r /proc/self/environ", "options are not taken"),
        ("--index-url http://127.0.0.1:9/simple", "options are not taken"),
        ("-e ../outside", "options are not taken"),
        ("../outside.whl", "a file must be one the archive carries"),
        ("/etc/passwd.tar.gz", "a file must be one the archive carries"),
        ("pkg @ https://example.com/pkg.whl", "URLs are not fetched"),
        ("git+https://example.com/repo", "URLs are not fetched"),
        ("not a requirement!", "not a requirement"),
    ],
)  # fmt: skip
def test_options_urls_and_files_outside_the_archive_are_refused_by_line(tmp_path, line, said):
    directory = version(tmp_path, f"numpy\n{line}\n")
    with pytest.raises(ArchiveError, match=said) as refused:
        requirements_of(directory, "requirements.txt")
    assert "line 2" in str(refused.value)


def test_the_file_itself_must_be_the_archives(tmp_path):
    directory = version(tmp_path, "numpy\n")
    with pytest.raises(ArchiveError, match="not a file of the archive"):
        requirements_of(directory, "../outside.whl")
