"""Compiled backends (TVM, OpenCL) against eager PyTorch and ONNX Runtime, same model.

    .venv/bin/python -m benchmarks.compiled [--tune-trials 8] [--measurement-ms 3000]

One model, the PyTorch-trained digits classifier (pixels FP32 [N,64] -> probabilities FP32
[N,10]), served five ways: torch.export run eagerly (`pytorch_export`), ONNX Runtime
(`onnxruntime_onnx`), TVM with its default schedules (`tvm`, tune_trials 0), TVM tuned by
MetaSchedule (`tvm`, tune_trials N per batch bucket) and tinygrad on OpenCL (`opencl`,
PoCL on this CPU). The ONNX variants share one model.onnx; the torch.export archive holds
the same weights. Each is measured at batch 1 and batch 32:

- in-process: the backend object loaded as the gateway loads it, `.run()` called in a loop
  for a fixed time window, in a fresh process pinned to the server's core before any
  framework is imported, as the gateway is (TVM imports torch, and torch sizes its thread
  pool by the cores it sees at import: imported on two cores and then pinned to one, eager
  PyTorch at batch 32 runs ~100x slower);
- gateway: one gateway (pinned to the server's core) serving all five, driven by
  perf_analyzer (HTTP, binary tensors, concurrency 4) on the other core.

Every figure is rows/s, and also a ratio to ONNX Runtime in-process at the same batch size,
measured in the same run (the floor): 1.0 is ONNX Runtime called directly, above 1 is
faster than it. gateway/in-process for one backend says what serving costs on top of it.
"max |dp|" is the largest difference of that backend's batch-32 probabilities from ONNX
Runtime's, a check that all five compute the same function.

The benchmark writes its own repository: max_batch_size 32 and, for TVM and OpenCL,
batch_buckets "1,32", so neither batch size is padded. TVM compiles (and tunes) at the
first load into $XDG_CACHE_HOME/accel-gateway/tvm; this benchmark points XDG_CACHE_HOME at
a fresh temporary directory (or --cache-dir), so the figures come from libraries built by
this run. Compiling and tuning run first, in this process, on all cores (MetaSchedule times
its candidates there); the measurements then load those libraries from the cache, in
process and in the gateway. Tuning costs roughly 20 s per trial on a 2-core machine: the
default budget (8 trials per bucket, 2 buckets) takes 5 to 10 minutes of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from backends import Backend, Device, backend_class
from benchmarks.perf import perf_analyzer, rate
from gateway.core.model import artifact_path
from gateway.core.model_config import platform_of, read_config
from gateway.launch import start_gateway
from models.build import ensure_example_repository

BATCH_SIZES = (1, 32)
CONCURRENCY = 4
BUCKETS = ",".join(map(str, BATCH_SIZES))
FLOOR = "digits_onnxruntime"
STARTED = time.monotonic()


@dataclass(frozen=True)
class Variant:
    name: str  # the model's name in the benchmark's repository
    label: str
    source: str  # the model in the example repository whose file it copies
    kind: str  # 'platform: "..."' or 'backend: "..."'
    framework: str  # the import it needs
    parameters: dict[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return "model.pt2" if self.source == "digits_torch_export" else "model.onnx"

    def config(self) -> str:
        text = f'name: "{self.name}"\n{self.kind}\nmax_batch_size: {max(BATCH_SIZES)}\n'
        for key, value in self.parameters.items():
            text += f'parameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'
        return text


def variants(tune_trials: int) -> list[Variant]:
    tvm = {"batch_buckets": BUCKETS}
    found = [
        Variant(FLOOR, "ONNX Runtime", "digits_torch_onnx", 'platform: "onnxruntime_onnx"',
                "onnxruntime"),
        # No compile_mode parameter: eager.
        Variant("digits_torch_eager", "PyTorch eager", "digits_torch_export",
                'platform: "pytorch_export"', "torch"),
        Variant("digits_tvm_untuned", "TVM untuned", "digits_torch_onnx", 'backend: "tvm"',
                "tvm", {**tvm, "tune_trials": "0"}),
        Variant("digits_tvm_tuned", f"TVM tuned ({tune_trials}/bucket)", "digits_torch_onnx",
                'backend: "tvm"', "tvm", {**tvm, "tune_trials": str(tune_trials)}),
        Variant("digits_opencl", "OpenCL (tinygrad)", "digits_torch_onnx",
                'backend: "opencl"', "tinygrad", {"batch_buckets": BUCKETS}),
    ]  # fmt: skip
    if tune_trials == 0:
        found = [v for v in found if v.name != "digits_tvm_tuned"]
    for variant in found:
        if importlib.util.find_spec(variant.framework) is None:
            progress(f"skipping {variant.name}: {variant.framework} is not installed")
    return [v for v in found if importlib.util.find_spec(v.framework) is not None]


def progress(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.0f} s] {message}", file=sys.stderr, flush=True)


def pin_all_threads(core: int) -> None:
    """Pin every thread of this process to `core` (threads that imports started too, which
    `os.sched_setaffinity(0, ...)` alone leaves on every core); later threads inherit it."""
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that has ended since
            os.sched_setaffinity(int(task), {core})


def write_repository(examples: Path, destination: Path, chosen: list[Variant]) -> None:
    for variant in chosen:
        version = destination / variant.name / "1"
        version.mkdir(parents=True)
        shutil.copyfile(examples / variant.source / "1" / variant.filename,
                        version / variant.filename)  # fmt: skip
        (destination / variant.name / "config.pbtxt").write_text(variant.config())


def load(model_dir: Path) -> Backend:
    """Version 1 of the model, loaded the way the gateway loads it (config included)."""
    config = read_config(model_dir)
    backend_type = backend_class(platform_of(config))
    return backend_type(artifact_path(model_dir, 1, config, backend_type), config, Device("cpu"))


def feed(batch: int) -> dict[str, np.ndarray]:
    return {"pixels": np.random.default_rng(0).random((batch, 64), dtype=np.float32) * 16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tune-trials",
        type=int,
        default=8,
        help="MetaSchedule trials per batch bucket for TVM tuned (0: skip it)",
    )
    parser.add_argument(
        "--measurement-ms", type=int, default=3000, help="perf_analyzer's measurement window"
    )
    parser.add_argument(
        "--in-process-s",
        type=float,
        default=2.0,
        help="seconds of timed .run() calls per backend and batch size",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="XDG_CACHE_HOME for TVM's libraries (default: a fresh temporary "
        "directory; an existing one reuses what an earlier run compiled)",
    )
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    args = parser.parse_args()  # fmt: skip
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="  %(message)s")
    logging.getLogger("backends.tvm_backend").setLevel(logging.INFO)  # tuning progress

    # The example repository lives in the usual cache; only TVM's libraries go elsewhere.
    examples = ensure_example_repository(log=progress)
    chosen = variants(args.tune_trials)
    tmp = Path(tempfile.mkdtemp(prefix="compiled-bench-"))
    try:
        cache = args.cache_dir or tmp / "cache"
        os.environ["XDG_CACHE_HOME"] = str(cache)  # read here and by the gateway it starts
        repository = tmp / "repository"
        write_repository(examples, repository, chosen)
        progress(f"repository {repository}, TVM cache under {cache}")
        build_s = compile_tvm(repository, chosen)
        pin_all_threads(args.client_core)  # this process only waits from here on
        floors, differences = in_process_worker(repository, chosen, args)
        served = through_gateway(repository, chosen, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(chosen, floors, served, differences, build_s, args)
    progress("done")


def compile_tvm(repository: Path, chosen: list[Variant]) -> dict[str, tuple[float, str]]:
    """Load each TVM variant once, on all cores, so its libraries are in the cache."""
    built = {}
    for variant in chosen:
        if variant.framework != "tvm":
            continue
        progress(f"{variant.name}: compiling ({variant.label})")
        started = time.perf_counter()
        backend = load(repository / variant.name)
        built[variant.name] = (time.perf_counter() - started, backend.source)
        backend.unload()
        progress(f"{variant.name}: {backend.source} in {built[variant.name][0]:.1f} s")
    return built


def in_process_worker(
    repository: Path, chosen: list[Variant], args: argparse.Namespace
) -> tuple[dict[tuple[str, int], float], dict[str, float]]:
    """`in_process` in a fresh process on the server's core (see the module docstring)."""
    command = [
        sys.executable, "-m", "benchmarks.compiled", "--worker", str(repository),
        "--started", repr(STARTED), "--in-process-s", str(args.in_process_s),
        *(arg for variant in chosen for arg in ("--model", variant.name)),
    ]  # fmt: skip
    result = subprocess.run(
        command, stdout=subprocess.PIPE, text=True, check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {args.server_core}),
    )  # fmt: skip
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    floors = {(name, int(batch)): value for name, batch, value in measured["floors"]}
    return floors, measured["differences"]


