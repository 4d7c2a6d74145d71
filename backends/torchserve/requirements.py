"""An archive's requirementsFile, installed into its version's own directory (PACKAGES)
when the operator allows it (install_py_dep_per_model).

The file comes from whoever registers the archive, so it is read here, not handed to pip:
each line must be a plain requirement (a name, extras, versions, markers) or a path to a
wheel or source archive inside the archive itself. Options (`-r`, `-e`, `--index-url`,
...), URLs and direct references are refused by line, so a registration can neither read
the server's files nor make it fetch from an address it names; packages come from the
index the operator's pip is configured with. pip's own words go to the server's log,
not back to the caller. One install runs at a time.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from backends.torchserve import PACKAGES
from backends.torchserve.archive import ArchiveError, inside

log = logging.getLogger(__name__)
INSTALL_TIMEOUT_S = 600.0
_one_at_a_time = threading.Lock()
_FILES = (".whl", ".tar.gz", ".zip", ".tgz")
# What pip's run keeps of the server's environment: where things are, and the operator's
# own pip settings (its index); not the server's secrets.
_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR")


def requirements_of(version_dir: Path, requirements: str) -> list[str]:
    """The requirements to install: each line checked, local files as absolute paths."""
    path = inside(version_dir, requirements)
    if path is None or not path.is_file():
        raise ArchiveError(f"its requirementsFile {requirements} is not a file of the archive")
    from packaging.requirements import InvalidRequirement, Requirement

    wanted = []
    for number, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        where = f"its requirementsFile, line {number} ({line[:80]})"
        if line.startswith("-"):
            raise ArchiveError(f"{where}: options are not taken; list requirements only")
        if "://" in line or line.split("+", 1)[0] in ("git", "hg", "svn", "bzr"):
            raise ArchiveError(f"{where}: URLs are not fetched; name the package instead")
        if line.startswith(("./", "../", "/")) or line.endswith(_FILES):
            local = inside(version_dir, line)
            if local is None or not local.is_file():
                raise ArchiveError(f"{where}: a file must be one the archive carries")
            wanted.append(str(local))
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            raise ArchiveError(f"{where}: not a requirement (name, extras, versions)") from None
        if requirement.url:
            raise ArchiveError(f"{where}: URLs are not fetched; name the package instead")
        wanted.append(line)
    return wanted


def install_requirements(version_dir: Path, requirements: str) -> None:
    """pip installs them into the version's own directory (PACKAGES)."""
    wanted = requirements_of(version_dir, requirements)
    if not wanted:
        return
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-input",
        "--disable-pip-version-check", "--target", str(version_dir / PACKAGES), *wanted,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k in _KEPT or k.startswith("PIP_")}
    with _one_at_a_time:
        try:
            result = subprocess.run(
                command, cwd=version_dir, env=env, capture_output=True, text=True,
                timeout=INSTALL_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise ArchiveError(
                f"installing its requirementsFile took over {INSTALL_TIMEOUT_S:g} s"
            ) from None
    if result.returncode != 0:
        log.warning("pip could not install %s's requirements: %s", version_dir,
                    (result.stderr or result.stdout).strip()[-2000:])  # fmt: skip
        raise ArchiveError(
            "its requirementsFile could not be installed (pip's words are in the server's log)"
        )
