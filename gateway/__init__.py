"""accel-gateway: a KServe V2 (Triton protocol) inference gateway."""

__version__ = "0.1.0"
SERVER_NAME = "accel-gateway"
