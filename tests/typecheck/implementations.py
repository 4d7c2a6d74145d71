"""Read by mypy, never run: each of the three cores must be usable where a `Core` is
asked for (gateway/interface.py). A missing call or a different signature fails the
type check in the test command (tests/test_typecheck.py), naming the core and the call."""

from __future__ import annotations

from gateway.core import InferenceCore
from gateway.fronts.remote import RemoteCore
from gateway.interface import Core
from gateway.ray.ingress import RayCore


def in_process(core: InferenceCore) -> Core:
    return core


def front_process(core: RemoteCore) -> Core:
    return core


def ray_ingress(core: RayCore) -> Core:
    return core
