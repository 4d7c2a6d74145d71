"""TorchServe model archives, unpacked where the gateway says and nowhere else.

`torch-model-archiver` writes a `.mar` (a zip; `--archive-format zip-store` stores it
uncompressed), a `.tar.gz` (`tgz`) or a plain directory (`no-archive`), each with
`MAR-INF/MANIFEST.json` naming the model, its handler and its files. An archive is a
user's upload: a member whose path leaves the destination (`../`, an absolute path) or
that is a link, a device or a pipe is refused before anything is written, and so is an
archive that would unpack to more than `max_bytes`.
"""

from __future__ import annotations

import json
import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST = PurePosixPath("MAR-INF/MANIFEST.json")
DEFAULT_MAX_BYTES = 16 << 30
ARCHIVE_SUFFIXES = (".mar", ".tar.gz", ".tgz", ".zip")


class ArchiveError(ValueError):
    """An archive that cannot be served, and why."""


@dataclass(frozen=True)
class Manifest:
    model_name: str
    model_version: str
    handler: str
    serialized_file: str = ""
    model_file: str = ""
    config_file: str = ""
    requirements_file: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


def archive_stem(path: Path) -> str:
    """`store/digits.mar` -> `digits`: the name an archive's file gives it."""
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def inside(root: Path, name: str | Path) -> Path | None:
    """`root / name` resolved (links and `..` followed) when it stays inside `root`; None
    when it leads out: where a model store, an archive or its directory is named from."""
    path = (root / name).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def _member_path(name: str, archive: Path) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise ArchiveError(f"{archive.name}: member '{name}' would leave the archive's directory")
    return path


def _check_members(archive: Path, max_bytes: int, members: list[tuple[str, bool, int]]) -> None:
    """Each (name, whether a plain file or directory, size) of an archive, checked before
    anything is written."""
    total = 0
    for name, plain, size in members:
        _member_path(name, archive)
        if not plain:
            raise ArchiveError(
                f"{archive.name}: member '{name}' is a link or a special file; "
                "an archive may hold only files and directories"
            )
        total += size
    if total > max_bytes:
        raise ArchiveError(f"{archive.name} unpacks to {total} bytes, over {max_bytes}")


def _unzip(archive: Path, destination: Path, max_bytes: int) -> None:
    with zipfile.ZipFile(archive) as zipped:
        members = zipped.infolist()
        _check_members(
            archive, max_bytes,
            # A zip's mode without a file type (0) is a plain file.
            [(m.filename, stat.S_IFMT(m.external_attr >> 16) in (0, stat.S_IFREG, stat.S_IFDIR),
              m.file_size) for m in members],
        )  # fmt: skip
        zipped.extractall(destination)


def _untar(archive: Path, destination: Path, max_bytes: int) -> None:
    with tarfile.open(archive) as tarred:
        members = tarred.getmembers()
        _check_members(
            archive, max_bytes,
            [(m.name, m.isfile() or m.isdir(), m.size) for m in members],
        )  # fmt: skip
        tarred.extractall(destination, members=members, filter="data")


def _copy_directory(source: Path, destination: Path, max_bytes: int) -> None:
    total = 0
    for path in source.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ArchiveError(
                f"{source.name}: '{path.relative_to(source)}' is a link or a special file; "
                "a model directory may hold only files and directories"
            )
        if path.is_file():
            total += path.stat().st_size
    if total > max_bytes:
        raise ArchiveError(f"{source.name} holds {total} bytes, over {max_bytes}")
    shutil.copytree(source, destination, dirs_exist_ok=True)


def _root(unpacked: Path) -> Path:
    """The directory holding MAR-INF: the top, or the one directory a tarball wraps it in."""
    if (unpacked / MANIFEST).is_file():
        return unpacked
    children = [child for child in unpacked.iterdir() if child.is_dir()]
    if len(children) == 1 and (children[0] / MANIFEST).is_file():
        return children[0]
    raise ArchiveError(f"no {MANIFEST} in the archive (is it a torch-model-archiver archive?)")


def unpack(source: Path, destination: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Path:
    """Unpack `source` (.mar, .zip, .tar.gz, .tgz or a directory) into `destination`, a
    directory that must not exist yet; returns the directory that holds MAR-INF."""
    destination.mkdir(parents=True)
    try:
        if source.is_dir():
            _copy_directory(source, destination, max_bytes)
        elif zipfile.is_zipfile(source):
            _unzip(source, destination, max_bytes)
        elif source.name.endswith((".tar.gz", ".tgz")) and tarfile.is_tarfile(source):
            _untar(source, destination, max_bytes)
        else:
            raise ArchiveError(f"{source.name} is neither a .mar (zip), a .tar.gz nor a directory")
        return _root(destination)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        shutil.rmtree(destination, ignore_errors=True)
        raise ArchiveError(
            f"{source.name} cannot be read ({exc}); rebuild it with torch-model-archiver"
        ) from None
    except BaseException:
        shutil.rmtree(destination, ignore_errors=True)
        raise


def read_manifest(model_dir: Path) -> Manifest:
    path = model_dir / MANIFEST
    try:
        raw = json.loads(path.read_text())
        model = raw["model"]
        return Manifest(
            model_name=str(model["modelName"]),
            model_version=str(model.get("modelVersion", "1.0")),
            handler=str(model["handler"]),
            serialized_file=str(model.get("serializedFile", "")),
            model_file=str(model.get("modelFile", "")),
            config_file=str(model.get("configFile", "")),
            requirements_file=str(model.get("requirementsFile", "")),
            raw=raw,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArchiveError(f"{path}: not a TorchServe manifest ({exc!r})") from None


def read_model_config(model_dir: Path, manifest: Manifest) -> dict[str, Any]:
    """The archive's model-config.yaml (`torch-model-archiver --config-file`), or {}."""
    if not manifest.config_file:
        return {}
    import yaml  # PyYAML comes with TorchServe's package

    path = model_dir / _member_path(manifest.config_file, model_dir)
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ArchiveError(f"{manifest.config_file}: cannot be read ({exc})") from None
    if not isinstance(config, dict):
        raise ArchiveError(f"{manifest.config_file}: expected a mapping at its top")
    return config
