"""TF Serving's command-line flags as its binary spells them (`--name=value`, a boolean
also bare), sorted by what the gateway does with them:

- served: the ports, the models, the version label rule, the REST timeout, batching
  (max_batch_size and batch_timeout_micros of its parameters file);
- NOT_YET (command.py): flags whose behaviour is not served yet, refused by name;
- IGNORED: flags that tune TF Serving's own C++ internals (its thread pools, session
  options, file system caches); accepted, and named once at start;
- anything else: argparse refuses it by name.

The gateway's own additions (the V2 ports, the body limit) are spelled the same way.
"""

from __future__ import annotations

import argparse


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


# Flags of TF Serving's that only tune its own internals: accepted, not acted on.
IGNORED = (
    "rest_api_num_threads", "grpc_max_threads", "num_load_threads", "num_unload_threads",
    "max_num_load_retries", "load_retry_interval_micros", "flush_filesystem_caches",
    "tensorflow_session_parallelism", "tensorflow_intra_op_parallelism",
    "tensorflow_inter_op_parallelism", "tensorflow_session_config_file",
    "per_process_gpu_memory_fraction", "saved_model_tags", "grpc_channel_arguments",
    "enable_per_model_batching_parameters", "remove_unused_fields_from_bundle_metagraph",
    "xla_cpu_compilation_enabled",
    "mixed_precision", "skip_initialize_tpu",
    "thread_pool_factory_config_file", "enable_grpc_healthcheck_service",
    "rest_api_enable_cors_support", "use_tflite_model", "prefer_tflite_model",
    "num_tflite_pools", "num_tflite_interpreters_per_pool", "use_alts_credentials",
    "platform_config_file", "enable_profiler", "tfrt",
)  # fmt: skip
_BOOLEANS = {
    "flush_filesystem_caches", "remove_unused_fields_from_bundle_metagraph",
    "xla_cpu_compilation_enabled", "skip_initialize_tpu",
    "enable_grpc_healthcheck_service", "rest_api_enable_cors_support", "use_tflite_model",
    "prefer_tflite_model", "use_alts_credentials", "enable_profiler", "tfrt",
    "enable_per_model_batching_parameters",
}  # fmt: skip


def _flag(parser: argparse.ArgumentParser, name: str, kind: type | None = None,
          default: object = None, help: str = "") -> None:  # fmt: skip
    if kind is bool:
        parser.add_argument(f"--{name}", nargs="?", const=True, type=_bool, default=default,
                            metavar="true|false", help=help)  # fmt: skip
    else:
        parser.add_argument(f"--{name}", type=kind or str, default=default, help=help)


def add_flags(parser: argparse.ArgumentParser) -> None:
    _flag(parser, "port", int, 8500, "gRPC port (0: none)")
    _flag(parser, "rest_api_port", int, 0, "REST port (0, the default: no REST API)")
    _flag(parser, "rest_api_timeout_in_ms", int, 30000, "how long a REST request may take")
    _flag(parser, "model_name", str, None, "the model's name (with --model_base_path)")
    _flag(parser, "model_base_path", str, None, "the model's <base_path>/<version>/ directory")
    _flag(parser, "model_config_file", str, None, "a ModelServerConfig text file of models")
    _flag(parser, "model_config_file_poll_wait_seconds", int, 0, "re-read it this often")
    _flag(parser, "file_system_poll_wait_seconds", int, 1, "look for new versions this often")
    _flag(parser, "allow_version_labels_for_unavailable_models", bool, False,
          "let a label name a version that is not available yet")  # fmt: skip
    _flag(parser, "enable_batching", bool, False, "batch requests on the dynamic batcher")
    _flag(parser, "batching_parameters_file", str, None, "BatchingParameters text file")
    _flag(parser, "enable_signature_method_name_check", bool, False,
          "refuse classify/regress on a signature of another method_name")  # fmt: skip
    _flag(parser, "monitoring_config_file", str, None, "MonitoringConfig text file")
    _flag(parser, "enable_model_warmup", bool, True, "run assets.extra warm-up records")
    _flag(parser, "num_request_iterations_for_warmup", int, 1, "runs of each warm-up record")
    _flag(parser, "grpc_socket_path", str, None, "a Unix socket for gRPC (not served)")
    _flag(parser, "ssl_config_file", str, None, "SSLConfig text file")
    _flag(parser, "version", bool, False, "print the version and exit")
    # The gateway's own, in the same spelling.
    # 0: a port the system chooses, logged at start (TF Serving opens no other port, so
    # several servers on one machine must not clash on these).
    _flag(parser, "v2_http_port", int, 0, "V2 HTTP port, on loopback (0: a free one)")
    _flag(parser, "v2_grpc_port", int, 0, "V2 gRPC port, on loopback (0: a free one)")
    _flag(parser, "v2_metrics_port", int, 0, "metrics port, on loopback (0: a free one)")
    _flag(parser, "max_body_bytes", int, 64 * 1024 * 1024, "the largest request body")
    for name in IGNORED:
        _flag(parser, name, bool if name in _BOOLEANS else str, None, "ignored here")
