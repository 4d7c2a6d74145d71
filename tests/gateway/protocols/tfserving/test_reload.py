"""TF Serving's reloads (reload.py): which versions a policy serves, where a reload by
request may find base paths, and what a poll loads and unloads, against a core that
records what it is asked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from accel_base.errors import NotFound, Unavailable
from gateway.protocols.tfserving.errors import TfsError
from gateway.protocols.tfserving.reload import Polling, Reloader
from gateway.protocols.tfserving.served import TfModel, TfServing, policy_versions
from gateway.tools.tfserving.command import _beside


@pytest.mark.parametrize(
    ("policy", "served"),
    [
        ({}, {7}),
        ({"latest": {"num_versions": 2}}, {3, 7}),
        ({"all": {}}, {1, 3, 7}),
        ({"specific": {"versions": [1, 9]}}, {1}),
    ],
)
def test_policy_versions(policy, served) -> None:
    assert policy_versions(TfModel("m", Path("/m"), policy), frozenset({1, 3, 7})) == served


def test_a_reload_may_name_base_paths_only_inside_the_start_s_roots(tmp_path) -> None:
    root, outside = tmp_path / "models", tmp_path / "elsewhere"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)  # inside by its name, outside where it leads
    tfs = TfServing({}, reload_roots=(root,))
    reloader = Reloader(core=None, tfs=tfs)  # type: ignore[arg-type]  (checks only)
    reloader.check_roots({"a": TfModel("a", root / "a"), "b": TfModel("b", root / "b")})
    for base in (outside, root / "link", root / ".." / "elsewhere"):
        with pytest.raises(TfsError) as refused:
            reloader.check_roots({"x": TfModel("x", base)})
        assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED


def _save(base: Path, version: int, *signatures: str) -> None:
    """A version whose saved_model.pb declares these signatures (nothing else: the
    reloader reads only their names)."""
    from accel_base.proto.tfserving.tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    graph = model.meta_graphs.add()
    graph.meta_info_def.tags.append("serve")
    for name in signatures:
        graph.signature_def[name].method_name = "tensorflow/serving/predict"
    (base / str(version)).mkdir(parents=True)
    (base / str(version) / "saved_model.pb").write_bytes(model.SerializeToString())


class RecordingCore:
    """What the reloader asks of the core, recorded; `failing` models fail to load."""

    def __init__(self, loaded: set[str], failing: set[str] = frozenset()) -> None:
        self.loaded, self.failing = set(loaded), set(failing)
        self.mounts: dict = {}
        self.calls: list[tuple[str, str]] = []

    async def loaded_models(self) -> list[str]:
        return sorted(self.loaded)

    async def set_mounts(self, mounts: dict) -> None:
        for name, mount in mounts.items():
            if mount is None:
                self.mounts.pop(name, None)
            else:
                self.mounts[name] = mount

    async def load_model(self, name: str, config: object) -> None:
        self.calls.append(("load", name))
        if name in self.failing:
            raise Unavailable(f"failed to load '{name}'")
        self.loaded.add(name)

    async def unload_model(self, name: str, config: object) -> None:
        # Unmounted first: a request's first use cannot load it again after.
        assert name not in self.mounts, f"{name} unloaded while still mounted"
        self.calls.append(("unload", name))
        if name not in self.loaded:
            raise NotFound(f"model '{name}' is not loaded")
        self.loaded.discard(name)


def _polled(tmp_path: Path, core: RecordingCore) -> tuple[Reloader, TfServing, Path]:
    base = tmp_path / "m"
    _save(base, 1, "serving_default", "old", "kept")
    tfs = TfServing({"m": TfModel("m", base)})
    tfs.signatures.update(tfs.discover_signatures())
    core.mounts.update(tfs.mounts())
    return Reloader(core, tfs), tfs, base  # type: ignore[arg-type]


def test_a_new_version_loads_the_model_then_its_signatures(tmp_path) -> None:
    core = RecordingCore({"m", "m:old", "m:kept"})
    reloader, tfs, base = _polled(tmp_path, core)
    asyncio.run(reloader.poll_versions())  # nothing new: nothing loads
    assert core.calls == []
    _save(base, 2, "serving_default", "kept", "new")
    asyncio.run(reloader.poll_versions())
    # `old` only version 1 has, which the latest policy no longer serves: unloaded
    # after the model and its other signatures loaded.
    assert core.calls == [("load", "m"), ("load", "m:kept"), ("load", "m:new"),
                          ("unload", "m:old")]  # fmt: skip
    assert tfs.signatures["m"] == {"kept": [2], "new": [2], "serving_default": [2]}
    assert sorted(core.mounts) == ["m", "m:kept", "m:new"]
    core.calls.clear()
    asyncio.run(reloader.poll_versions())  # the same directories: parsed once, no load
    assert core.calls == []


def test_a_failed_load_leaves_the_model_serving_as_it_was(tmp_path, caplog) -> None:
    core = RecordingCore({"m", "m:old", "m:kept"}, failing={"m"})
    reloader, tfs, base = _polled(tmp_path, core)
    mounted = dict(core.mounts)
    _save(base, 2, "serving_default", "old", "new")
    asyncio.run(reloader.poll_versions())  # (logged: the other models' polls go on)
    assert "TF Serving: model 'm': failed to load 'm'" in caplog.text
    # Its signatures do not load: version 1 serves on (the repository keeps it), with
    # its signatures as they were mounted, and `new` is mounted no more.
    assert core.calls == [("load", "m"), ("unload", "m:new")]
    assert tfs.signatures["m"] == {"kept": [1], "old": [1], "serving_default": [1]}
    assert core.mounts == mounted
    assert core.loaded == {"m", "m:old", "m:kept"}
    # The next change on disk is tried.
    core.failing.clear()
    core.calls.clear()
    _save(base, 3, "serving_default", "old")
    asyncio.run(reloader.poll_versions())
    assert core.calls == [("load", "m"), ("load", "m:old"), ("unload", "m:kept")]
    assert tfs.signatures["m"] == {"old": [3], "serving_default": [3]}
    assert core.mounts["m:old"][2] == {3} and core.mounts["m"][2] == {3}


def test_a_signature_that_fails_leaves_the_new_versions_served(tmp_path, caplog) -> None:
    core = RecordingCore({"m", "m:old", "m:kept"}, failing={"m:kept"})
    reloader, tfs, base = _polled(tmp_path, core)
    _save(base, 2, "serving_default", "kept")
    asyncio.run(reloader.poll_versions())
    assert "failed to load 'm:kept'" in caplog.text
    # The model serves version 2 now: its signatures are version 2's (`kept` serves
    # what its repository model kept), and `old`, which version 2 lacks, is gone.
    assert tfs.signatures["m"] == {"kept": [2], "serving_default": [2]}
    assert "m:old" not in core.mounts and "m:old" not in core.loaded
    core.calls.clear()
    asyncio.run(reloader.poll_versions())  # nothing changed on disk: not tried again
    assert core.calls == []


def test_a_changed_model_that_fails_to_load_serves_on_as_configured(tmp_path) -> None:
    core = RecordingCore({"m", "m:old", "m:kept"})
    reloader, tfs, base = _polled(tmp_path, core)
    mounted, before = dict(core.mounts), tfs.models["m"]
    moved = tmp_path / "moved"
    _save(moved, 1, "serving_default")
    core.failing.add("m")
    with pytest.raises(TfsError):
        asyncio.run(reloader.apply({"m": TfModel("m", moved)}))
    assert tfs.models["m"] is before and core.mounts == mounted
    assert tfs.signatures["m"] == {"kept": [1], "old": [1], "serving_default": [1]}
    # Loaded again from its old base path (a version that did load came from the new),
    # and nothing on disk changed: the next poll loads nothing.
    assert core.calls == [("load", "m"), ("load", "m")]
    core.calls.clear()
    asyncio.run(reloader.poll_versions())
    assert core.calls == []


def test_a_base_path_that_cannot_be_read_fails_its_model_alone(tmp_path, monkeypatch) -> None:
    import gateway.protocols.tfserving.reload as reload

    core = RecordingCore({"m", "m:old", "m:kept"})
    reloader, tfs, _ = _polled(tmp_path, core)
    locked = tmp_path / "locked"
    locked.mkdir()
    real = reload.signature_versions

    def versions(base: Path, cache: dict) -> dict:
        if base == locked:
            raise PermissionError(13, "Permission denied")
        return real(base, cache)

    monkeypatch.setattr(reload, "signature_versions", versions)
    with pytest.raises(TfsError) as refused:
        asyncio.run(reloader.apply({"n": TfModel("n", locked)}))  # and `m` dropped
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"base_path {locked}: Permission denied" in refused.value.message
    assert tfs.models == {} and core.mounts == {}


def test_a_dropped_model_is_unmounted_then_unloaded(tmp_path) -> None:
    core = RecordingCore({"m", "m:old"})  # (m:kept never loaded)
    reloader, tfs, _ = _polled(tmp_path, core)
    asyncio.run(reloader.apply({}))
    assert core.mounts == {} and core.loaded == set()
    assert tfs.models == {} and tfs.signatures == {}


def test_stopping_ends_a_reload_under_way(tmp_path) -> None:
    class Stuck(RecordingCore):
        async def load_model(self, name: str, config: object) -> None:
            await asyncio.Event().wait()

    async def scenario() -> asyncio.Task:
        reloader, tfs, base = _polled(tmp_path, Stuck(set()))
        polling = asyncio.create_task(reloader.run(Polling(versions_s=0)))
        models = {**tfs.models, "n": TfModel("n", base)}
        asking = asyncio.create_task(reloader.apply(models))
        await asyncio.sleep(0.05)
        (applying,) = reloader._applying  # loading `n`, for ever
        polling.cancel()
        await asyncio.gather(polling, asking, return_exceptions=True)
        return applying

    task = asyncio.run(scenario())
    assert task.cancelled()


def test_a_version_still_being_written_is_looked_at_again(tmp_path) -> None:
    core = RecordingCore({"m"})
    reloader, tfs, base = _polled(tmp_path, core)
    (base / "2").mkdir()  # its saved_model.pb not there yet
    asyncio.run(reloader.poll_versions())
    assert core.calls == []
    (base / "2" / "saved_model.pb").write_bytes((base / "1" / "saved_model.pb").read_bytes())
    asyncio.run(reloader.poll_versions())
    assert core.calls[0] == ("load", "m")
    assert tfs.signatures["m"]["serving_default"] == [2]


def test_base_paths_at_the_top_are_not_beside_anything() -> None:
    assert _beside(Path("/models/m")) == Path("/models")
    assert _beside(Path("/m")) == Path("/m")  # never the whole machine
