"""gateway/protocols/torchserve/management.py and scaling.py against a core that records
its loads: a burst of asynchronous scales costs one update more, not one each; a version
that cannot load leaves the model as it was; numbers past their bounds are 400s."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from backends.torchserve.store import Defaults, add_archive, read_config, versions_of
from gateway.protocols.torchserve.management import Management
from gateway.protocols.torchserve.models import TorchServeModels
from gateway.protocols.torchserve.replies import TsError


def archive(directory: Path, version: str = "1.0") -> Path:
    """An unpacked archive (`torch-model-archiver --archive-format no-archive`'s layout)."""
    (directory / "MAR-INF").mkdir(parents=True)
    manifest = {"model": {"modelName": "m", "modelVersion": version, "handler": "h.py"}}
    (directory / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    (directory / "h.py").write_text("def handle(data, context):\n    return data\n")
    return directory


class Core:
    """What the management calls ask of a core: loads and unloads, recorded; a load of a
    config naming `broken` in a version fails, as a load whose handler will not import."""

    def __init__(self, repository: Path) -> None:
        self.repository = repository
        self.loaded: set[str] = set()
        self.loads: list[int] = []  # the worker count each load asked for
        self.gate = asyncio.Event()
        self.gate.set()
        self.broken = ""

    async def loaded_models(self) -> list[str]:
        return sorted(self.loaded)

    async def load_model(self, name, token, parameters=None) -> None:
        await self.gate.wait()
        config = read_config(self.repository / name)
        self.loads.append(config.instance_group[0].count)
        if self.broken and self.broken in (versions_of(config) or {}):
            from accel_base.errors import Unavailable

            raise Unavailable(f"failed to load '{name}': version {self.broken} would not import")
        self.loaded.add(name)

    async def unload_model(self, name, token, parameters=None) -> None:
        self.loaded.discard(name)


@pytest.fixture
def served(tmp_path):
    repository = tmp_path / "repository"
    repository.mkdir()
    store = tmp_path / "store"
    archive(store / "m1")
    archive(store / "m2", version="2.0")
    add_archive(store / "m1", repository, Defaults())
    core = Core(repository)
    core.loaded.add("m")
    models = TorchServeModels(repository=repository, model_store=store, model_api=True)
    return core, Management(core, models), repository


def test_a_burst_of_asynchronous_scales_applies_the_last_count_once_more(served):
    core, management, repository = served

    async def scenario() -> None:
        core.gate.clear()  # the first update waits at its load
        assert (await management.scale("m", "", {"min_worker": "2"}))[0] == 202
        while not core.gate._waiters:  # the first update is at its load
            await asyncio.sleep(0.01)
        for workers in range(3, 41):
            status, _ = await management.scale("m", "", {"min_worker": str(workers)})
            assert status == 202
        core.gate.set()
        while management._updating:
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert core.loads == [2, 40]  # the first count, then only the last
    assert read_config(repository / "m").instance_group[0].count == 40


def test_a_version_that_cannot_load_leaves_the_model_as_it_was(served):
    core, management, repository = served

    async def scenario() -> None:
        await management.scale("m", "", {"min_worker": "2", "synchronous": "true"})
        core.broken = "2.0"
        await management.register({"url": "m2", "initial_workers": "1", "synchronous": "true"})

    with pytest.raises(Exception, match="would not import"):
        asyncio.run(scenario())
    config = read_config(repository / "m")
    assert versions_of(config) == {"1.0": "1"}
    assert config.instance_group[0].count == 2  # the count the failed load had changed
    assert sorted(p.name for p in (repository / "m").iterdir()) == ["1", "config.pbtxt"]
    assert core.loads[-1] == 2 and "m" in core.loaded  # loaded as it was again


@pytest.mark.parametrize(
    "params",
    [{"initial_workers": "5000000000"}, {"batch_size": "-1"}, {"max_batch_delay": "x"},
     {"response_timeout": "99999999999"}],
)  # fmt: skip
def test_numbers_past_their_bounds_are_refused_before_anything_changes(served, params):
    _, management, repository = served
    with pytest.raises(TsError) as refused:
        asyncio.run(management.register({"url": "m2", **params}))
    assert refused.value.http_status == 400 and next(iter(params)) in refused.value.message
    assert versions_of(read_config(repository / "m")) == {"1.0": "1"}


def test_an_archive_with_requirements_is_refused_unless_asked_to_install_them(served):
    _, management, repository = served
    needs = archive(management.models.model_store / "needs", version="3.0")
    manifest = json.loads((needs / "MAR-INF" / "MANIFEST.json").read_text())
    manifest["model"]["requirementsFile"] = "requirements.txt"
    (needs / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    (needs / "requirements.txt").write_text("numpy\n")
    with pytest.raises(TsError) as refused:
        asyncio.run(management.register({"url": "needs"}))
    assert refused.value.http_status == 400
    assert "install_py_dep_per_model=true" in refused.value.message
    assert versions_of(read_config(repository / "m")) == {"1.0": "1"}