def worker(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", type=Path, required=True)
    parser.add_argument("--started", type=float, required=True)
    parser.add_argument("--in-process-s", type=float, required=True)
    parser.add_argument("--model", action="append", required=True)
    args = parser.parse_args(argv)
    global STARTED
    STARTED = args.started
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="  %(message)s")
    floors, differences = in_process(args.worker, args.model, args.in_process_s)
    floor_rows = [[name, batch, value] for (name, batch), value in floors.items()]
    print(json.dumps({"floors": floor_rows, "differences": differences}))


def in_process(
    repository: Path, names: list[str], seconds: float
) -> tuple[dict[tuple[str, int], float], dict[str, float]]:
    floors, outputs = {}, {}
    for name in names:
        progress(f"{name}: in-process on cores {sorted(os.sched_getaffinity(0))}")
        backend = load(repository / name)
        if getattr(backend, "source", "cache") != "cache":  # TVM: where its libraries came from
            progress(f"  {name}: libraries not from the cache but {backend.source}")
        for batch in BATCH_SIZES:
            data = feed(batch)
            calls = rate(lambda b=backend, d=data: b.run(d, ["probabilities"]), seconds=seconds)
            floors[name, batch] = batch * calls
            progress(f"  b={batch}: {batch * calls:,.0f} rows/s")
        result = backend.run(feed(max(BATCH_SIZES)), ["probabilities"])
        outputs[name] = np.asarray(result["probabilities"])
        backend.unload()
    reference = outputs[names[0]]  # ONNX Runtime's
    differences = {name: float(np.abs(out - reference).max()) for name, out in outputs.items()}
    return floors, differences


