"""backends/torchserve/archive.py: archives unpack where they are told, and nothing else."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import zipfile

import pytest

from backends.torchserve.archive import ArchiveError, read_manifest, read_model_config, unpack

MANIFEST = {"model": {"modelName": "m", "handler": "h.py", "modelVersion": "2.0",
                      "configFile": "model-config.yaml"}}  # fmt: skip


def write_zip(path, members: dict[str, bytes], links: dict[str, str] | None = None):
    with zipfile.ZipFile(path, "w") as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zipped.writestr(info, target)
    return path


def base_members() -> dict[str, bytes]:
    return {"MAR-INF/MANIFEST.json": json.dumps(MANIFEST).encode(), "h.py": b"",
            "model-config.yaml": b"batchSize: 4\nmaxBatchDelay: 20\n"}  # fmt: skip


def test_a_mar_unpacks_with_its_manifest_and_model_config(tmp_path):
    root = unpack(write_zip(tmp_path / "m.mar", base_members()), tmp_path / "out")
    manifest = read_manifest(root)
    assert (manifest.model_name, manifest.handler, manifest.model_version) == ("m", "h.py", "2.0")
    assert read_model_config(root, manifest) == {"batchSize": 4, "maxBatchDelay": 20}


@pytest.mark.parametrize("member", ["../escape.py", "/abs.py", "a/../../escape.py"])
def test_a_member_that_leaves_the_archive_is_refused_before_anything_is_written(tmp_path, member):
    archive = write_zip(tmp_path / "m.mar", {**base_members(), member: b"x"})
    with pytest.raises(ArchiveError, match="would leave"):
        unpack(archive, tmp_path / "out" / "m")
    assert not (tmp_path / "out" / "m").exists()
    assert not (tmp_path / "escape.py").exists() and not (tmp_path / "out" / "escape.py").exists()


def test_a_link_in_a_zip_is_refused(tmp_path):
    archive = write_zip(tmp_path / "m.mar", base_members(), links={"passwd": "/etc/passwd"})
    with pytest.raises(ArchiveError, match="link or a special file"):
        unpack(archive, tmp_path / "out")


def write_tar(path, members: dict[str, bytes], link: str | None = None):
    """A tarball wrapping the members in a directory "m/", as `tgz` archives do."""
    with tarfile.open(path, "w:gz") as tarred:
        for name, data in members.items():
            info = tarfile.TarInfo(f"m/{name}")
            info.size = len(data)
            tarred.addfile(info, io.BytesIO(data))
        if link is not None:
            entry = tarfile.TarInfo("m/passwd")
            entry.type, entry.linkname = tarfile.SYMTYPE, link
            tarred.addfile(entry)
    return path


def test_a_link_in_a_tarball_is_refused(tmp_path):
    archive = write_tar(tmp_path / "m.tar.gz", base_members(), link="/etc/passwd")
    with pytest.raises(ArchiveError, match="link or a special file"):
        unpack(archive, tmp_path / "out")


def test_a_tarball_wrapping_its_directory_unpacks_to_that_directory(tmp_path):
    root = unpack(write_tar(tmp_path / "m.tar.gz", base_members()), tmp_path / "out")
    assert root == tmp_path / "out" / "m" and read_manifest(root).model_name == "m"


def test_a_directory_with_a_link_out_is_refused(tmp_path):
    source = tmp_path / "m"
    for name, data in base_members().items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(data)
    os.symlink("/etc/passwd", source / "passwd")
    with pytest.raises(ArchiveError, match="link or a special file"):
        unpack(source, tmp_path / "out")


def test_an_archive_over_the_size_bound_is_refused(tmp_path):
    archive = write_zip(tmp_path / "m.mar", {**base_members(), "big.bin": b"\0" * 4096})
    with pytest.raises(ArchiveError, match="over 1000"):
        unpack(archive, tmp_path / "out", max_bytes=1000)


def test_an_archive_without_a_manifest_says_what_it_lacks(tmp_path):
    archive = write_zip(tmp_path / "m.mar", {"h.py": b""})
    with pytest.raises(ArchiveError, match="no MAR-INF/MANIFEST.json"):
        unpack(archive, tmp_path / "out")


def test_a_model_config_outside_the_archive_is_refused(tmp_path):
    manifest = {"model": {**MANIFEST["model"], "configFile": "../../etc/passwd"}}
    members = {**base_members(), "MAR-INF/MANIFEST.json": json.dumps(manifest).encode()}
    root = unpack(write_zip(tmp_path / "m.mar", members), tmp_path / "out")
    with pytest.raises(ArchiveError, match="would leave"):
        read_model_config(root, read_manifest(root))


def test_a_truncated_archive_says_it_cannot_be_read(tmp_path):
    whole = write_tar(tmp_path / "whole.tar.gz", base_members()).read_bytes()
    cut = tmp_path / "m.tar.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ArchiveError, match="cannot be read.*torch-model-archiver"):
        unpack(cut, tmp_path / "out")
    assert not (tmp_path / "out").exists()
