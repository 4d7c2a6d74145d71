"""Builds the example model repository, and caches one per builder version for the server.

``python -m models.build DEST`` builds into DEST; without DEST it makes sure the cached
repository exists and prints its path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from models import digits, identity, mlp, simple

# Part of the cache directory name: bump whenever any model or config changes, so that
# existing caches are rebuilt instead of silently served stale.
BUILDER_VERSION = "2"

Log = Callable[[str], object]


def build_repository(dest: Path, log: Log = print) -> list[str]:
    """Build every example model into ``dest`` (created if needed); returns the model names."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    names: list[str] = []

    names.append(simple.build(dest))
    log(f"{simple.NAME}: INT32 sum and difference")

    for suffix, (triton_type, _) in identity.DATATYPES.items():
        names.append(identity.build_one(dest, suffix))
        log(f"{identity.model_name(suffix)}: Identity, {triton_type}")

    accuracy = digits.build(dest)
    names.append(digits.NAME)
    n_images = len(digits.held_out()[1])
    log(f"{digits.NAME}: held-out accuracy {accuracy:.4f} ({n_images} images)")

    # mlp_wide (models.mlp.build_wide, ~294 MB) is deliberately not here: built only on request.
    names.append(mlp.build(dest))
    log(
        f"{mlp.NAME}: FP32 MLP {mlp.N_FEATURES}->{mlp.HIDDEN}->{mlp.HIDDEN}->{mlp.N_CLASSES}, "
        f"dynamic batching (max_batch_size {mlp.MAX_BATCH_SIZE})"
    )
    return names


def default_cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "accel-gateway"


def ensure_example_repository(cache_root: Path | None = None, log: Log = print) -> Path:
    """Return ``<cache_root>/example-repository-<BUILDER_VERSION>``, building it if missing.

    The build goes into a temporary sibling that is renamed into place only when complete, so
    the final path never holds a half-built repository; if another process finishes first, its
    repository is used and ours discarded.
    """
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    final = root / f"example-repository-{BUILDER_VERSION}"
    if final.is_dir():
        return final

    root.mkdir(parents=True, exist_ok=True)
    log(f"accel-gateway: building the example model repository into {final} (first run only)")
    started = time.perf_counter()
    # A unique hidden sibling (same filesystem, so the rename is atomic); mkdir rather than
    # mkdtemp so the repository gets the usual umask permissions instead of 0700.
    tmp = root / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        names = build_repository(tmp, log=lambda line: log(f"  {line}"))
        try:
            # Atomic on one filesystem; fails if a concurrent builder already put theirs there.
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            log("accel-gateway: another process built it first; using that one")
            return final
        log(f"accel-gateway: built {len(names)} models in {time.perf_counter() - started:.1f} s")
        return final
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m models.build", description="Build the example model repository."
    )
    parser.add_argument(
        "dest",
        nargs="?",
        type=Path,
        help="directory to build into (default: the per-user cache, built only once)",
    )
    args = parser.parse_args(argv)
    if args.dest is None:
        print(ensure_example_repository())
        return 0
    started = time.perf_counter()
    names = build_repository(args.dest)
    print(f"built {len(names)} models into {args.dest} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
