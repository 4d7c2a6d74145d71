"""Read by mypy, never run: each of the three cores must be usable where a `Core` is
asked for (gateway/interface.py), and each kind of instance where a `ModelInstance` is
(gateway/scheduling/instance_api.py). A missing call or a different signature fails the
type check in the test command (tests/test_typecheck.py), naming the class and the call."""

from __future__ import annotations

from gateway.core import InferenceCore
from gateway.fronts.remote import RemoteCore
from gateway.interface import Core
from gateway.ray.ingress import RayCore
from gateway.scheduling.instance_api import ModelInstance
from gateway.scheduling.instances import Instance
from gateway.scheduling.process_instance import ProcessInstance


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
