"""The one interface every backend implements.

A backend loads one artifact onto one device, describes its tensors, runs one
already-batched set of inputs, reports its memory and frees itself. It never
parses requests, never batches and never touches metrics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accel_base.proto import model_config_pb2 as mc


class BackendUnavailable(Exception):
    """The backend or the device it needs cannot be used here; the message says why."""


def first_line(exc: BaseException) -> str:
    """The first line of a framework's error (they can run to pages), or its type name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@dataclass(frozen=True, slots=True)
class Device:
    kind: str = "cpu"  # "cpu" or "gpu"
    index: int = 0

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"gpu:{self.index}"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor as the artifact declares it; -1 marks a dimension of any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]


class Backend(ABC):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        self.artifact = artifact
        self.config = config
        self.device = device

    @classmethod
    def gpu_capable(cls) -> bool:
        """Whether this backend, as installed here, can run on a GPU."""
        return False

    @classmethod
    def inline_capable(cls) -> bool:
        """Whether short runs may execute on the event loop's thread rather than the
        instance's own (false for frameworks that bind state to the loading thread)."""
        return False

    def allowed_batch_sizes(self) -> tuple[int, ...] | None:
        """Batch sizes the loaded artifact can run (compiled shapes); None means any.
        The dynamic batcher pads batches up to the next allowed size."""
        return None

    @abstractmethod
    def inputs(self) -> list[TensorSpec]:
        """The artifact's inputs, batch dimension included where it has one."""

    @abstractmethod
    def outputs(self) -> list[TensorSpec]:
        """The artifact's outputs, batch dimension included where it has one."""

    @abstractmethod
    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        """Run one batch. BF16 tensors are uint16 bit patterns, BYTES are object arrays.
        The outputs are the caller's from then on: a backend never writes into an array
        it returned (a response sends large outputs as they are, after `run` is over)."""

    def completed_config(self) -> mc.ModelConfig | None:
        """The config as the backend completed it at load, where it did (a Python model's
        own auto_complete_config), else None."""
        return None

    def memory_bytes(self) -> int:
        """Memory the loaded model holds (host or device); 0 when unknown."""
        return 0

    @abstractmethod
    def unload(self) -> None:
        """Free everything the model holds. The object is not used afterwards."""
