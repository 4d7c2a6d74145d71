"""What TF Serving serves, changed while it runs, as TF Serving changes it:

- new versions under a base path, and versions gone from it, are seen every
  `--file_system_poll_wait_seconds` (1 s, TF Serving's default): the model is loaded again
  by its version policy (`latest`: the new version loads, then the old one drains and
  unloads), and the signatures the versions declare are mounted anew;
- a new model config (HandleReloadConfigRequest, or the `--model_config_file` read again
  every `--model_config_file_poll_wait_seconds`, applied when it changed) replaces the
  served set: models it drops are unloaded (their requests in flight drain), models it
  adds load before the reload answers, and models whose base path, policy or labels
  changed load again.

A version directory is seen once its saved_model.pb can be read: copy a version in under
another name and rename it into place, as with TF Serving. While a model loads again its
loaded versions go on serving (gateway/core/repository.py). Changes run one at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from accel_base.errors import GatewayError
from accel_base.version_dirs import available_versions
from backends.tfserving.signatures import signature_versions
from gateway.core.interface import Core
from gateway.protocols.tfserving.errors import TfsError, from_gateway
from gateway.protocols.tfserving.served import TfModel, TfServing, policy_versions

log = logging.getLogger("accel_gateway")


@dataclass(frozen=True)
class Polling:
    """How often to look again (0: never): at the base paths, and at the config file
    through `read_config` (which raises ValueError for a file that cannot be served)."""

    versions_s: float = 1.0
    config_s: float = 0.0
    read_config: Callable[[], dict[str, TfModel]] | None = None


def _versions_on_disk(models: dict[str, TfModel]) -> dict[str, frozenset[int]]:
    return {
        name: frozenset(available_versions(m.base_path)) if m.base_path.is_dir() else frozenset()
        for name, m in models.items()
    }  # fmt: skip


class Reloader:
    """Applies new versions and new configs to TF Serving's models and the core's mounts."""

    def __init__(self, core: Core, tfs: TfServing) -> None:
        self.core, self.tfs = core, tfs
        self._lock = asyncio.Lock()
        self._seen = _versions_on_disk(tfs.models)
        self._file_models = dict(tfs.models)  # as the config file said when last read

    # ---- the background task --------------------------------------------------------

    async def run(self, polling: Polling) -> None:
        """Poll until cancelled (the front's stop)."""
        loops = []
        if polling.versions_s > 0:
            loops.append(self._every(polling.versions_s, self.poll_versions))
        if polling.config_s > 0 and polling.read_config is not None:
            read = polling.read_config
            loops.append(self._every(polling.config_s, lambda: self.poll_config(read)))
        await asyncio.gather(*loops)

    async def _every(self, interval_s: float, step: Callable) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except Exception:  # a bad state on disk must not end polling
                log.exception("TF Serving: a poll failed")

    async def poll_versions(self) -> None:
        """Load again each model whose version directories changed on disk."""
        now = await asyncio.to_thread(_versions_on_disk, self.tfs.models)
        for name, versions in now.items():
            if versions == self._seen.get(name):
                continue
            model = self.tfs.models.get(name)
            if model is None:
                continue
            signatures = await asyncio.to_thread(signature_versions, model.base_path)
            readable = {v for found in signatures.values() for v in found}
            if not versions <= readable:  # one still being written: wait for it
                continue
            log.info("TF Serving: model '%s' has versions %s on disk now", name, sorted(versions))
            async with self._lock:
                if self.tfs.models.get(name) is model:  # not replaced meanwhile
                    self._seen[name] = versions
                    await self._mount_and_load(model, signatures)

    async def poll_config(self, read: Callable[[], dict[str, TfModel]]) -> None:
        try:
            models = await asyncio.to_thread(read)
        except ValueError as exc:  # as TF Serving: the served set stays as it was
            log.error("TF Serving: the model config file was not applied: %s", exc)
            return
        if models != self._file_models:  # the file changed: a reload by request stays
            self._file_models = models  # until then (a failed apply is not retried)
            await self.apply(models)

    # ---- a new config -----------------------------------------------------------------

    def check_roots(self, models: dict[str, TfModel]) -> None:
        """A reload by request names base paths only inside the directories that hold
        the start's: it must not make the server read a directory the operator did not
        name."""
        roots = [root.resolve() for root in self.tfs.reload_roots]
        for model in models.values():
            where = model.base_path.resolve()
            if not any(where == root or where.is_relative_to(root) for root in roots):
                raise TfsError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"model '{model.name}': base_path {model.base_path} is outside the "
                    f"directories this server was started with "
                    f"({', '.join(str(r) for r in roots)}); a reload may name only those",
                )

    def _check_labels(self, models: dict[str, TfModel]) -> None:
        if self.tfs.labels_for_unavailable:
            return
        on_disk = _versions_on_disk(models)
        for model in models.values():
            served = policy_versions(model, on_disk[model.name])
            for label, version in model.labels.items():
                if version not in served:
                    raise TfsError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"Request to assign label to version {version} of model "
                        f"{model.name}, which is not currently available for inference "
                        f"(label '{label}')",
                    )

    async def apply(self, models: dict[str, TfModel]) -> None:
        """Serve `models` instead of the current set; TfsError when it cannot be."""
        async with self._lock:
            await asyncio.to_thread(self._check_labels, models)
            old = self.tfs.models
            for name in sorted(set(old) - set(models)):
                await self._remove(name)
            for name in sorted(models):
                model = models[name]
                if old.get(name) == model:
                    continue
                signatures = await asyncio.to_thread(signature_versions, model.base_path)
                self._seen[name] = frozenset(
                    available_versions(model.base_path) if model.base_path.is_dir() else ()
                )
                for key in [k for k in self.tfs.signature_defs if k[0] == name]:
                    del self.tfs.signature_defs[key]
                await self._mount_and_load(model, signatures, publish=True)
            log.info("TF Serving: serving %s", ", ".join(sorted(models)) or "no model")

    async def _remove(self, name: str) -> None:
        """Stop serving a model: at once to new requests, once drained to those in flight."""
        self.tfs.models = {n: m for n, m in self.tfs.models.items() if n != name}
        mounts = list(self.tfs.model_mounts(TfModel(name, Path()),
                                            self.tfs.signatures.pop(name, {})))  # fmt: skip
        loaded = set(await self.core.loaded_models())
        for mounted in mounts:
            if mounted in loaded:
                try:
                    await self.core.unload_model(mounted, None)
                except GatewayError as exc:
                    log.warning("TF Serving: unloading '%s': %s", mounted, exc.message)
        await self.core.set_mounts(dict.fromkeys(mounts))
        self._seen.pop(name, None)

    async def _mount_and_load(
        self, model: TfModel, signatures: dict[str, list[int]], publish: bool = False
    ) -> None:
        """Mount the model's signatures as they are now and load it again, with those of
        its signature models that are loaded; `publish`: a model of a new config, which
        requests see once it has loaded."""
        name = model.name
        before = set(self.tfs.model_mounts(model, self.tfs.signatures.get(name, {})))
        mounts = self.tfs.model_mounts(model, signatures)
        loaded = set(await self.core.loaded_models())
        for gone in sorted(before - set(mounts)):  # a signature no version has now
            if gone in loaded:
                await self.core.unload_model(gone, None)
        await self.core.set_mounts({**dict.fromkeys(before - set(mounts)), **mounts})
        self.tfs.signatures[name] = signatures
        try:
            await self.core.load_model(name, None)
            for mounted in sorted(set(mounts) - {name}):
                if mounted in loaded:
                    await self.core.load_model(mounted, None)
        except GatewayError as exc:
            if publish:
                self.tfs.models = {**self.tfs.models, name: model}
            raise from_gateway(exc) from None
        if publish:
            self.tfs.models = {**self.tfs.models, name: model}
