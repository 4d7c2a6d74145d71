"""Locust load test of a running accel-gateway (or any KServe V2 / Triton server).

    locust -f loadtests/locustfile.py --headless -u 8 -r 8 --run-time 10s \
        --host http://127.0.0.1:8000 --model simple:1,mlp:3 --protocol both

Users: `V2HttpUser` (binary tensors; `--json-tensors` for JSON) and `V2GrpcUser` (gRPC
ModelInfer, timed here). `--protocol http|grpc|both` picks which run; `--model` spreads
requests over several models by weight (the mixed scenario). Inputs are generated from each
model's metadata with a fixed `--seed` (`--batch-size` and `--dim-value` fill the -1
dimensions), or read from `--data-file`. `accel-gateway loadtest` runs this file headless
and writes the CSV and HTML reports.
"""

from __future__ import annotations

import csv
import logging
import sys
from pathlib import Path

# Locust imports this file by path, with only its own directory on sys.path for the import:
# make the `loadtests` package (beside `gateway`) importable.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from locust import events  # noqa: E402
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV  # noqa: E402

from loadtests.common import add_arguments, plan_of  # noqa: E402
from loadtests.v2_grpc import V2GrpcUser  # noqa: E402
from loadtests.v2_http import V2HttpUser  # noqa: E402

__all__ = ["V2GrpcUser", "V2HttpUser"]

log = logging.getLogger("loadtests")
_ENVIRONMENT: dict = {}  # the Environment, for the quit listener (which is not given it)


@events.init_command_line_parser.add_listener
def _options(parser, **_kwargs) -> None:
    add_arguments(parser)


@events.init.add_listener
def _select_users(environment, **_kwargs) -> None:
    """Keep the user classes that `--protocol` asks for, and check the options early."""
    _ENVIRONMENT["current"] = environment
    options = environment.parsed_options
    if options is None:  # Locust used as a library, without its command line
        return
    try:
        plan_of(environment)
    except (OSError, ValueError) as exc:
        log.error("load test options: %s", exc)
        sys.exit(2)
    wanted = {"http", "grpc"} if options.protocol == "both" else {options.protocol}
    chosen = [cls for cls in environment.user_classes if getattr(cls, "protocol", None) in wanted]
    if not chosen:
        names = ", ".join(cls.__name__ for cls in environment.user_classes)
        log.error(
            "--protocol %s matches none of the user classes selected (%s)", options.protocol, names
        )
        sys.exit(2)
    environment.user_classes[:] = chosen


@events.quit.add_listener
def _final_csv(**_kwargs) -> None:
    """Write the CSV files once more with the final numbers: Locust rewrites them once a
    second while it runs, and not after the last requests, so they can lag behind the
    summary table (and miss the last failures)."""
    environment = _ENVIRONMENT.get("current")
    prefix = getattr(getattr(environment, "parsed_options", None), "csv_prefix", None)
    if not prefix or environment.runner is None:
        return
    writer = StatsCSV(environment, PERCENTILES_TO_REPORT)
    for suffix, write in (
        ("stats", writer.requests_csv),
        ("failures", writer.failures_csv),
        ("exceptions", writer.exceptions_csv),
    ):
        with open(f"{prefix}_{suffix}.csv", "w", newline="") as file:
            write(csv.writer(file))
