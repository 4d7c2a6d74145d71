"""Two revisions of this repository head to head on the hot serving paths.

    .venv/bin/python -m benchmarks.revisions --base c617005 [--head HEAD] [--rounds 2]
        [--measurement-ms 3000] [--server-core 0 --client-core 1] [--points simple-http-8 ...]

Each revision is extracted with `git archive REV | tar -x` into a temporary directory
(the working tree is not touched); `--head WORKTREE` (or `--base WORKTREE`) serves the
working tree's files as they are, uncommitted changes included. A server of a revision
is this .venv's python running `-m gateway serve` with the revision's directory as its
working directory and PYTHONPATH, so that its own code runs and not the editable
install's; a small process started the same way says which `gateway` it imports first.

One model repository serves both, built once by this checkout's models code: `simple`,
and `mlp_batched` as benchmarks.serving_batching builds it (hidden 1024, dynamic
batching, max_batch_size 64, a 2 ms window, one intra-op thread). c617005 serves it as
it is (its config parser reads the same text); every server is asked for each model's
readiness before it is measured. c617005's `serve` has none of the later flags
(--queue-budget-ms, ...), so servers get only the flags both know and run with their
own defaults otherwise.

Rounds alternate the revisions ABBA (round 1 base then head, round 2 head then base,
...), so a drift of the machine favours neither; each revision gets a fresh server a
round, pinned to --server-core, and every point is a perf_analyzer run on
--client-core. Printed per point: each revision's infer/s per round, and head/base as
the geometric mean of the per-round ratios, with a 95% t-interval on the log ratios
from 3 rounds on, and the min-max of the ratios with 2; the p50 latency head/base; and
the server's CPU time per request answered (user and system, from /proc, over the whole
perf_analyzer run) head/base, which another process's load on the machine disturbs far
less than the throughput: below 1, head costs less a request.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.cores import answered
from benchmarks.fronts import cpu_seconds
from benchmarks.perf import Measurement, add_run_arguments, perf_analyzer, pin_to
from gateway.launch import GatewayProcess, free_ports
from models import simple
from models.mlp import write_mlp

ROOT = Path(__file__).resolve().parents[1]
WORKTREE = "WORKTREE"
MLP = "mlp_batched"


@dataclass(frozen=True)
class Point:
    model: str
    protocol: str  # perf_analyzer's -i: HTTP sends binary tensors unless told otherwise
    concurrency: int


POINTS = {
    f"{short}-{protocol}-{concurrency}": Point(model, protocol, concurrency)
    for short, model, levels in (("simple", "simple", (8, 64)), ("mlp", MLP, (1, 64)))
    for protocol in ("http", "grpc")
    for concurrency in levels
}


@dataclass(frozen=True)
class Revision:
    role: str  # "base" or "head"
    label: str  # the short commit, or "worktree"
    directory: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.directory)}


@dataclass(frozen=True)
class RatioSummary:
    ratio: float  # the geometric mean of the per-round ratios
    low: float
    high: float
    interval: str  # what low-high is: "95% t", "min-max", or "" (one round: none)

    def __str__(self) -> str:
        if math.isnan(self.ratio):
            return "n/a"  # no round measured both
        if not self.interval:
            return f"{self.ratio:.3f}x"
        return f"{self.ratio:.3f}x ({self.interval} {self.low:.3f}-{self.high:.3f})"


def round_ratios(base: Sequence[float], head: Sequence[float]) -> list[float]:
    """head/base of each round; a round where either run failed (NaN, or no figure) drops
    out rather than counting as a ratio of 0 or infinity."""
    return [h / b for b, h in zip(base, head, strict=True) if b > 0 and h > 0]


def t_quantile(probability: float, freedom: int) -> float:
    # scipy comes with scikit-learn; imported here, as 2 rounds need no quantile.
    from scipy.stats import t

    return float(t.ppf(probability, freedom))


def summarize(ratios: Sequence[float], confidence: float = 0.95) -> RatioSummary:
    """The geometric mean of per-round ratios, with a t-interval on their logs from 3
    rounds on; with 2, the two ratios themselves (too few for a t-interval to mean much)."""
    if not ratios:
        return RatioSummary(math.nan, math.nan, math.nan, "")
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / len(logs)
    if len(logs) == 1:
        return RatioSummary(ratios[0], ratios[0], ratios[0], "")
    if len(logs) == 2:
        return RatioSummary(math.exp(mean), min(ratios), max(ratios), "min-max")
    spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = t_quantile(0.5 + confidence / 2, len(logs) - 1) * spread / math.sqrt(len(logs))
    name = f"{confidence:.0%} t"
    return RatioSummary(math.exp(mean), math.exp(mean - half), math.exp(mean + half), name)


def abba(index: int, base: Revision, head: Revision) -> tuple[Revision, Revision]:
    """The order of round `index` (from 0): base first in even rounds, head first in odd."""
    return (head, base) if index % 2 else (base, head)


def extract(role: str, name: str, into: Path) -> Revision:
    if name == WORKTREE:
        return Revision(role, "worktree", ROOT)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", f"{name}^{{commit}}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    directory = into / f"{role}-{commit}"  # base and head may be one commit
    directory.mkdir()
    archive = subprocess.Popen(["git", "archive", commit], cwd=ROOT, stdout=subprocess.PIPE)
    assert archive.stdout is not None
    untar = subprocess.run(["tar", "-x", "-C", str(directory)], stdin=archive.stdout)
    archive.stdout.close()
    if archive.wait() or untar.returncode:
        raise SystemExit(f"could not extract {name} ({commit}) into {directory}")
    return Revision(role, commit, directory)


def check_code(revision: Revision) -> Path:
    """The `gateway` package a server of `revision` imports: run as the server is (same
    interpreter, working directory and PYTHONPATH), it must be the revision's own."""
    done = subprocess.run(
        [sys.executable, "-c", "import gateway; print(gateway.__file__)"],
        cwd=revision.directory, env=revision.env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = Path(done.stdout.strip())
    if not found.is_relative_to(revision.directory):
        raise SystemExit(f"{revision.label}: gateway imports from {found}, not its directory")
    return found


def build(repository: Path) -> None:
    simple.build(repository)
    write_mlp(
        repository, MLP, 1024, dynamic_batching=True, max_batch_size=64,
        max_queue_delay_us=2000, intra_op_threads=1,
    )  # fmt: skip


def start(revision: Revision, repository: Path, core: int, log_path: Path) -> GatewayProcess:
    ports = free_ports(3)
    command = [
        sys.executable, "-m", "gateway", "serve", "--model-repository", str(repository),
        "--http-port", str(ports[0]), "--grpc-port", str(ports[1]),
        "--metrics-port", str(ports[2]), "--log-level", "warning",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        # A session of its own: stop() can then end whatever processes it started too.
        process = subprocess.Popen(
            command, cwd=revision.directory, env=revision.env(), stdout=log,
            stderr=subprocess.STDOUT, preexec_fn=lambda: os.sched_setaffinity(0, {core}),
            start_new_session=True,
        )  # fmt: skip
    server = GatewayProcess(process, *ports, log_path)
    try:
        wait_ready(server, sorted({p.model for p in POINTS.values()}), timeout_s=120)
    except BaseException:
        stop(server)
        raise
    return server


def wait_ready(server: GatewayProcess, models: list[str], timeout_s: float) -> None:
    """Until every model answers ready: a model the revision refuses fails here, by name."""
    deadline = time.monotonic() + timeout_s
    waiting = list(models)
    while waiting and time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"gateway exited with {server.process.returncode}:\n{server.log()}")
        try:
            url = f"http://{server.http_url}/v2/models/{waiting[0]}/ready"
            with urllib.request.urlopen(url, timeout=1) as reply:
                if reply.status == 200:
                    waiting.pop(0)
                    continue
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    if waiting:
        raise RuntimeError(f"{waiting} not ready after {timeout_s} s:\n{server.log()}")


def stop(server: GatewayProcess) -> None:
    server.stop()
    # Anything of its session still running (a worker its SIGKILL left behind).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)


@dataclass(frozen=True)
class Sample:
    """One point of one round: perf_analyzer's figures, and the server's CPU time per
    request answered meanwhile (user and system, all its threads, from /proc)."""

    measurement: Measurement
    cpu_us: float


Results = dict[tuple[str, str], list[Sample]]  # (role, point) -> one a round


def measure_point(server: GatewayProcess, point: Point, name: str, args) -> Sample:
    url = server.grpc_url if point.protocol == "grpc" else server.http_url
    pid = server.process.pid
    before = answered(server.http_url, point.model), cpu_seconds(pid)
    m = perf_analyzer(
        point.model, url, point.protocol, point.concurrency, args.client_core, name, (),
        args.measurement_ms,
    )  # fmt: skip
    after = answered(server.http_url, point.model), cpu_seconds(pid)
    requests = after[0] - before[0]
    cpu_us = (after[1] - before[1]) * 1e6 / requests if requests > 0 else math.nan
    return Sample(m, cpu_us)


def measure(
    base: Revision, head: Revision, points: list[str], repository: Path,
    args: argparse.Namespace, tmp: Path,
) -> Results:  # fmt: skip
    results: Results = defaultdict(list)
    for index in range(args.rounds):
        for revision in abba(index, base, head):
            log = tmp / f"round{index + 1}-{revision.role}.log"
            server = start(revision, repository, args.server_core, log)
            try:
                for name in points:
                    sample = measure_point(server, POINTS[name], name, args)
                    results[(revision.role, name)].append(sample)
                    m = sample.measurement
                    print(
                        f"  round {index + 1} {revision.role} {revision.label} {name}: "
                        f"{m.throughput:,.0f} infer/s, p50 {m.p50_us / 1000:.2f} ms, "
                        f"server CPU {sample.cpu_us:.0f} us a request",
                        flush=True,
                    )
            finally:
                stop(server)
    return results


def report(results: Results, points: list[str], base: Revision, head: Revision) -> None:
    rows = [("point", f"base {base.label} infer/s", f"head {head.label} infer/s",
             "head/base infer/s", "p50 head/base", "CPU/request head/base")]  # fmt: skip
    kinds = set()
    for name in points:
        b = [s.measurement for s in results[("base", name)]]
        h = [s.measurement for s in results[("head", name)]]
        rate = summarize(round_ratios([m.throughput for m in b], [m.throughput for m in h]))
        p50 = summarize(round_ratios([m.p50_us for m in b], [m.p50_us for m in h]))
        cpu_b = [s.cpu_us for s in results[("base", name)]]
        cpu = summarize(round_ratios(cpu_b, [s.cpu_us for s in results[("head", name)]]))
        kinds.update((rate.interval, cpu.interval))
        rounds = [" ".join(f"{m.throughput:>7,.0f}" for m in ms) for ms in (b, h)]
        rows.append((name, *rounds, str(rate), str(replace(p50, interval="")), str(cpu)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if "min-max" in kinds:
        print("min-max: the lower and higher of two rounds' ratios, not a confidence interval")
    if "95% t" in kinds:
        print("95% t: a 95% t-interval on the per-round log ratios, taken back to ratios")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help=f"a git revision, or {WORKTREE}")
    parser.add_argument("--head", default="HEAD", help=f"a git revision, or {WORKTREE}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--points", nargs="+", default=list(POINTS), choices=POINTS)
    add_run_arguments(parser)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    with tempfile.TemporaryDirectory(prefix="revisions-") as name:
        tmp = Path(name)
        base = extract("base", args.base, tmp)
        head = extract("head", args.head, tmp)
        for revision in (base, head):
            print(f"{revision.role} {revision.label}: serves {check_code(revision)}")
        repository = tmp / "repository"
        build(repository)
        pin_to(args.client_core)  # this process only waits from here on
        results = measure(base, head, args.points, repository, args, tmp)
    print(
        f"\nhead {head.label} against base {base.label}: {args.rounds} round(s) ABBA, "
        f"{args.measurement_ms} ms windows, server on core {args.server_core}, "
        f"perf_analyzer on core {args.client_core}; infer/s per round in round order"
    )
    report(results, args.points, base, head)


if __name__ == "__main__":
    main()
