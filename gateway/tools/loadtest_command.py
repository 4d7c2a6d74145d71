"""`accel-gateway loadtest`: run the Locust load test against a running gateway.

Runs `locust -f loadtests/locustfile.py --headless` for a bounded time against a gateway
that is already serving on this machine (loopback addresses only), and writes Locust's
CSV files (`locust_stats.csv`, `locust_failures.csv`, ...) and HTML report (`report.html`)
into the output directory. Exits non-zero when any request failed, when none was made, or
when Locust itself failed.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import ipaddress
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from gateway.arguments import port, positive_int

DEFAULT_LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtests" / "locustfile.py"
CSV_PREFIX = "locust"
HTML_REPORT = "report.html"
# Beyond the run time: Locust's start, the users' stop and the reports.
GRACE_S = 60.0


def parse_run_time(value: str) -> int:
    """Seconds in Locust's format: `30`, `30s`, `5m`, `1h30m`, `1m30s`."""
    text = value.strip().lower()
    if text.isdigit():
        seconds = int(text)
    else:
        seconds, number = 0, ""
        units = {"h": 3600, "m": 60, "s": 1}
        for char in text:
            if char.isdigit():
                number += char
            elif char in units and number:
                seconds += int(number) * units[char]
                number = ""
            else:
                raise argparse.ArgumentTypeError(f"expected e.g. 30s, 5m or 1h30m, got '{value}'")
        if number:
            raise argparse.ArgumentTypeError(f"expected e.g. 30s, 5m or 1h30m, got '{value}'")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1 second, got '{value}'")
    return seconds


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the gateway's address: a loopback address only (default %(default)s)",
    )
    parser.add_argument("--http-port", type=port, default=8000, help="default %(default)s")
    parser.add_argument("--grpc-port", type=port, default=8001, help="default %(default)s")
    parser.add_argument(
        "--protocol",
        choices=("http", "grpc", "both"),
        default="http",
        help="V2 HTTP user, V2 gRPC user, or both (default %(default)s)",
    )
    parser.add_argument(
        "--model",
        default="simple",
        help="NAME, or NAME:WEIGHT,NAME:WEIGHT,... to spread requests over several models "
        "(default %(default)s)",
    )
    parser.add_argument(
        "-u", "--users", type=positive_int, default=4, help="concurrent users (default %(default)s)"
    )
    parser.add_argument(
        "-r",
        "--spawn-rate",
        type=float,
        help="users started per second (default: all at once)",
    )
    parser.add_argument(
        "-t",
        "--run-time",
        type=parse_run_time,
        default=10,
        help="how long to run, e.g. 30s, 5m (default 10s)",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=1, help="first dimension where metadata says -1"
    )
    parser.add_argument(
        "--dim-value",
        type=positive_int,
        default=16,
        help="other dimensions where metadata says -1 (default %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    parser.add_argument(
        "--data-file",
        type=Path,
        help=".npz or .json mapping input name (or model/input) -> array, instead of "
        "generated inputs",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="HTTP: JSON tensors instead of the binary tensor extension",
    )
    parser.add_argument(
        "--request-timeout", type=float, default=30.0, help="seconds per request (default 30)"
    )
    parser.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        default=Path("loadtest-results"),
        help="where the CSV files and the HTML report go (default %(default)s)",
    )
    parser.add_argument(
        "--locustfile", type=Path, default=DEFAULT_LOCUSTFILE, help="default %(default)s"
    )


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "loadtest",
        help="load-test a running gateway with Locust (headless, bounded, loopback only)",
        description=__doc__.split("\n\n", 1)[1],
    )
    add_arguments(parser)


def locust_command(args: argparse.Namespace) -> list[str]:
    host = _url_host(args.host)
    command = [
        sys.executable, "-m", "locust",
        "-f", str(args.locustfile),
        "--headless", "--only-summary",
        "-u", str(args.users),
        "-r", str(args.spawn_rate or args.users),
        "--run-time", f"{args.run_time}s",
        "--stop-timeout", "5",
        "--exit-code-on-error", "1",
        "--host", f"http://{host}:{args.http_port}",
        "--csv", str(args.output_dir / CSV_PREFIX),
        "--html", str(args.output_dir / HTML_REPORT),
        "--protocol", args.protocol,
        "--model", args.model,
        "--grpc-host", args.host,
        "--grpc-port", str(args.grpc_port),
        "--batch-size", str(args.batch_size),
        "--dim-value", str(args.dim_value),
        "--seed", str(args.seed),
        "--request-timeout", str(args.request_timeout),
    ]  # fmt: skip
    if args.data_file:
        command += ["--data-file", str(args.data_file.resolve())]
    if args.json:
        command.append("--json-tensors")
    return command


