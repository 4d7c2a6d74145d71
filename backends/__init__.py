"""Backends: one module per framework, all behind `backends.base.Backend`.

Modules are imported on first use so a missing optional framework only fails
the models that need it, with a message that says what to install. What the server
must know before loading (the artifact's file name, memory, where instances run) is in
each backend's `Platform` (backends/platforms.py, or a plug-in package's own), found
through one registry (backends/registry.py), so that the server never imports a
framework for a model that runs in a worker process.
"""

from __future__ import annotations

from backends.base import Backend, BackendUnavailable, Device, TensorSpec
from backends.platforms import Platform
from backends.registry import backend_class, platform_info, platforms

__all__ = [
    "Backend", "BackendUnavailable", "Device", "TensorSpec", "Platform", "backend_class",
    "platform_info", "platforms",
]  # fmt: skip
