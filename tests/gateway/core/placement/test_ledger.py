"""Placement by bytes over a fake inventory: best fit, eviction by LRU, and no room."""

from __future__ import annotations

import pytest

from backends.base import Device
from gateway.core.placement.inventory import DeviceMemory
from gateway.core.placement.ledger import Candidate, Ledger, NoRoom

GiB = 2**30
CPU, GPU0, GPU1 = Device("cpu"), Device("gpu", 0), Device("gpu", 1)


def ledger(**budgets_gib: float) -> Ledger:
    devices = {"cpu": CPU, "gpu0": GPU0, "gpu1": GPU1}
    return Ledger([
        DeviceMemory(devices[name], int(gib * GiB), int(gib * GiB), int(gib * GiB))
        for name, gib in budgets_gib.items()
    ])  # fmt: skip


def test_an_instance_goes_where_it_fits_best():
    books = ledger(gpu0=10, gpu1=10)
    books.book("a", "a", GPU0, 6 * GiB)
    books.book("b", "b", GPU1, 2 * GiB)
    # 3 GiB fits both; on gpu0 it leaves 1 GiB, on gpu1 5 GiB: best fit is gpu0.
    assert books.place("c", 3 * GiB, [GPU0, GPU1], []).device == GPU0
    # 5 GiB fits gpu1 only.
    assert books.place("c", 5 * GiB, [GPU0, GPU1], []).device == GPU1
    # A pin (instance_group.gpus) is obeyed even where another device fits better.
    assert books.place("c", 3 * GiB, [GPU1], []).device == GPU1


def test_a_load_that_cannot_fit_names_the_sizes():
    books = ledger(cpu=4)
    books.book("a", "a", CPU, 3 * GiB)
    with pytest.raises(NoRoom) as refused:
        books.place("big", 2 * GiB, [CPU], [])
    message = refused.value.message
    assert "'big' does not fit" in message and "needs 2.0 GiB" in message
    assert "1.0 GiB free of its 4.0 GiB budget" in message
    assert refused.value.http_status == 503 and refused.value.grpc_status == "RESOURCE_EXHAUSTED"
    with pytest.raises(NoRoom):  # larger than the whole budget: evicting cannot help
        books.place("huge", 5 * GiB, [CPU], [Candidate("a", 0.0)])
    with pytest.raises(NoRoom, match="may only run on gpu:0"):
        books.place("g", 1, [GPU0], [])


def test_eviction_takes_the_least_recently_used_and_no_more_than_needed():
    books = ledger(cpu=10)
    for name, gib in (("old", 2), ("older", 3), ("new", 4)):
        books.book(name, name, CPU, gib * GiB)
    idle = [Candidate("new", 30.0), Candidate("old", 20.0), Candidate("older", 10.0)]
    # 1 GiB free: 3 GiB needs 2 more; the oldest ('older', 3 GiB) is enough.
    assert books.place("x", 3 * GiB, [CPU], idle).evict == ("older",)
    # 5 GiB needs 4 more: 'older' then 'old' (5 GiB together).
    assert books.place("x", 5 * GiB, [CPU], idle).evict == ("older", "old")
    # Only idle, unpinned candidates count: without 'older' on the list, it stays.
    assert books.place("x", 3 * GiB, [CPU], idle[:2]).evict == ("old",)


def test_a_newer_model_taken_on_the_way_is_spared_when_an_older_one_suffices():
    books = ledger(cpu=10)
    books.book("small", "small", CPU, 1 * GiB)
    books.book("large", "large", CPU, 8 * GiB)
    idle = [Candidate("small", 1.0), Candidate("large", 2.0)]
    # 1 GiB free, 6 needed: 'small' then 'large' reach it; 'large' alone suffices.
    assert books.place("x", 6 * GiB, [CPU], idle).evict == ("large",)


def test_the_device_needing_the_fewest_evictions_is_chosen():
    books = ledger(gpu0=10, gpu1=10)
    books.book("a", "a", GPU0, 5 * GiB)
    books.book("b", "b", GPU0, 5 * GiB)
    books.book("c", "c", GPU1, 9 * GiB)
    idle = [Candidate("a", 1.0), Candidate("b", 2.0), Candidate("c", 3.0)]
    placement = books.place("x", 8 * GiB, [GPU0, GPU1], idle)
    assert placement.device == GPU1 and placement.evict == ("c",)


def test_measured_bytes_replace_the_prediction_when_larger():
    books = ledger(cpu=10)
    books.book("a/1/0#0", "a", CPU, 2 * GiB)
    assert books.measure("a/1/0#0", 1 * GiB) == 0
    assert books.used(CPU) == 2 * GiB  # the larger of the two
    assert books.measure("a/1/0#0", 12 * GiB) == 2 * GiB  # past the budget by 2 GiB
    books.release_model("a")
    assert books.used(CPU) == 0
