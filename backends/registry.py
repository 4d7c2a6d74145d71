"""The one registry of backends: the built-in ones (backends/platforms.py) and those a
package declares under the entry-point group `accel_gateway.backends`, each a `Platform`
(or a list of them). Found once, on first use; a name two backends claim is an error
that names both.

A backend package declares, in its pyproject.toml:

    [project.entry-points."accel_gateway.backends"]
    mine = "my_package.platform:PLATFORM"

and its `Platform` says where its `Backend` class lives (imported only when a model of
that platform loads, in the process that runs it).
"""

from __future__ import annotations

import functools
import importlib
import logging
from importlib.metadata import entry_points
from pathlib import Path

from backends.base import Backend, BackendUnavailable
from backends.platforms import BUILT_IN, Platform

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "accel_gateway.backends"


def _declared() -> list[Platform]:
    """The built-in platforms, then those of installed backend packages."""
    found = list(BUILT_IN)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
        except Exception as exc:  # one broken plug-in must not stop the server
            log.error("backend plug-in '%s' (%s) did not load: %s", point.name, point.value, exc)
            continue
        items = loaded if isinstance(loaded, (list, tuple)) else [loaded]
        for item in items:
            if not isinstance(item, Platform):
                log.error(
                    "backend plug-in '%s' (%s) is not a backends.platforms.Platform: %r",
                    point.name, point.value, item,
                )  # fmt: skip
                continue
            found.append(item)
    return found


@functools.cache
def platforms() -> dict[str, Platform]:
    """Every platform name and alias -> its backend. A name two backends claim stays
    with the first (the built-in ones come first), and the clash is logged: one plug-in
    must not take over a built-in name, nor stop the server."""
    by_name: dict[str, Platform] = {}
    for platform in _declared():
        for name in platform.names:
            other = by_name.get(name)
            if other is not None and other != platform:
                log.error(
                    "platform name '%s' is claimed by two backends: %s and %s; %s keeps it "
                    "(uninstall one of them)", name, other.module, platform.module, other.module,
                )  # fmt: skip
                continue
            by_name[name] = platform
    return by_name


def platform_info(name: str) -> Platform:
    try:
        return platforms()[name]
    except KeyError:
        known = ", ".join(sorted(platforms()))
        raise BackendUnavailable(
            f"unknown platform/backend '{name}', expected one of: {known}"
        ) from None


def backend_class(name: str) -> type[Backend]:
    """The backend class for a config's platform/backend name (imports its framework)."""
    info = platform_info(name)
    try:
        module = importlib.import_module(info.module)
    except ImportError as exc:
        install = f"pip install 'accel-gateway[{info.extra}]'" if info.extra else "its package"
        raise BackendUnavailable(
            f"backend '{name}' needs a package that is not installed ({exc.name}); "
            f"install it with: {install}"
        ) from exc
    return getattr(module, info.class_name)


def platform_of_artifact(version_dir: Path) -> str | None:
    """The platform a version directory's artifact means when no config names one
    (Triton's auto-complete for a model with no config), or None."""
    seen: set[str] = set()
    for platform in platforms().values():
        if platform.claims_artifact and platform.name not in seen:
            seen.add(platform.name)
            if platform.artifact and (version_dir / platform.artifact).exists():
                return platform.name
    return None
