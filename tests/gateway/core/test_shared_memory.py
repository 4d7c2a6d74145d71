"""The system shared-memory registry on real /dev/shm objects: keys, bounds, BYTES, and
unregistering a region that a request still uses."""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from accel_base.datatypes import serialize_bytes
from accel_base.errors import InvalidArgument, PermissionDenied
from gateway.core import shared_memory_window
from gateway.core.inference import InferResponse, RequestedOutput, Tensor
from gateway.core.shared_memory import BYTE_SIZE, OFFSET, REGION, SharedMemoryRegistry

SHM = "/dev/shm"


@pytest.fixture
def shm_object() -> Iterator[Callable[[int], tuple[str, mmap.mmap]]]:
    """Create /dev/shm objects as a client would (key, client-side mapping); all removed after."""
    made: list[tuple[str, mmap.mmap]] = []

    def make(size: int) -> tuple[str, mmap.mmap]:
        name = f"gw-test-{uuid.uuid4().hex[:12]}"
        fd = os.open(os.path.join(SHM, name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(fd, size)
        client = mmap.mmap(fd, size)
        os.close(fd)
        made.append((name, client))
        return "/" + name, client

    yield make
    for name, client in made:
        client.close()
        os.unlink(os.path.join(SHM, name))


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    registry = SharedMemoryRegistry(enabled=True)
    yield registry
    registry.unregister()


def params(region: str, size: int, offset: int = 0) -> dict:
    return {REGION: region, BYTE_SIZE: size, **({OFFSET: offset} if offset else {})}


def open_descriptors(key: str) -> int:
    """How many file descriptors of this process point at the shm object, besides the one
    that the test's own (client's) mapping keeps."""
    target = SHM + key
    count = 0
    for entry in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{entry}") == target
        except OSError:
            continue
    return count - 1


def test_register_status_unregister(registry, shm_object):
    key, _ = shm_object(8192)
    registry.register("r", key, 4100, 100)  # an offset that is not page-aligned
    assert registry.status() == [{"name": "r", "key": key, "offset": 4100, "byte_size": 100}]
    assert registry.status("r")[0]["byte_size"] == 100
    registry.unregister("nobody")  # unknown names are a no-op, as in Triton
    registry.unregister("r")
    assert registry.status() == []
    with pytest.raises(InvalidArgument, match="no system shared memory region 'r'"):
        registry.status("r")


def test_unregister_all(registry, shm_object):
    key, _ = shm_object(64)
    registry.register("a", key, 0, 32)
    registry.register("b", key, 32, 32)
    registry.unregister()
    assert registry.status() == []
    assert open_descriptors(key) == 0  # both regions closed


def test_off_by_default_refuses_with_the_flag(shm_object):
    key, _ = shm_object(64)
    registry = SharedMemoryRegistry(enabled=False)
    with pytest.raises(PermissionDenied, match="--allow-shared-memory"):
        registry.register("r", key, 0, 64)
    with pytest.raises(InvalidArgument, match="--allow-shared-memory"):
        registry.input_array("input 'x'", "INT8", (4,), params("r", 4))


@pytest.mark.parametrize(
    "key",
    ["../etc/passwd", "/../etc/passwd", "/a/b", "//x", "", "/", "/..", "/.", "x\0y", 7, None,
     "/\ud800", "/" + "k" * 300],
)  # fmt: skip
def test_keys_must_be_plain_shm_names(registry, key):
    with pytest.raises(InvalidArgument, match="key"):
        registry.register("r", key, 0, 1)


def test_key_that_does_not_exist(registry):
    with pytest.raises(InvalidArgument, match="cannot open shared-memory key '/gw-test-nothing'"):
        registry.register("r", "/gw-test-nothing", 0, 1)


def test_only_regular_objects_in_dev_shm(registry, tmp_path):
    name = f"gw-test-{uuid.uuid4().hex[:12]}"
    outside = tmp_path / "secret"
    outside.write_bytes(b"x" * 64)
    link = os.path.join(SHM, name)
    os.symlink(outside, link)
    try:  # a symlink planted in /dev/shm does not lead out of it
        with pytest.raises(InvalidArgument, match="cannot open"):
            registry.register("r", "/" + name, 0, 8)
    finally:
        os.unlink(link)
    os.mkfifo(link)
    try:  # a FIFO is refused at once, not waited on
        with pytest.raises(InvalidArgument, match="not a shared-memory object"):
            registry.register("r", "/" + name, 0, 8)
    finally:
        os.unlink(link)
    assert registry.status() == []


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [(0, 65, "beyond the 64 bytes"), (60, 8, "beyond the 64 bytes"), (2**64 - 1, 1, "beyond"),
     (0, 0, "byte_size must be an integer >= 1"), (-1, 8, "offset must be an integer >= 0"),
     (0, True, "byte_size must be an integer"), (0, "8", "byte_size must be an integer")],
)  # fmt: skip
def test_register_bounds(registry, shm_object, offset, byte_size, message):
    key, _ = shm_object(64)
    with pytest.raises(InvalidArgument, match=message):
        registry.register("r", key, offset, byte_size)


def test_duplicate_name_and_region_limit(shm_object):
    key, _ = shm_object(64)
    registry = SharedMemoryRegistry(enabled=True, max_regions=2)
    registry.register("a", key, 0, 8)
    with pytest.raises(InvalidArgument, match="'a' is already registered"):
        registry.register("a", key, 0, 8)
    registry.register("b", key, 8, 8)
    with pytest.raises(InvalidArgument, match="2 regions are registered"):
        registry.register("c", key, 16, 8)
    registry.unregister()


def test_input_is_read_from_the_region(registry, shm_object):
    key, client = shm_object(4096)
    client[16:32] = np.arange(4, dtype="<f4").tobytes()
    registry.register("r", key, 0, 4096)
    array = registry.input_array("input 'x'", "FP32", (2, 2), params("r", 16, 16))
    assert array.tolist() == [[0, 1], [2, 3]]
    client[16:20] = np.float32(42).tobytes()  # a copy: the request keeps what it was sent
    assert array[0, 0] == 0


def test_a_truncated_object_is_a_400_not_a_crash(registry, shm_object):
    """The window is mapped, and a mapping touched past the end of a shrunk file raises
    SIGBUS: the guarded copy turns it into a 400, for inputs and outputs alike."""
    key, client = shm_object(4096)
    registry.register("r", key, 0, 4096)
    assert registry._regions["r"]._window.mapped  # the extension was built (setup.py)
    os.truncate(SHM + key, 0)
    with pytest.raises(InvalidArgument, match="ends before .* was it truncated"):
        registry.input_array("input 'x'", "FP32", (4,), params("r", 16, 64))
    targets = registry.output_targets([RequestedOutput("y", params("r", 16))])
    response = InferResponse("m", "1", outputs=[Tensor("y", "FP32", np.ones(4, np.float32))])
    with pytest.raises(InvalidArgument, match="ends before 16 bytes; was it truncated"):
        registry.write_outputs(targets, response)
    registry.release_targets(targets)
    assert os.path.getsize(SHM + key) == 0
    os.truncate(SHM + key, 4096)  # grown again: the same mapping serves
    assert registry.input_array("input 'x'", "FP32", (4,), params("r", 16)).tolist() == [0] * 4


def test_an_object_cut_inside_a_page_is_a_400_too(registry, shm_object):
    """Past the end of a file but inside its last page, a mapping reads zeros and takes
    writes that vanish, without SIGBUS: the size is checked after each copy."""
    key, client = shm_object(8192)
    registry.register("r", key, 0, 8192)
    os.truncate(SHM + key, 4100)  # page 2 ends at 4100 now
    with pytest.raises(InvalidArgument, match="ends before 4112 bytes; was it truncated"):
        registry.input_array("input 'x'", "FP32", (4,), params("r", 16, 4096))
    targets = registry.output_targets([RequestedOutput("y", params("r", 16, 4096))])
    response = InferResponse("m", "1", outputs=[Tensor("y", "FP32", np.ones(4, np.float32))])
    with pytest.raises(InvalidArgument, match="ends before 4112 bytes; was it truncated"):
        registry.write_outputs(targets, response)
    registry.release_targets(targets)


def test_without_the_extension_a_truncated_object_is_read_short_and_written_longer(
    registry, shm_object, monkeypatch
):
    """pread/pwrite, where the guarded copy was not built: a short read is the 400, and a
    write past the end grows the file instead."""
    monkeypatch.setattr(shared_memory_window, "guarded_copy", None)
    key, client = shm_object(4096)
    registry.register("r", key, 0, 4096)
    assert not registry._regions["r"]._window.mapped
    client[64:80] = np.arange(4, dtype=np.float32).tobytes()
    assert registry.input_array("input 'x'", "FP32", (4,), params("r", 16, 64)).tolist() == [
        0, 1, 2, 3
    ]  # fmt: skip
    os.truncate(SHM + key, 0)
    with pytest.raises(InvalidArgument, match="ends before .* was it truncated"):
        registry.input_array("input 'x'", "FP32", (4,), params("r", 16, 64))
    targets = registry.output_targets([RequestedOutput("y", params("r", 16))])
    response = InferResponse("m", "1", outputs=[Tensor("y", "FP32", np.ones(4, np.float32))])
    registry.write_outputs(targets, response)
    registry.release_targets(targets)
    assert os.path.getsize(SHM + key) == 16


@pytest.mark.parametrize(
    ("parameters", "message"),
    [(params("r", 15), "is 15 but FP32 shape \\[2, 2\\] needs 16 bytes"),
     (params("r", 16, 60), "shared_memory_offset 60 \\+ shared_memory_byte_size 16 is beyond"),
     (params("nope", 16), "no system shared memory region 'nope'"),
     ({REGION: 3, BYTE_SIZE: 16}, "shared_memory_region must be a string"),
     ({REGION: "r"}, "shared_memory_byte_size must be an integer"),
     (params("r", 16) | {OFFSET: -4}, "shared_memory_offset must be an integer >= 0")],
)  # fmt: skip
def test_input_checks(registry, shm_object, parameters, message):
    key, _ = shm_object(64)
    registry.register("r", key, 0, 64)
    with pytest.raises(InvalidArgument, match=message):
        registry.input_array("input 'x'", "FP32", (2, 2), parameters)


def test_bytes_in_and_out(registry, shm_object):
    key, client = shm_object(256)
    registry.register("r", key, 0, 256)
    blob = serialize_bytes(np.array([b"ab", b"", b"\xff\x00"], dtype=np.object_))
    client[: len(blob)] = blob
    array = registry.input_array("input 'x'", "BYTES", (1, 3), params("r", len(blob)))
    assert array.tolist() == [[b"ab", b"", b"\xff\x00"]]
    with pytest.raises(InvalidArgument, match="left over"):  # one byte too many
        registry.input_array("input 'x'", "BYTES", (1, 3), params("r", len(blob) + 1))
    with pytest.raises(InvalidArgument, match="BYTES"):  # a length running past the window
        registry.input_array("input 'x'", "BYTES", (1, 3), params("r", len(blob) - 1))

    targets = registry.output_targets([RequestedOutput("y", params("r", 100, 128))])
    response = InferResponse("m", "1", outputs=[Tensor("y", "BYTES", array)])
    registry.write_outputs(targets, response)
    registry.release_targets(targets)
    assert client[128 : 128 + len(blob)] == blob
    assert response.outputs[0].parameters[REGION] == "r"


def test_output_written_and_too_small_named(registry, shm_object):
    key, client = shm_object(64)
    registry.register("r", key, 0, 64)
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    targets = registry.output_targets([RequestedOutput("y", params("r", 24, 8))])
    registry.write_outputs(targets, InferResponse("m", "1", outputs=[Tensor("y", "INT32", data)]))
    registry.release_targets(targets)
    assert np.frombuffer(client, "<i4", 6, 8).tolist() == list(range(6))

    small = registry.output_targets([RequestedOutput("y", params("r", 20))])
    with pytest.raises(InvalidArgument, match="'y' needs 24 bytes but .* region 'r' has 20"):
        registry.write_outputs(small, InferResponse("m", "1", outputs=[Tensor("y", "INT32", data)]))
    registry.release_targets(small)
    with pytest.raises(InvalidArgument, match="no system shared memory region 'gone'"):
        registry.output_targets([RequestedOutput("y", params("gone", 4))])


def test_unregister_closes_the_object(registry, shm_object):
    key, client = shm_object(64)
    client[:4] = np.int32(7).tobytes()
    registry.register("r", key, 0, 64)
    assert open_descriptors(key) == 1
    array = registry.input_array("input 'x'", "INT32", (1,), params("r", 4))
    registry.unregister("r")
    assert open_descriptors(key) == 0
    assert array[0] == 7


def test_unregister_between_check_and_write(registry, shm_object):
    key, client = shm_object(64)
    registry.register("r", key, 0, 64)
    targets = registry.output_targets([RequestedOutput("y", params("r", 8))])
    registry.unregister()  # while the model runs
    data = np.array([1.5, -2.0], dtype=np.float32)
    registry.write_outputs(targets, InferResponse("m", "1", outputs=[Tensor("y", "FP32", data)]))
    registry.release_targets(targets)
    assert np.frombuffer(client, "<f4", 2).tolist() == [1.5, -2.0]
    assert open_descriptors(key) == 0  # closed once its last writer finished
