"""Tensors in an arena and the leases on output ranges: pure pieces, no process."""

from __future__ import annotations

import numpy as np
import pytest

from accel_base.datatypes import NUMPY_DTYPES
from workers import protocol
from workers.arena import ALIGNMENT, MIN_ARENA_BYTES, Arena, grown_size
from workers.leases import OutputLeases


def sample(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(7)
    if datatype == "BYTES":
        values = [bytes(rng.integers(0, 256, size=int(n), dtype=np.uint8)) for n in range(6)]
        return np.array(values, dtype=np.object_).reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("datatype", sorted(NUMPY_DTYPES))
def test_every_datatype_round_trips_through_an_arena(datatype):
    arena = Arena(MIN_ARENA_BYTES)
    arrays = {"A": sample(datatype, (2, 3)), "B": sample(datatype, (3, 2))}
    placed = protocol.write_tensors(arena.buffer, arrays, 5, arena.size)
    assert not isinstance(placed, int)
    descriptors, end = placed
    assert all(d[3] % ALIGNMENT == 0 for d in descriptors)
    assert end <= arena.size
    read = protocol.read_tensors(arena.buffer, descriptors)
    for name, array in arrays.items():
        assert read[name].shape == array.shape
        assert read[name].dtype == array.dtype
        np.testing.assert_array_equal(read[name], array)
    del read
    arena.close()


def test_a_batch_that_does_not_fit_reports_the_bytes_it_needs():
    arena = Arena(MIN_ARENA_BYTES)
    big = np.zeros(MIN_ARENA_BYTES // 4, dtype=np.float32)
    needed = protocol.write_tensors(arena.buffer, {"A": big}, 64, arena.size)
    assert needed == big.nbytes
    assert grown_size(needed, arena.size) >= needed + 64
    arena.close()


def test_empty_tensors_at_the_end_of_an_arena():
    arena = Arena(MIN_ARENA_BYTES)
    descriptors = [("A", "<f4", (0, 4), arena.size, 0)]
    assert protocol.read_tensors(arena.buffer, descriptors)["A"].shape == (0, 4)
    arena.close()


def test_messages_over_the_limit_are_refused():
    left, right = protocol.socket_pair()
    with pytest.raises(ValueError, match="over"):
        protocol.send(left, ("run", "x" * protocol.RUN_MESSAGE_BYTES))
    protocol.send(left, ("run", [("A", "<f4", (1, 2), 0, 8)], ["B"], 0, 64, 64))
    message, fds = protocol.receive(right)
    assert message[0] == "run" and fds == []
    left.close()
    with pytest.raises(EOFError):
        protocol.receive(right)
    right.close()


def test_leases_give_the_largest_free_range():
    leases = OutputLeases()
    assert leases.window(1000) == (0, 1000)
    first, second, third = (np.zeros(1) for _ in range(3))
    leases.lease(first, 0, 100)
    leases.lease(second, 100, 700)
    view = second[:]  # a view of a holder keeps the lease
    assert leases.window(1000) == (700, 1000)
    del first
    assert leases.window(1000) == (700, 1000)  # 300 free at the end beats 100 at the start
    del second
    assert leases.window(1000) == (700, 1000)
    del view
    assert leases.window(1000) == (0, 1000)
    leases.lease(third, 400, 500)
    assert leases.window(1000) == (500, 1000)
    leases.forget()
    assert len(leases) == 0
    del third  # released after forget(): no error


def test_arena_close_while_views_exist():
    arena = Arena(MIN_ARENA_BYTES)
    view = np.frombuffer(arena.buffer, np.uint8, 16, 0)
    arena.close()  # the mapping stays while the view does
    view[:] = 1
    assert view.sum() == 16