def through_gateway(
    repository: Path, chosen: list[Variant], args: argparse.Namespace, tmp: Path
) -> dict[tuple[str, int], float]:
    progress("starting the gateway")
    load_args = [arg for variant in chosen for arg in ("--load-model", variant.name)]
    server = start_gateway(
        repository, "--model-control-mode", "explicit", *load_args, "--log-level", "warning",
        log_path=tmp / "gateway.log", env={"XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"]},
        cpu_cores={args.server_core}, timeout_s=300,
    )  # fmt: skip
    served = {}
    try:
        for variant in chosen:
            for batch in BATCH_SIZES:
                progress(f"{variant.name}: gateway b={batch}")
                measured = perf_analyzer(
                    variant.name, server.http_url, "http", CONCURRENCY, args.client_core,
                    f"{variant.name} b={batch}", ("-b", str(batch)), args.measurement_ms,
                )  # fmt: skip
                # perf_analyzer counts every row of a batched request as an inference.
                served[variant.name, batch] = measured.throughput
    finally:
        server.stop()
    return served


def report(
    chosen: list[Variant],
    floors: dict[tuple[str, int], float],
    served: dict[tuple[str, int], float],
    differences: dict[str, float],
    build_s: dict[str, tuple[float, str]],
    args: argparse.Namespace,
) -> None:
    print(
        f"\nDigits classifier (PyTorch-trained), rows/s and x ONNX Runtime in-process at the "
        f"same batch;\nin-process on core {args.server_core}, gateway via perf_analyzer "
        f"(HTTP binary, c={CONCURRENCY}) on core {args.client_core}"
    )
    print(
        f"{'backend':<22}{'batch':>6}{'in-process':>12}{'x ORT':>8}{'gateway':>10}{'x ORT':>8}"
        f"{'gw/in-proc':>12}{'max |dp|':>10}"
    )
    for variant in chosen:
        for batch in BATCH_SIZES:
            floor = floors[FLOOR, batch]
            mine, through = floors[variant.name, batch], served[variant.name, batch]
            print(
                f"{variant.label:<22}{batch:>6}{mine:>12,.0f}{mine / floor:>8.2f}"
                f"{through:>10,.0f}{through / floor:>8.2f}{through / mine:>12.3f}"
                f"{differences[variant.name]:>10.1e}"
            )
    for name, (seconds, source) in build_s.items():
        print(f"{name}: libraries for batch {BUCKETS} {source} in {seconds:.0f} s")
    print(f"total {time.monotonic() - STARTED:.0f} s")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[1:])
    else:
        main()
