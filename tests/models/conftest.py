"""tests/models reads the session's example repository and its build log."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def built(example_build):
    return example_build


@pytest.fixture(scope="session")
def repo(example_build) -> Path:
    return example_build.repo
