"""Scheduling: how requests of one model version reach its instances.

The seam is small on purpose: a scheduler takes an InferRequest and returns an
InferResponse; an instance (a thread or a worker process) runs one batch. Neither
knows the other's details.
"""

from gateway.core.scheduling.direct import DirectScheduler
from gateway.core.scheduling.dynamic import DynamicBatcher
from gateway.core.scheduling.instances import Instance
from gateway.core.scheduling.pool import InstancePool

__all__ = ["DirectScheduler", "DynamicBatcher", "Instance", "InstancePool"]
