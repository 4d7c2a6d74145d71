"""What a management change (register, scale, unregister) puts back when it fails half
way: the model's config as it was, whether it was loaded, and the version directory the
change added. A change is made under the model's lock; so is its restore."""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from backends.torchserve.store import CONFIG, write_config_text
from gateway.core.interface import Core

log = logging.getLogger("accel_gateway")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


@dataclass
class Snapshot:
    name: str
    directory: Path
    config: str | None  # the config's text; None: there was no such model
    loaded: bool
    added: Path | None = None  # a version directory the change added

    @classmethod
    async def take(cls, core: Core, repository: Path, name: str) -> Snapshot:
        directory = repository / name
        config = await asyncio.to_thread(_read, directory / CONFIG)
        return cls(name, directory, config, name in await core.loaded_models())

    async def restore(self, core: Core, token: str | None) -> None:
        """Put the model back as it was: its files, then what is loaded of it (a failure
        to reload is logged; the versions that served go on serving meanwhile)."""
        try:
            loaded = self.name in await core.loaded_models()
            if self.config is None:
                if loaded:
                    await core.unload_model(self.name, token)
                await asyncio.to_thread(shutil.rmtree, self.directory, True)
                return
            await asyncio.to_thread(write_config_text, self.directory, self.config)
            if self.added is not None:
                await asyncio.to_thread(shutil.rmtree, self.added, True)
            if self.loaded:
                await core.load_model(self.name, token)
            elif loaded:
                await core.unload_model(self.name, token)
        except Exception as exc:
            log.warning("TorchServe management: model '%s' could not be put back as it was: "
                        "%s", self.name, exc)  # fmt: skip
