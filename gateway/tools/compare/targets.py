"""Where a comparison sends its requests: the variants loaded in this process (through
the gateway's own repository and core, no network), or a running gateway over HTTP or
gRPC (tritonclient)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gateway.core.inference import InferRequest, Tensor

Inputs = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


def timed_loop(
    send: Callable[[Inputs], object], batches: list[Inputs], offset: int,
    max_requests: Callable[[], bool], deadline: float,
) -> list[float]:  # fmt: skip
    """Send batches one after another until `max_requests()` says stop or the deadline
    passes; each call's seconds."""
    latencies = []
    index = offset
    while time.perf_counter() < deadline and max_requests():
        start = time.perf_counter()
        send(batches[index % len(batches)])
        latencies.append(time.perf_counter() - start)
        index += 1
    return latencies


class Budget:
    """A count of requests shared by concurrent senders."""

    def __init__(self, count: int) -> None:
        self.left = count
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True


class InProcessTarget:
    """The gateway's repository and core on an event loop thread of this process; the
    variants load here (load time and measured memory come from this load)."""

    kind = "in-process"

    def __init__(self, repository: Path) -> None:
        from gateway.core.placement.options import MemoryOptions
        from gateway.core.repository import ModelRepository
        from gateway.core.service import InferenceCore

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def make() -> InferenceCore:
            memory = MemoryOptions().manager("explicit")
            return InferenceCore(ModelRepository(repository, "explicit", memory=memory))

        self.core = self._call(make())
        self.core.started = True
        self.datatypes: dict[str, dict[str, str]] = {}

    def _call(self, coroutine: Any, timeout_s: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def load(self, name: str) -> float | None:
        start = time.perf_counter()
        self._call(self.core.repository.load(name))
        return time.perf_counter() - start

    def metadata(self, name: str) -> dict[str, Any]:
        metadata = self._call(self.core.model_metadata(name))
        self.datatypes[name] = {t["name"]: t["datatype"] for t in metadata["inputs"]}
        return metadata

    async def _infer(self, name: str, inputs: Inputs) -> Outputs:
        types = self.datatypes[name]
        tensors = [Tensor(key, types[key], value) for key, value in inputs.items()]
        response = await self.core.infer(InferRequest(name, inputs=tensors))
        return {t.name: t.data for t in response.outputs}

    def infer(self, name: str, inputs: Inputs) -> Outputs:
        return self._call(self._infer(name, inputs))

    def run_load(
        self, name: str, batches: list[Inputs], concurrency: int, requests: int, seconds: float
    ) -> list[float]:
        async def run() -> list[float]:
            budget = Budget(requests)
            deadline = time.perf_counter() + seconds

            async def sender(offset: int) -> list[float]:
                latencies, index = [], offset
                while time.perf_counter() < deadline and budget.take():
                    start = time.perf_counter()
                    await self._infer(name, batches[index % len(batches)])
                    latencies.append(time.perf_counter() - start)
                    index += 1
                return latencies

            parts = await asyncio.gather(*(sender(i) for i in range(concurrency)))
            return [x for part in parts for x in part]

        return self._call(run())

    def memory_bytes(self, name: str) -> int | None:
        footprints = self.core.repository.get(name).footprints
        if not footprints:
            return None
        return sum(f.measured if f.measured is not None else f.predicted for f in footprints)

    def close(self) -> None:
        try:
            self._call(self.core.repository.unload_all(), timeout_s=120)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


class RemoteTarget:
    """A running gateway (or any V2 server) through tritonclient, HTTP or gRPC."""

    def __init__(self, url: str, protocol: str, reload: bool = False, token: str = "") -> None:
        if protocol == "grpc":
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
        self.module, self.url, self.protocol = module, url, protocol
        self.kind = protocol
        self.reload = reload
        self.headers = {"authorization": f"Bearer {token}"} if token else None
        self.client = module.InferenceServerClient(url)
        self.datatypes: dict[str, dict[str, str]] = {}
        self.outputs: dict[str, list[str]] = {}

    def load(self, name: str) -> float | None:
        """With `reload`: unload, then time the load call (explicit mode); else None."""
        if not self.reload:
            return None
        self.client.unload_model(name, headers=self.headers)
        start = time.perf_counter()
        self.client.load_model(name, headers=self.headers)
        return time.perf_counter() - start

    def metadata(self, name: str) -> dict[str, Any]:
        if self.protocol == "grpc":
            metadata = self.client.get_model_metadata(name, as_json=True)
            for tensor in (*metadata.get("inputs", []), *metadata.get("outputs", [])):
                tensor["shape"] = [int(d) for d in tensor.get("shape", [])]
        else:
            metadata = self.client.get_model_metadata(name)
        self.datatypes[name] = {t["name"]: t["datatype"] for t in metadata["inputs"]}
        self.outputs[name] = [t["name"] for t in metadata["outputs"]]
        return metadata

    def _send(self, client: Any, name: str, inputs: Inputs) -> Outputs:
        tensors = []
        for key, value in inputs.items():
            tensor = self.module.InferInput(key, list(value.shape), self.datatypes[name][key])
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)
        result = client.infer(name, tensors)
        return {out: result.as_numpy(out) for out in self.outputs[name]}

    def infer(self, name: str, inputs: Inputs) -> Outputs:
        return self._send(self.client, name, inputs)

    def run_load(
        self, name: str, batches: list[Inputs], concurrency: int, requests: int, seconds: float
    ) -> list[float]:
        budget = Budget(requests)
        deadline = time.perf_counter() + seconds
        clients = [self.module.InferenceServerClient(self.url) for _ in range(concurrency)]
        try:
            with ThreadPoolExecutor(concurrency) as pool:
                parts = pool.map(
                    lambda i: timed_loop(
                        lambda b: self._send(clients[i], name, b), batches, i, budget.take,
                        deadline,
                    ),
                    range(concurrency),
                )  # fmt: skip
                return [x for part in parts for x in part]
        finally:
            for client in clients:
                client.close()

    def memory_bytes(self, name: str) -> int | None:
        """The repository index's measured (else predicted) bytes; HTTP only, as the
        index's `memory` has no gRPC field."""
        if self.protocol == "grpc":
            return None
        for row in self.client.get_model_repository_index():
            memory = row.get("memory")
            if row.get("name") == name and row.get("state") == "READY" and memory:
                measured = memory.get("measured_bytes")
                return measured if measured is not None else memory.get("predicted_bytes")
        return None

    def close(self) -> None:
        self.client.close()
