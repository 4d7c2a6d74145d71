"""Read by mypy, never run: each of the three cores must be usable where a `Core` is
asked for (gateway/core/interface.py), and each kind of instance where a `ModelInstance` is
(gateway/core/scheduling/instance_api.py). A missing call or a different signature fails the
type check in the test command (tests/test_typecheck.py), naming the class and the call."""

from __future__ import annotations

from gateway.core.interface import Core
from gateway.core.scheduling.instance_api import ModelInstance
from gateway.core.scheduling.instances import Instance
from gateway.core.scheduling.process_instance import ProcessInstance
from gateway.core.service import InferenceCore
from gateway.front_processes.remote import RemoteCore
from gateway.tools.ray.ingress import RayCore


def in_process(core: InferenceCore) -> Core:
    return core


def front_process(core: RemoteCore) -> Core:
    return core


def ray_ingress(core: RayCore) -> Core:
    return core


def thread_instance(instance: Instance) -> ModelInstance:
    return instance


def process_instance(instance: ProcessInstance) -> ModelInstance:
    return instance
