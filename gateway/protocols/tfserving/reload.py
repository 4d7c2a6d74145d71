"""What TF Serving serves, changed while it runs, as TF Serving changes it:

- new versions under a base path, and versions gone from it, are seen every
  `--file_system_poll_wait_seconds` (1 s, TF Serving's default): the model is loaded again
  by its version policy (`latest`: the new version loads, then the old one drains and
  unloads), and the signatures the versions declare are mounted anew;
- a new model config (HandleReloadConfigRequest, or the `--model_config_file` read again
  every `--model_config_file_poll_wait_seconds`, applied when it changed) replaces the
  served set: models it adds load (each served once its own model has, its signatures'
  models after) and those whose base path, policy or labels changed load again, all
  before the reload answers; then the models it drops are unloaded (their requests in
  flight drain).

A version directory is seen once its saved_model.pb can be read: copy a version in under
another name and rename it into place, as with TF Serving. While a model loads again its
loaded versions go on serving, and a version that fails to load leaves those it was to
replace serving (gateway/core/repository.py). A signature's model changes versions after
the model's own, and requests see the new signatures once both have. Changes run one at a
time, each to its end: a client that stops waiting for its reload does not stop it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from accel_base.version_dirs import available_versions
from backends.tfserving.signatures import ParseCache, signature_versions
from gateway.core.interface import Core
from gateway.protocols.tfserving.errors import TfsError, invalid
from gateway.protocols.tfserving.remount import mount_and_load, unmount
from gateway.protocols.tfserving.served import (
    TfModel,
    TfServing,
    policy_versions,
    served_signatures,
    versions_of,
)

log = logging.getLogger("accel_gateway")


@dataclass(frozen=True)
class Polling:
    """How often to look again (0: never): at the base paths, and at the config file
    through `read_config` (which raises ValueError for a file that cannot be served)."""

    versions_s: float = 1.0
    config_s: float = 0.0
    read_config: Callable[[], dict[str, TfModel]] | None = None


def _listing(model: TfModel) -> frozenset[int]:
    """The version directories under a base path (none when it is not a directory);
    OSError when it cannot be listed."""
    return frozenset(available_versions(model.base_path) if model.base_path.is_dir() else ())


class Reloader:
    """Applies new versions and new configs to TF Serving's models and the core's mounts."""

    def __init__(self, core: Core, tfs: TfServing) -> None:
        self.core, self.tfs = core, tfs
        self._lock = asyncio.Lock()
        # Per model: the versions served (as its signatures were last mounted), the
        # directories last listed in full, and its saved_model.pb files as parsed.
        self._seen = {name: versions_of(s) for name, s in tfs.signatures.items()}
        self._listed: dict[str, frozenset[int]] = {}
        self._parsed: dict[str, ParseCache] = {}
        self._unlistable: set[str] = set()  # base paths said to be unreadable, once
        self._file_models = dict(tfs.models)  # as the config file said when last read
        self._config_error = ""  # why the config file was last not applied
        self._applying: set[asyncio.Task] = set()

    # ---- the background task --------------------------------------------------------

    async def run(self, polling: Polling) -> None:
        """Poll until cancelled (the front's stop), which also ends a reload under way."""
        loops = []
        if polling.versions_s > 0:
            loops.append(self._every(polling.versions_s, self.poll_versions))
        if polling.config_s > 0 and polling.read_config is not None:
            read = polling.read_config
            loops.append(self._every(polling.config_s, lambda: self.poll_config(read)))
        try:
            await asyncio.gather(*loops)
            await asyncio.Event().wait()  # (nothing to poll: a reload by request may come)
        finally:
            for task in self._applying:
                task.cancel()
            await asyncio.gather(*self._applying, return_exceptions=True)

    async def _every(self, interval_s: float, step: Callable) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except TfsError as exc:  # said where it failed; the next poll tries again
                log.error("TF Serving: %s", exc.message)
            except Exception:  # a bad state on disk must not end polling
                log.exception("TF Serving: a poll failed")

    def _listings(self) -> list[tuple[TfModel, frozenset[int]]]:
        """Each model's version directories; a base path that cannot be listed is left
        out (said once), so that it stops no other model's polling."""
        found = []
        for name, model in self.tfs.models.items():
            try:
                found.append((model, _listing(model)))
            except OSError as exc:
                if name not in self._unlistable:
                    log.error("TF Serving: model '%s': cannot list %s: %s", name,
                              model.base_path, exc.strerror or exc)  # fmt: skip
                    self._unlistable.add(name)
                continue
            self._unlistable.discard(name)
        return found

    async def poll_versions(self) -> None:
        """Load again each model whose served versions changed on disk; one model's
        failure is logged and stops no other."""
        for model, listed in await asyncio.to_thread(self._listings):
            if listed == self._listed.get(model.name):
                continue
            try:
                await self._poll_model(model, listed)
            except TfsError as exc:
                log.error("TF Serving: model '%s': %s", model.name, exc.message)
            except OSError as exc:  # its base path changed under the poll: the next looks
                log.error("TF Serving: model '%s': %s", model.name, exc)

    async def _poll_model(self, model: TfModel, listed: frozenset[int]) -> None:
        name = model.name
        async with self._lock:
            if self.tfs.models.get(name) is not model:  # replaced or dropped meanwhile
                return
            cache = self._parsed.setdefault(name, {})
            for path in [p for p in cache if int(p.parent.name) not in listed]:
                del cache[path]  # (a version gone from disk)
            found = await asyncio.to_thread(signature_versions, model.base_path, cache)
            if versions_of(found) >= listed:  # else one is still being written:
                self._listed[name] = listed  # look at it again next time
            signatures = served_signatures(model, found)
            if versions_of(signatures) == self._seen.get(name):
                return
            log.info("TF Serving: model '%s' serves versions %s now", name,
                     sorted(versions_of(signatures)))  # fmt: skip
            await self._serve(model, signatures)

    async def _serve(self, model: TfModel, signatures: dict[str, list[int]]) -> None:
        """mount_and_load(), its versions seen first: tried, they are not tried again
        until they change on disk."""
        self._seen[model.name] = versions_of(signatures)
        await mount_and_load(self.core, self.tfs, model, signatures)

    async def poll_config(self, read: Callable[[], dict[str, TfModel]]) -> None:
        try:
            models = await asyncio.to_thread(read)
        except ValueError as exc:  # as TF Serving: the served set stays as it was
            if str(exc) != self._config_error:  # said once, not every poll
                log.error("TF Serving: the model config file was not applied: %s", exc)
            self._config_error = str(exc)
            return
        self._config_error = ""
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
            try:
                where = model.base_path.resolve()
            except (OSError, ValueError) as exc:  # (ValueError: a NUL byte in it)
                raise invalid(f"model '{model.name}': base_path: {exc}") from None
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
        for model in models.values():
            try:
                served = policy_versions(model, _listing(model))
            except OSError:
                served = set()
            for label, version in model.labels.items():
                if version not in served:
                    raise TfsError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"Request to assign label to version {version} of model "
                        f"{model.name}, which is not currently available for inference "
                        f"(label '{label}')",
                    )

    async def apply(self, models: dict[str, TfModel]) -> None:
        """Serve `models` instead of the current set; TfsError when it cannot be, or when
        a model failed to load (the others are applied all the same). It runs to its end
        even when the caller is cancelled: half a config would serve neither."""
        task = asyncio.ensure_future(self._apply(models))
        self._applying.add(task)
        task.add_done_callback(self._applied)
        await asyncio.shield(task)

    def _applied(self, task: asyncio.Task) -> None:
        self._applying.discard(task)
        if not task.cancelled():
            task.exception()  # (each failure was logged; a caller who left needs no more)

    async def _apply(self, models: dict[str, TfModel]) -> None:
        async with self._lock:
            await asyncio.to_thread(self._check_labels, models)
            old = self.tfs.models
            changed = [models[n] for n in sorted(models) if old.get(n) != models[n]]
            # The new and changed load together (the dropped go on serving meanwhile).
            failures = [
                f for f in await asyncio.gather(*(self._load_anew(m) for m in changed)) if f
            ]
            for name in sorted(set(old) - set(models)):
                await self._remove(name)
            log.info("TF Serving: serving %s", ", ".join(sorted(models)) or "no model")
            if failures:
                raise failures[0]

    async def _load_anew(self, model: TfModel) -> TfsError | None:
        """A model of a new config, mounted and loaded; its failure, logged. A changed
        model that failed serves on as it was configured, its state here as it was."""
        name = model.name
        states = (self._seen, self._listed, self._parsed)
        kept = [state.get(name) for state in states]
        cache: ParseCache = {}
        try:
            try:
                found = await asyncio.to_thread(signature_versions, model.base_path, cache)
            except OSError as exc:
                raise invalid(f"model '{name}': base_path {model.base_path}: "
                              f"{exc.strerror or exc}") from None  # fmt: skip
            self._parsed[name] = cache
            self._listed.pop(name, None)  # (the next poll looks at it afresh)
            await self._serve(model, served_signatures(model, found))
        except TfsError as exc:
            if name in self.tfs.models and self.tfs.models[name] is not model:
                for state, value in zip(states, kept, strict=True):
                    if value is None:
                        state.pop(name, None)
                    else:
                        state[name] = value  # type: ignore[assignment]
            log.error("TF Serving: model '%s': %s", name, exc.message)
            return exc
        except Exception as exc:  # (a bug: the other models' loads go on all the same)
            log.exception("TF Serving: model '%s' could not be loaded", name)
            return TfsError(grpc.StatusCode.INTERNAL, f"model '{name}': {exc}")
        return None

    async def _remove(self, name: str) -> None:
        """Stop serving a model: at once to new requests, once drained to those in flight."""
        self.tfs.models = {n: m for n, m in self.tfs.models.items() if n != name}
        signatures = self.tfs.signatures.pop(name, {})
        await unmount(self.core, list(self.tfs.model_mounts(TfModel(name, Path()), signatures)))
        for state in (self._seen, self._listed, self._parsed):
            state.pop(name, None)