def _url_host(host: str) -> str:
    """The host as a URL writes it: an IPv6 address in brackets, once."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def _gateway_problem(args: argparse.Namespace) -> str | None:
    """Why the gateway cannot be load-tested, or None when it answers ready."""
    host = _url_host(args.host)
    if args.protocol in ("http", "both"):
        url = f"http://{host}:{args.http_port}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status != 200:
                    return f"{url} answered {reply.status}"
        except (urllib.error.URLError, OSError) as exc:
            return f"no gateway ready at {url} ({exc})"
    if args.protocol in ("grpc", "both"):
        import grpc

        from accel_base.proto import grpc_service_pb2 as pb
        from accel_base.proto import grpc_service_pb2_grpc as pb_grpc

        target = f"{host}:{args.grpc_port}"
        with grpc.insecure_channel(target) as channel:
            try:
                reply = pb_grpc.GRPCInferenceServiceStub(channel).ServerReady(
                    pb.ServerReadyRequest(), timeout=5
                )
            except grpc.RpcError as exc:
                return f"no gateway ready at grpc {target} ({exc.code().name}: {exc.details()})"
            if not reply.ready:
                return f"the gateway at grpc {target} is not ready"
    return None


def read_stats(path: Path) -> list[dict[str, str]]:
    """The rows of Locust's `_stats.csv`, per request name, without the Aggregated row."""
    with open(path, newline="") as file:
        return [row for row in csv.DictReader(file) if row["Name"] != "Aggregated"]


def run(args: argparse.Namespace) -> int:
    name = "accel-gateway loadtest"
    if not is_loopback(args.host):
        print(
            f"{name}: refusing to load-test '{args.host}': only loopback hosts "
            "(127.0.0.1, ::1, localhost) are allowed; run the load test on the gateway's machine",
            file=sys.stderr,
        )
        return 2
    if importlib.util.find_spec("locust") is None:
        print(
            f"{name}: Locust is not installed (pip install 'accel-gateway[loadtest]')",
            file=sys.stderr,
        )
        return 2
    if not args.locustfile.is_file():
        print(f"{name}: no locustfile at {args.locustfile} (see --locustfile)", file=sys.stderr)
        return 2
    if args.data_file and not args.data_file.is_file():
        print(f"{name}: no data file at {args.data_file}", file=sys.stderr)
        return 2
    problem = _gateway_problem(args)
    if problem:
        print(f"{name}: {problem}; start it first (accel-gateway serve)", file=sys.stderr)
        return 2

    if args.output_dir.exists() and not args.output_dir.is_dir():
        print(f"{name}: output directory {args.output_dir} is a file", file=sys.stderr)
        return 2
    args.output_dir.mkdir(parents=True, exist_ok=True)
    stats_path = args.output_dir / f"{CSV_PREFIX}_stats.csv"
    # Never leave an earlier run's reports beside this one's.
    for stale in args.output_dir.glob(f"{CSV_PREFIX}_*.csv"):
        stale.unlink()
    (args.output_dir / HTML_REPORT).unlink(missing_ok=True)
    process = subprocess.Popen(locust_command(args))
    try:
        code = process.wait(timeout=args.run_time + GRACE_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # Locust's SIGTERM handler writes its reports
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        print(f"{name}: Locust did not finish in time; stopped it", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        process.wait()
        return 130

    if not stats_path.is_file():
        print(f"{name}: Locust exited with {code} and wrote no {stats_path}", file=sys.stderr)
        return _failed(code)
    rows = read_stats(stats_path)
    requests = sum(int(row["Request Count"]) for row in rows)
    failures = sum(int(row["Failure Count"]) for row in rows)
    print(
        f"{name}: {requests} requests, {failures} failed, over {len(rows)} request names; "
        f"reports: {stats_path}, {args.output_dir / HTML_REPORT}"
    )
    if failures or code:
        print(f"{name}: FAILED (Locust exit code {code}, {failures} failed requests)")
        return _failed(code)
    if requests == 0:
        print(f"{name}: FAILED (no request was made)")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.tools.loadtest_command", description=__doc__.split("\n\n", 1)[1]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


def _failed(code: int) -> int:
    """A failing exit status: Locust's own, or 1 (also when a signal ended Locust, which
    Popen reports as a negative number)."""
    return code if code > 0 else 1
