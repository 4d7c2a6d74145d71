"""`accel-gateway compare MODEL_A MODEL_B [...]`: the first model is the reference.

The same inputs go to every variant, in this process (--model-repository: the variants
load here, so load time and memory are this load's) or to a running gateway (--url,
HTTP or gRPC). Inputs come from --data (.npz with an array per input name and an
optional `labels`, or a V2 JSON request body; the first axis counts samples) or are
generated from the model's metadata with --seed. Every variant's outputs are compared
row by row with the reference's; its latency and throughput are measured per batch size
and concurrency, each point bounded by --requests and --seconds. Output: a table here,
a JSON file and a self-contained HTML report.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, TextIO

from accel_base.errors import GatewayError
from gateway.arguments import positive_float, positive_int
from gateway.tools.compare import html, inputs
from gateway.tools.compare.measure import Settings, measure_variant
from gateway.tools.compare.report import judge, table


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare",
        help="compare variants of a model: agreement, accuracy, latency, throughput, memory",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("models", nargs="+", metavar="MODEL", help="variants; the first is "
                        "the reference")  # fmt: skip
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--model-repository", type=Path, help="load the variants from this "
                       "repository in this process")  # fmt: skip
    where.add_argument("--url", help="a running gateway, HOST:PORT")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--reload", action="store_true", help="with --url: unload and load "
                        "each variant first, timing the load (explicit control mode)")  # fmt: skip
    parser.add_argument("--admin-token", default="", help="for --reload's load calls")
    parser.add_argument("--data", type=Path, help=".npz or V2 JSON request body")
    parser.add_argument("--samples", type=positive_int, default=256,
                        help="generated samples without --data (default %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="for generated data")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 8])
    parser.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 4])
    parser.add_argument("--requests", type=positive_int, default=2000,
                        help="at most this many requests a point (default %(default)s)",
                        )  # fmt: skip
    parser.add_argument("--seconds", type=positive_float, default=5.0,
                        help="at most this long per point (default %(default)s)")  # fmt: skip
    parser.add_argument("--min-samples", type=positive_int, default=100,
                        help="fewer requests flag a point (default %(default)s)")  # fmt: skip
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--min-agreement", type=float, default=0.99,
                        help="share of rows within tolerance, and of top-1 matches, a "
                        "variant needs to agree (default %(default)s)")  # fmt: skip
    parser.set_defaults(log_level="warning")  # the loads' info lines would bury the table
    parser.add_argument("--json", type=Path, default=Path("compare.json"), dest="json_path")
    parser.add_argument("--html", type=Path, default=Path("compare.html"), dest="html_path")


class Progress:
    """A one-line bar on a terminal; silent when stderr is not one."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.done, self.stream = total, 0, stream
        self.shown = stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        if self.shown:
            filled = int(30 * min(self.done, self.total) / self.total)
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(f"\r[{bar}] {self.done}/{self.total} {label[:60]:<60}")
            self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")


def _target(args: argparse.Namespace) -> Any:
    from gateway.tools.compare.targets import InProcessTarget, RemoteTarget

    if args.url:
        return RemoteTarget(args.url, args.protocol, args.reload, args.admin_token)
    return InProcessTarget(args.model_repository)


def compare(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings(
        tuple(args.batch_sizes), tuple(args.concurrency), args.requests, args.seconds,
        args.min_samples, args.rtol, args.atol, args.min_agreement,
    )  # fmt: skip
    target = _target(args)
    try:
        # Loaded (in process) or reloaded (--reload) first, each timed: metadata needs them.
        load_s = {name: target.load(name) for name in args.models}
        signature = inputs.Signature.from_metadata(target.metadata(args.models[0]))
        for name in args.models[1:]:
            other = inputs.Signature.from_metadata(target.metadata(name))
            if other != signature:
                raise inputs.DataError(
                    f"'{name}' does not take and give the same tensors as '{args.models[0]}': "
                    f"{other.describe()} against {signature.describe()}"
                )
        if args.data is not None:
            dataset = inputs.load(args.data, signature)
        else:
            dataset = inputs.generate(signature, args.samples, args.seed)
        sizes = len(settings.batch_sizes) if signature.batching else 1
        progress = Progress(len(args.models) * (1 + sizes + sizes * len(settings.concurrency)))
        variants, reference = [], None
        try:
            for name in args.models:
                entry, outputs = measure_variant(
                    target,
                    name,
                    load_s[name],
                    dataset,
                    signature,
                    settings,
                    reference,
                    progress.step,
                )
                reference = reference or outputs
                variants.append(entry)
        finally:
            progress.close()
    finally:
        target.close()
    judge(variants, settings)
    return {
        "mode": target.kind if args.url else "in-process",
        "data": dataset.source,
        "samples": dataset.count,
        "settings": {
            "batch_sizes": list(settings.batch_sizes), "concurrency": list(settings.concurrency),
            "requests": settings.requests, "seconds": settings.seconds,
            "min_samples": settings.min_samples, "rtol": settings.rtol, "atol": settings.atol,
            "min_agreement": settings.min_agreement,
        },
        "variants": variants,
    }  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if len(set(args.models)) != len(args.models):
        print("accel-gateway compare: a model is named twice", file=sys.stderr)
        return 2
    try:
        report = compare(args)
    except ModuleNotFoundError as exc:  # --url without tritonclient
        extra = " (pip install 'accel-gateway[compare]')" if args.url else ""
        print(f"accel-gateway compare: {exc.name} is not installed{extra}", file=sys.stderr)
        return 1
    except (GatewayError, inputs.DataError, OSError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        print(f"accel-gateway compare: {message}", file=sys.stderr)
        return 1
    except Exception as exc:  # tritonclient's errors: a server that refused or is down
        if type(exc).__name__ != "InferenceServerException":
            raise
        print(f"accel-gateway compare: the server answered: {exc}", file=sys.stderr)
        return 1
    print(table(report))
    args.json_path.write_text(json.dumps(_finite(report), indent=1, allow_nan=False))
    args.html_path.write_text(html.render(report))
    print(f"\nwrote {args.json_path} and {args.html_path}")
    return 0


def _finite(value: Any) -> Any:
    """The report as strict JSON: NaN and infinities (no samples, an output that was NaN
    on one side) become null."""
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
