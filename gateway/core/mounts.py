"""Models whose files lie outside the repository, where the operator said they are.

TF Serving's users name each model's base path (`--model_base_path`, a model config
file's `base_path`): `<base_path>/<version>/` holding a SavedModel, and no
`config.pbtxt`. A mount serves such a directory as a model of the repository under a
name, with the config it is given. Only the server's start (its command line and the
files it names) declares mounts, never a request; inside a mounted directory the
repository's rules hold as in its own (gateway/core/sealing.py: no symbolic link out of
it, no config path outside it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A mount as a front gives it: (directory, config as JSON, the versions it may serve).
Mounted = tuple[Path, dict[str, Any], frozenset[int] | None]


@dataclass(frozen=True)
class Mount:
    directory: Path  # the model's directory: its versions are its numbered subdirectories
    config: dict[str, Any] = field(default_factory=dict)  # Triton's config, as JSON
    # The versions it serves, chosen by the front that mounted it (None: those its
    # config's version policy chooses): TF Serving's policies are its front's to apply,
    # and a SavedModel's signature is a model of its own that not every version has.
    versions: frozenset[int] | None = None
