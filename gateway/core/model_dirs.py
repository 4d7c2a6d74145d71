"""What a model's directory holds: its version directories, which of them the config's
version_policy serves, and a fingerprint of its files (to notice changes in poll mode)."""

from __future__ import annotations

from pathlib import Path

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc


def versions_to_load(config: mc.ModelConfig, available: list[int]) -> list[int]:
    """Apply the config's version_policy (default: the latest one) to what is on disk."""
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return available
    if choice == "specific":
        missing = [v for v in policy.specific.versions if v not in available]
        if missing:
            raise InvalidArgument(
                f"model '{config.name}': version_policy names version(s) {missing} that have "
                f"no directory; present: {available}"
            )
        return sorted(policy.specific.versions)
    count = policy.latest.num_versions if choice == "latest" else 1
    return available[-max(count, 1) :]


def fingerprint(model_dir: Path) -> tuple:
    """File names, sizes and mtimes under a model directory, to notice changes."""
    stats = []
    for path in sorted(model_dir.rglob("*")):
        try:
            info = path.stat()
        except OSError:
            continue
        stats.append((str(path.relative_to(model_dir)), info.st_size, info.st_mtime_ns))
    return tuple(stats)
