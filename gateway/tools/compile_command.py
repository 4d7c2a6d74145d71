"""`accel-gateway compile MODEL_DIR --target llvm|cuda [--tune-trials N]`.

Compiles a `tvm` model ahead of time into `<MODEL_DIR>/<version>/tvm-<target>/`, so that
a production server loads the runtime libraries only. `serve` uses them when their
manifest matches the model file, the target (the serving host's CPU for llvm, its GPU's
architecture for cuda), the TVM version and the batch buckets; else it logs why not and
compiles as usual.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from accel_base.errors import InvalidArgument
from accel_base.version_dirs import available_versions, version_dir
from backends import BackendUnavailable
from gateway.core.model_config import platform_of, read_config
from gateway.core.model_dirs import versions_to_load


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compile",
        help="compile a tvm model ahead of time into its version directory",
        description=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("model_dir", type=Path, metavar="MODEL_DIR", help="the model's directory")
    parser.add_argument("--target", choices=("llvm", "cuda"), required=True)
    parser.add_argument(
        "--tune-trials",
        type=int,
        default=0,
        metavar="N",
        help="MetaSchedule trials per batch bucket (default 0: TVM's default schedules)",
    )
    parser.add_argument(
        "--version",
        type=int,
        action="append",
        metavar="N",
        help="version to compile; repeatable (default: those the config's version_policy serves)",
    )
    parser.add_argument(
        "--cuda-arch",
        metavar="sm_XY",
        help="GPU architecture for --target cuda (default: that of GPU 0 here)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _compile(args)
    except (BackendUnavailable, InvalidArgument) as exc:  # ConfigError is one
        print(f"accel-gateway compile: {exc}", file=sys.stderr)
        return 1


def _compile(args: argparse.Namespace) -> int:
    if args.tune_trials < 0:
        raise BackendUnavailable(f"--tune-trials must be >= 0, got {args.tune_trials}")
    model_dir: Path = args.model_dir
    if not model_dir.is_dir():
        raise BackendUnavailable(f"{model_dir} is not a directory")
    config = read_config(model_dir)
    if platform_of(config) != "tvm":
        raise BackendUnavailable(
            f"model '{config.name}' has backend '{platform_of(config)}'; compile is for "
            'models with backend: "tvm"'
        )
    # Imported here: the TVM package is an optional extra, needed by this command only.
    from backends.buckets import batch_buckets
    from backends.tvm_compile import aot_directory, build_target, compile_libraries, target_kind

    if args.cuda_arch and args.target != "cuda":
        raise BackendUnavailable("--cuda-arch goes with --target cuda")
    versions = args.version or versions_to_load(config, available_versions(model_dir))
    target = build_target(args.target, args.cuda_arch)
    filename = config.default_model_filename or "model.onnx"
    for version in versions:
        artifact = version_dir(model_dir, version) / filename
        if not artifact.is_file():
            raise BackendUnavailable(
                f"model '{config.name}' version {version}: {artifact} is missing"
            )
        destination = aot_directory(artifact.parent, target_kind(target))
        started = time.perf_counter()
        with _progress_bar(args.tune_trials) as progress:
            manifest = compile_libraries(
                artifact, config.name, target, batch_buckets(config), args.tune_trials,
                destination, progress=progress,
            )  # fmt: skip
        print(
            f"compiled {config.name} version {version} for {target} "
            f"(batch sizes {manifest.buckets or 'unbatched'}, {args.tune_trials} tuning trials "
            f"per bucket) into {destination} in {time.perf_counter() - started:.1f} s"
        )
    return 0


class _progress_bar:
    """A tqdm bar over the tuning trials of every bucket, when there are any."""

    def __init__(self, trials: int) -> None:
        self._trials = trials
        self._bar = None

    def __enter__(self):
        if not self._trials:
            return None
        from tqdm import tqdm

        self._bar = bar = tqdm(total=0, unit="trial", desc="tuning", file=sys.stderr)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        return progress

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
