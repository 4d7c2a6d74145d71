"""Compile an ONNX model with TVM, and keep the result on disk.

One shared library is built per batch bucket: the ONNX graph is imported with TVM's
Relax ONNX frontend with its batch dimension fixed to the bucket (static shapes, which
MetaSchedule needs to tune), optionally tuned, and compiled with `tvm.compile`. Other
dimensions stay symbolic. A `manifest.json` beside the libraries records what they were
built from; its key decides whether a directory of libraries may serve a model:

- ahead of time, `accel-gateway compile` writes them into `<version>/tvm-<target>/`;
- at load time, they go to `<cache root>/tvm/<key>/`, so a second load compiles nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import onnx
import tvm
from tvm.relax.frontend.onnx import from_onnx

from accel_base.cache import cache_root
from backends import onnx_graph
from backends.base import BackendUnavailable, first_line
from backends.buckets import check_batch_dimension
from backends.tvm_tuning import tune_and_compile

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT = 1  # bump when the directory layout or manifest fields change
TARGET_KINDS = ("llvm", "cuda")

# (trials done, trials in the budget) while tuning.
Progress = Callable[[int, int], None]


def build_target(kind: str, cuda_arch: str | None = None, gpu: int = 0) -> tvm.target.Target:
    """llvm for this host's CPU (its features included), or cuda for `cuda_arch`
    (default: the architecture of GPU `gpu`)."""
    if kind == "llvm":
        from tvm.target import codegen

        return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    if kind == "cuda":
        if cuda_arch is None:
            device = tvm.cuda(gpu)
            if not device.exist:
                raise BackendUnavailable(
                    "target cuda: TVM sees no CUDA GPU here to take the architecture from; "
                    "name one (e.g. --cuda-arch sm_90)"
                )
            cuda_arch = "sm_" + device.compute_version.replace(".", "")
        try:
            return tvm.target.Target({"kind": "cuda", "arch": cuda_arch})
        except Exception as exc:  # TVM reports a bad arch with its own error type
            raise BackendUnavailable(f"target cuda with arch '{cuda_arch}': {exc}") from None
    raise BackendUnavailable(f"unknown TVM target '{kind}', expected one of {TARGET_KINDS}")


def target_kind(target: tvm.target.Target) -> str:
    return str(target.kind.name)


@dataclass(frozen=True)
class Manifest:
    """What a directory of compiled libraries was built from, and its files."""

    model_sha256: str
    target: str  # the target as TVM prints it (JSON)
    tvm_version: str
    buckets: list[int]  # [] for an unbatched model
    tune_trials: int
    # bucket ("0" when unbatched) -> file name. Names carry a content hash: glibc hands
    # back an already-loaded library for a path it has seen, so a recompiled library
    # must never reuse the old one's path.
    libraries: dict[str, str]
    library_sha256: dict[str, str]  # file name -> sha256, checked before loading
    format: int = FORMAT

    def key(self) -> str:
        """The cache key: everything the libraries depend on."""
        fields = {k: v for k, v in asdict(self).items() if k not in ("libraries", "library_sha256")}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]

    def mismatch(self, wanted: Manifest, *, ignore_tuning: bool) -> str | None:
        """The first field that keeps these libraries from serving `wanted`, or None."""
        for field in ("format", "model_sha256", "target", "tvm_version", "buckets"):
            if getattr(self, field) != getattr(wanted, field):
                return f"{field} is {getattr(self, field)!r}, not {getattr(wanted, field)!r}"
        if not ignore_tuning and self.tune_trials != wanted.tune_trials:
            return f"tune_trials is {self.tune_trials}, not {wanted.tune_trials}"
        return None

    def write(self, directory: Path) -> None:
        (directory / MANIFEST).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, directory: Path) -> Manifest | None:
        try:
            return cls(**json.loads((directory / MANIFEST).read_text()))
        except (OSError, ValueError, TypeError):
            return None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wanted_manifest(
    onnx_path: Path, target: tvm.target.Target, buckets: tuple[int, ...], tune_trials: int
) -> Manifest:
    """The manifest that libraries serving this model, target and options must carry."""
    return Manifest(
        model_sha256=file_sha256(onnx_path),
        target=str(target),
        tvm_version=tvm.__version__,
        buckets=list(buckets),
        tune_trials=tune_trials,
        libraries={},
        library_sha256={},
    )


def aot_directory(version_dir: Path, kind: str) -> Path:
    """Where `accel-gateway compile` puts the libraries of one target."""
    return version_dir / f"tvm-{kind}"


def cache_directory(manifest: Manifest) -> Path:
    return cache_root() / "tvm" / manifest.key()


def import_onnx(graph: onnx.ModelProto, model: str) -> tvm.IRModule:
    """The Relax module of an ONNX graph; an operator TVM cannot import is named."""
    try:
        return from_onnx(graph, keep_params_in_input=False)
    except tvm.error.OpNotImplemented as exc:
        raise BackendUnavailable(f"model '{model}': TVM cannot import it: {exc}") from None
    except Exception as exc:  # converter errors carry TVM's internal types
        raise BackendUnavailable(
            f"model '{model}': TVM's ONNX importer failed: {first_line(exc)}"
        ) from None


def compile_libraries(
    onnx_path: Path,
    model: str,
    target: tvm.target.Target,
    buckets: tuple[int, ...],
    tune_trials: int,
    destination: Path,
    progress: Progress | None = None,
) -> Manifest:
    """Compile one library per bucket into `destination` (replaced as a whole, so a reader
    never sees a half-written directory) and return its manifest."""
    manifest = wanted_manifest(onnx_path, target, buckets, tune_trials)
    graph = onnx_graph.load(onnx_path, model)
    inputs, _ = onnx_graph.tensor_specs(graph, model)
    if buckets:
        check_batch_dimension(
            inputs, model, "dynamic", "export the ONNX model with a named batch dim"
        )
    static_from = 1 if buckets else 0  # the batch dimension is fixed per bucket
    if tune_trials and any(-1 in spec.shape[static_from:] for spec in inputs):
        raise BackendUnavailable(
            f"model '{model}': MetaSchedule tunes static shapes only, and an input has a "
            "dynamic dimension besides the batch; set tune_trials to 0 or fix the dimension"
        )
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide the libraries from a server's user
    try:
        libraries, hashes = {}, {}
        bucket_list = buckets or (0,)
        for index, bucket in enumerate(bucket_list):
            started = time.perf_counter()
            bucket_graph = onnx_graph.with_batch_size(graph, bucket) if bucket else graph
            module = import_onnx(bucket_graph, model)
            if tune_trials:
                executable = tune_and_compile(
                    module, target, tune_trials, staging / f"tuning-{bucket}",
                    _overall(progress, index * tune_trials, tune_trials * len(bucket_list)),
                )  # fmt: skip
            else:
                # On cuda, tvm.compile's pipeline gives every kernel DLight's default GPU
                # schedule (thread bindings that CUDA code generation needs).
                executable = tvm.compile(module, target=target)
            built = staging / f"batch{bucket}.so"
            executable.export_library(str(built))
            digest = file_sha256(built)
            name = f"batch{bucket}-{digest[:16]}.so"
            built.rename(staging / name)
            libraries[str(bucket)], hashes[name] = name, digest
            log.info(
                "model '%s': compiled batch %s for %s in %.1f s",
                model,
                bucket or "unbatched",
                target_kind(target),
                time.perf_counter() - started,
            )
            shutil.rmtree(staging / f"tuning-{bucket}", ignore_errors=True)
        manifest = Manifest(
            **{**asdict(manifest), "libraries": libraries, "library_sha256": hashes}
        )
        manifest.write(staging)
        _replace_directory(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def _overall(progress: Progress | None, before: int, total: int) -> Progress | None:
    """Progress of one bucket's tuning, reported as progress over every bucket's."""
    if progress is None:
        return None
    return lambda done, budget: progress(before + min(done, budget), total)


def _replace_directory(staging: Path, destination: Path) -> None:
    old = destination.with_name(f".{destination.name}.old-{uuid.uuid4().hex[:8]}")
    if destination.exists():
        os.rename(destination, old)
    os.rename(staging, destination)
    shutil.rmtree(old, ignore_errors=True)


def load_libraries(
    directory: Path, manifest: Manifest, model: str
) -> dict[int, tvm.runtime.Module]:
    """bucket (0 when unbatched) -> the loaded library. Each file's hash is checked first:
    loading a truncated library can kill the process (SIGBUS) rather than raise."""
    modules = {}
    for bucket, name in manifest.libraries.items():
        path = directory / name
        try:
            intact = file_sha256(path) == manifest.library_sha256.get(name)
        except OSError as exc:
            raise BackendUnavailable(f"model '{model}': cannot read {path}: {exc}") from None
        if not intact:
            raise BackendUnavailable(
                f"model '{model}': {path} does not match the sha256 in its manifest"
            )
        try:
            modules[int(bucket)] = tvm.runtime.load_module(str(path))
        except Exception as exc:  # a foreign .so fails inside TVM's loader
            raise BackendUnavailable(f"model '{model}': cannot load {path}: {exc}") from None
    return modules


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold `<directory>.lock`, so one process at a time compiles (or reads) a cache entry."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
