"""A TF Serving model's mounts changed and its models loaded, for reload.py: new
versions on disk, or a new config. Loads and unloads are the core's ordinary calls, so
loaded versions serve on until their replacements are ready, and when one fails.
"""

from __future__ import annotations

import asyncio
import logging

from accel_base.errors import GatewayError, NotFound
from gateway.core.interface import Core
from gateway.protocols.tfserving.errors import from_gateway
from gateway.protocols.tfserving.served import TfModel, TfServing

log = logging.getLogger("accel_gateway")


async def unmount(core: Core, names: list[str]) -> None:
    """Unmount, then unload (in that order: a load on a request's first use that
    starts after finds no model, and one under way is unloaded once it is done)."""
    await core.set_mounts(dict.fromkeys(names))
    for name in names:
        try:
            await core.unload_model(name, None)
        except NotFound:
            pass  # never loaded
        except GatewayError as exc:
            log.warning("TF Serving: unloading '%s': %s", name, exc.message)


async def mount_and_load(
    core: Core, tfs: TfServing, model: TfModel, signatures: dict[str, list[int]]
) -> None:
    """Serve `model` (new, or new on disk or in its config) with these signatures
    (served_signatures()): mounted, its own model loaded again, then all of its
    signature models together (as at start); requests see them after. TfsError for
    the first load that failed:
    - its own model's, for a model served before: it serves on as it was (mounts
      and signatures), with the versions the repository kept, until the versions
      on disk change again;
    - its own model's, for a new one: it is served all the same (its status says
      why it is not available);
    - a signature model's: the model serves its new versions, and the failed
      signature the versions its model kept, if any."""
    name = model.name
    old_model, old = tfs.models.get(name), tfs.signatures.get(name)
    before = tfs.model_mounts(old_model, old) if old_model and old is not None else {}
    mounts = tfs.model_mounts(model, signatures)
    await core.set_mounts(mounts)
    failure: GatewayError | None = None
    try:
        await core.load_model(name, None)
    except GatewayError as exc:
        if old_model and before:  # served before: as it was
            await _put_back(core, model, old_model, mounts, before)
            raise from_gateway(exc) from None
        failure = exc
    results = await asyncio.gather(
        *(core.load_model(t, None) for t in sorted(set(mounts) - {name})),
        return_exceptions=True,
    )
    # Published once every signature has loaded (TF Serving's clients take AVAILABLE
    # to mean every signature answers; a request first would load it again).
    tfs.models = {**tfs.models, name: model}
    tfs.signatures[name] = signatures
    await unmount(core, sorted(set(before) - set(mounts)))  # no served version has them
    tfs.forget_versions(name)
    for result in results:
        if isinstance(result, GatewayError):
            failure = failure or result
        elif isinstance(result, BaseException):
            raise result
    if failure is not None:
        raise from_gateway(failure)


async def _put_back(
    core: Core, model: TfModel, old_model: TfModel, mounts: dict, before: dict
) -> None:
    """After its own load failed, a model's mounts as they were. One whose base path
    changed loads again from its old one: versions that did load came from the new."""
    await unmount(core, sorted(set(mounts) - set(before)))
    await core.set_mounts(before)
    if old_model.base_path != model.base_path:
        try:
            await core.load_model(model.name, None)
        except GatewayError as exc:
            log.error("TF Serving: model '%s' from %s again: %s", model.name,
                      old_model.base_path, exc.message)  # fmt: skip
