"""What the HTTP and gRPC users share: the custom options, the models to spread requests
over, and the prepared requests (built once per model and process, then reused)."""

from __future__ import annotations

import random
import threading  # gevent-patched under Locust: the lock then blocks a greenlet only
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.inputs import ModelInputs, build_inputs, load_data_file, parse_models

PROTOCOLS = ("http", "grpc", "both")


def add_arguments(parser) -> None:
    """Locust custom options (`events.init_command_line_parser`); they also show in the web UI."""
    group = parser.add_argument_group("accel-gateway V2 load test")
    group.add_argument(
        "--model",
        default="simple",
        help="model(s) to infer on: NAME or NAME:WEIGHT,NAME:WEIGHT,... (requests are spread "
        "over them by weight; default %(default)s)",
    )
    group.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="http",
        help="which users run: the V2 HTTP user, the V2 gRPC user, or both (default %(default)s)",
    )
    group.add_argument(
        "--batch-size", type=int, default=1, help="first dimension where metadata says -1"
    )
    group.add_argument(
        "--dim-value", type=int, default=16, help="every other dimension where metadata says -1"
    )
    group.add_argument("--seed", type=int, default=0, help="seed of the generated input values")
    group.add_argument(
        "--data-file",
        default="",
        help=".npz or .json mapping input name (or model/input) -> array, instead of "
        "generated inputs",
    )
    group.add_argument(
        "--json-tensors",
        action="store_true",
        default=False,
        help="HTTP: send and ask for JSON tensors (default: the binary tensor extension)",
    )
    group.add_argument(
        "--grpc-host", default="", help="gRPC host (default: the host of --host, or 127.0.0.1)"
    )
    group.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (default 8001)")
    group.add_argument(
        "--request-timeout", type=float, default=30.0, help="seconds per request (default 30)"
    )


@dataclass
class Prepared:
    """One model's request, encoded once: `payload` is the HTTP body or the serialized
    gRPC message."""

    model: str
    name: str  # the request's name in Locust's statistics
    payload: bytes
    headers: dict[str, str]
    binary: bool


class Plan:
    """Per-process state built from the parsed options."""

    def __init__(self, options: Any) -> None:
        self.options = options
        self.models = parse_models(options.model)
        if options.batch_size < 1 or options.dim_value < 1:
            raise ValueError("--batch-size and --dim-value must be >= 1")
        self.data: dict[str, np.ndarray] | None = (
            load_data_file(Path(options.data_file)) if options.data_file else None
        )
        self._random = random.Random(options.seed)
        self._names = [name for name, _ in self.models]
        self._weights = [weight for _, weight in self.models]
        self._prepared: dict[tuple[str, str], Prepared] = {}
        self._lock = threading.Lock()

    def choose(self) -> str:
        if len(self._names) == 1:
            return self._names[0]
        return self._random.choices(self._names, self._weights)[0]

    def inputs(self, metadata: dict[str, Any]) -> ModelInputs:
        return build_inputs(
            metadata,
            batch_size=self.options.batch_size,
            dim_value=self.options.dim_value,
            seed=self.options.seed,
            data=self.data,
        )

    def prepared(self, protocol: str, model: str, prepare: Callable[[str], Prepared]) -> Prepared:
        """The cached request for (protocol, model); `prepare` builds it on first use (it
        fetches the model's metadata, so concurrent first uses wait for one fetch)."""
        key = (protocol, model)
        found = self._prepared.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._prepared.get(key)
            if found is None:
                found = self._prepared[key] = prepare(model)
            return found


def plan_of(environment) -> Plan:
    plan = getattr(environment, "v2_plan", None)
    if plan is None:
        plan = environment.v2_plan = Plan(environment.parsed_options)
    return plan


class MetadataError(Exception):
    """The model's metadata could not be read: the run cannot build its requests."""
